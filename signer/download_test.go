package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mintgate/mintgate/api"
	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/quota"
	"github.com/mintgate/mintgate/signer/internal/apierr"
	"github.com/mintgate/mintgate/signer/internal/request"
)

// downloadEnv is a signer on versitygw whose tenant "open" lets any of
// its callers download its uploads, with extra on top.
func startDownloads(t *testing.T, extra map[string]string) *mpSigner {
	t.Helper()
	file := filepath.Join(t.TempDir(), "tenants.json")
	if err := os.WriteFile(file, []byte(`{"open":{"downloads":"tenant"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"MINTGATE_TIERS":             "anonymous=5:5/60s,user=100:0.001,tenant=1000:0.001",
		"MINTGATE_TENANT_TIERS_FILE": file,
	}
	for k, v := range extra {
		env[k] = v
	}
	return startMultipart(t, env)
}

// upload signs contentType bytes named filename for tok, PUTs body with
// the uploader's own extra headers, and returns its urlId.
func (s *mpSigner) upload(tok, contentType, filename string, body []byte, extra map[string]string) string {
	s.t.Helper()
	name := ""
	if filename != "" {
		name = fmt.Sprintf(`,"filename":%q`, filename)
	}
	r := s.sign(tok, newKey(), fmt.Sprintf(`{"contentType":%q,"contentLength":%d%s}`, contentType, len(body), name))
	if r.status != http.StatusCreated {
		s.t.Fatalf("sign: %d %s", r.status, r.raw)
	}
	var g api.SignResponse
	if err := json.Unmarshal(r.raw, &g); err != nil {
		s.t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPut, g.URL, bytes.NewReader(body))
	req.Header.Set("Content-Type", g.Headers.ContentType)
	req.Header.Set("If-None-Match", g.Headers.IfNoneMatch)
	for k, v := range extra {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		s.t.Fatalf("PUT: %d", res.StatusCode)
	}
	return g.URLID
}

// download asks POST /uploads/{urlId}/download as tok, with key unless "".
func (s *mpSigner) download(tok, urlID, key string) reply {
	s.t.Helper()
	h := bearer(tok)
	if key != "" {
		h[request.HeaderIdempotencyKey] = key
	}
	return s.do(http.MethodPost, "/uploads/"+urlID+"/download", h, "")
}

// fetch GETs url from S3: its status, headers and body.
func fetch(t *testing.T, url string) (int, http.Header, []byte) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, b
}

// Issue 40: a completed upload's download URL, on a real versitygw,
// returns its exact bytes with the type the gate verified and the
// disposition of its filename, whatever Content-Disposition and
// Cache-Control the uploader stored with its PUT; a tampered URL and an
// expired one are refused by S3. Only a completed upload of the caller's
// own is served: pending and verifying are 409, rejected 410, another
// caller's, another tenant's and a refunded one 404 — and 201 for another
// caller of a tenant with "downloads":"tenant". A replay is free.
func TestDownloadServesTheVerifiedObject(t *testing.T) {
	s := startDownloads(t, nil)
	ctx := context.Background()
	alice, bob, eve := s.token("acme", "alice"), s.token("acme", "bob"), s.token("other", "eve")
	c := &apiCheck{t: t, doc: loadAPI(t), seen: map[string]bool{}}
	pdf := []byte("%PDF-1.4 mintgate " + strings.Repeat("x", 500))
	id := s.upload(alice, "application/pdf", "rapport été.pdf", pdf, map[string]string{
		"Content-Disposition": `inline; filename="evil.html"`, "Cache-Control": "public, max-age=31536000",
	})
	path := "/uploads/" + id + "/download"

	c.expect(http.StatusConflict, http.MethodPost, path, s.download(alice, id, "")) // pending: no verdict yet
	s.rdb.Set(ctx, keys.Done("acme", id), quota.DoneVerifying, time.Minute)
	if r := c.expect(http.StatusConflict, http.MethodPost, path, s.download(alice, id, "")); r.code() != apierr.CodeNotCompleted {
		t.Fatalf("verifying: %s", r.raw)
	}
	s.rdb.Set(ctx, keys.Done("acme", id), quota.DoneCompleted, time.Minute)
	r := c.expect(http.StatusCreated, http.MethodPost, path, s.download(alice, id, ""))
	if r.str("method") != http.MethodGet || r.body["expiresIn"] != float64(300) {
		t.Errorf("201 %s", r.raw)
	}
	url := r.str("url")
	status, h, body := fetch(t, url)
	wantCD := `attachment; filename="rapport _t_.pdf"; filename*=UTF-8''rapport%20%C3%A9t%C3%A9.pdf`
	if status != http.StatusOK || !bytes.Equal(body, pdf) || h.Get("Content-Type") != "application/pdf" || h.Get("Content-Disposition") != wantCD || h.Get("Cache-Control") != "private" {
		t.Errorf("GET: %d %q %q %q, %d bytes (equal %v)", status, h.Get("Content-Type"), h.Get("Content-Disposition"), h.Get("Cache-Control"), len(body), bytes.Equal(body, pdf))
	}
	tampered := strings.Replace(url, "response-content-type=application%2Fpdf", "response-content-type=text%2Fhtml", 1)
	if tampered == url {
		t.Fatalf("no response-content-type in %s", url)
	}
	if status, _, _ := fetch(t, tampered); status != http.StatusForbidden {
		t.Errorf("tampered URL: %d, want 403", status)
	}

	// Who may: not bob, not another tenant's eve.
	for name, tok := range map[string]string{"another caller": bob, "another tenant": eve} {
		if r := c.expect(http.StatusNotFound, http.MethodPost, path, s.download(tok, id, "")); r.code() != apierr.CodeNotFound {
			t.Errorf("%s: %s", name, r.raw)
		}
	}
	// In a tenant with "downloads":"tenant", another caller may.
	openID := s.upload(s.token("open", "ann"), "image/png", "", []byte("png bytes"), nil)
	s.rdb.Set(ctx, keys.Done("open", openID), quota.DoneCompleted, time.Minute)
	r = c.expect(http.StatusCreated, http.MethodPost, "/uploads/"+openID+"/download", s.download(s.token("open", "ben"), openID, ""))
	if _, h, _ := fetch(t, r.str("url")); h.Get("Content-Disposition") != `inline; filename="`+openID+`.png"; filename*=UTF-8''`+openID+`.png` {
		t.Errorf("an image named by its urlId: %q", h.Get("Content-Disposition"))
	}

	// Rejected: 410; refunded: 404.
	rej := s.upload(alice, "image/png", "x.png", []byte("<html>"), nil)
	s.rdb.Set(ctx, keys.Done("acme", rej), quota.Rejected("type_mismatch"), time.Minute)
	if r := c.expect(http.StatusGone, http.MethodPost, "/uploads/"+rej+"/download", s.download(alice, rej, "")); r.code() != apierr.CodeUploadRejected {
		t.Errorf("rejected: %s", r.raw)
	}
	ref := s.upload(alice, "image/png", "", []byte("png"), nil)
	s.rdb.Set(ctx, keys.Refunded("acme", ref), "1", time.Minute)
	c.expect(http.StatusNotFound, http.MethodPost, "/uploads/"+ref+"/download", s.download(alice, ref, ""))

	// A replay is free: the same answer, nothing spent.
	key := newKey()
	first := s.download(alice, id, key)
	again := s.download(alice, id, key)
	if first.status != http.StatusCreated || again.status != http.StatusOK || !bytes.Equal(first.raw, again.raw) || again.header.Get(request.HeaderReplayed) != "true" {
		t.Fatalf("replay: %d %s then %d %s", first.status, first.raw, again.status, again.raw)
	}
	if a, b := first.header.Get("RateLimit-Remaining"), s.download(alice, id, "").header.Get("RateLimit-Remaining"); a == "" || b != strconv.Itoa(mustAtoi(t, a)-1) {
		t.Errorf("RateLimit-Remaining %q after the first, %q after a replay and one more: the replay spent", a, b)
	}

	// Expired: a URL minted ten minutes ago is refused by S3.
	s.clock.Add(-10 * time.Minute)
	old := s.download(alice, id, "")
	s.clock.Add(10 * time.Minute)
	if old.status != http.StatusCreated {
		t.Fatalf("download: %d %s", old.status, old.raw)
	}
	if status, _, _ := fetch(t, old.str("url")); status != http.StatusForbidden {
		t.Errorf("expired URL: %d, want 403", status)
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// The download tiers hold as the sign's: 50 concurrent downloads against
// a caller's bucket of 30 are exactly 30 × 201, and 20 × 429
// too_many_download_requests with an integer Retry-After and the
// RateLimit headers of the download tier.
func TestDownloadTiersHold(t *testing.T) {
	s := startDownloads(t, map[string]string{
		"MINTGATE_TIERS": "anonymous=5:5/60s,user=100:0.001,tenant=1000:0.001,download=30:0.001",
	})
	alice := s.token("acme", "alice")
	id := s.upload(alice, "image/png", "a.png", []byte("png"), nil)
	s.rdb.Set(context.Background(), keys.Done("acme", id), quota.DoneCompleted, time.Minute)
	c := &apiCheck{t: t, doc: loadAPI(t), seen: map[string]bool{}}

	var mu sync.Mutex
	got := map[int][]reply{}
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			r := s.download(alice, id, "")
			mu.Lock()
			got[r.status] = append(got[r.status], r)
			mu.Unlock()
		})
	}
	wg.Wait()
	if len(got[http.StatusCreated]) != 30 || len(got[http.StatusTooManyRequests]) != 20 {
		t.Fatalf("50 downloads against 30: %d × 201, %d × 429, all %v", len(got[http.StatusCreated]), len(got[http.StatusTooManyRequests]), len(got))
	}
	for _, r := range got[http.StatusTooManyRequests] {
		if r.code() != apierr.CodeTooManyDownloads || r.str("scope") != "caller" || r.header.Get("RateLimit-Limit") != "30" || r.header.Get("RateLimit-Remaining") != "0" {
			t.Fatalf("429 %s %v", r.raw, r.header)
		}
		if ra, err := strconv.Atoi(r.header.Get(apierr.HeaderRetryAfter)); err != nil || ra < 1 {
			t.Fatalf("Retry-After %q", r.header.Get(apierr.HeaderRetryAfter))
		}
	}
	c.expect(http.StatusCreated, http.MethodPost, "/uploads/"+id+"/download", got[http.StatusCreated][0])
	c.expect(http.StatusTooManyRequests, http.MethodPost, "/uploads/"+id+"/download", got[http.StatusTooManyRequests][0])
	if !strings.Contains(s.metrics(), `mintgate_signer_downloads_total{outcome="rate_limited",tenant="acme"} 20`) {
		t.Errorf("metrics: no 20 rate_limited downloads")
	}
}

// A sign's filename is kept in its grant record (what a download names),
// is part of what its Idempotency-Key names (another name is 422), and is
// refused (400 invalid_request) empty, above 255 bytes or with a control
// character (JSON decoding makes invalid UTF-8 U+FFFD, which the download's
// disposition drops).
func TestSignKeepsItsFilename(t *testing.T) {
	s := start(t, newStack(t).env(t), withoutRedisClock)
	tok, key := s.token("acme", "alice"), newKey()
	body := func(name string) string {
		b, _ := json.Marshal(map[string]any{"contentType": "image/png", "contentLength": 10, "filename": name})
		return string(b)
	}
	r := s.sign(tok, key, body("été.png"))
	if r.status != http.StatusCreated {
		t.Fatalf("sign: %d %s", r.status, r.raw)
	}
	if got := s.rdb.HGet(context.Background(), keys.Grant("acme", r.str("urlId")), "filename").Val(); got != "été.png" {
		t.Errorf("grant record's filename %q", got)
	}
	mustStatus(t, s.sign(tok, key, body("other.png")), http.StatusUnprocessableEntity, apierr.CodeKeyReused)
	for _, bad := range []string{"", strings.Repeat("é", 128), "a\nb.png", "a\u0085b", "a\x7fb"} {
		mustStatus(t, s.sign(tok, newKey(), body(bad)), http.StatusBadRequest, apierr.CodeInvalidRequest)
	}
	mustStatus(t, s.sign(tok, newKey(), body(strings.Repeat("a", 255))), http.StatusCreated, "")
}
