package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/mintgate/mintgate/api"
	"github.com/mintgate/mintgate/signer/internal/apierr"
	"github.com/mintgate/mintgate/signer/internal/request"
)

// sha256Of is the checksumSHA256 of b: the base64 of its SHA-256.
func sha256Of(b []byte) string {
	sum := sha256.Sum256(b)
	return base64.StdEncoding.EncodeToString(sum[:])
}

// sumBody is a sign body of n bytes of PNG bound to checksum.
func sumBody(n int, checksum string) string {
	return fmt.Sprintf(`{"contentType":"image/png","contentLength":%d,"checksumSHA256":%q}`, n, checksum)
}

// putTo PUTs body to a signed URL with the headers the 201 named, and
// returns S3's status and body.
func putTo(t *testing.T, url string, h api.UploadHeaders, body []byte) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", h.ContentType)
	req.Header.Set("If-None-Match", h.IfNoneMatch)
	if h.ChecksumSHA256 != "" {
		req.Header.Set("x-amz-checksum-sha256", h.ChecksumSHA256)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// Issue 30: a URL bound to a checksum takes those bytes only. On a real
// versitygw other bytes of the same length are refused (400 BadDigest)
// and nothing lands; the right bytes land, S3 keeps their checksum, and
// the grant's status names it.
func TestChecksumBoundURLTakesItsBytesOnly(t *testing.T) {
	s := startMultipart(t, nil)
	alice := s.token("acme", "alice")
	right, wrong := bytes.Repeat([]byte("p"), 1024), bytes.Repeat([]byte("q"), 1024)
	sum := sha256Of(right)

	r := s.sign(alice, newKey(), sumBody(1024, sum))
	if r.status != http.StatusCreated {
		t.Fatalf("sign: %d %s", r.status, r.raw)
	}
	var g api.SignResponse
	if err := json.Unmarshal(r.raw, &g); err != nil {
		t.Fatal(err)
	}
	if g.Headers.ChecksumSHA256 != sum {
		t.Fatalf("headers %+v: want x-amz-checksum-sha256 %s", g.Headers, sum)
	}
	if !strings.Contains(g.URL, "if-none-match%3Bx-amz-checksum-sha256") || strings.Contains(strings.ToLower(g.URL), "x-amz-checksum-sha256=") {
		t.Fatalf("the checksum is not a signed header of %s", g.URL)
	}

	if code, body := putTo(t, g.URL, g.Headers, wrong); code != http.StatusBadRequest || !strings.Contains(body, "BadDigest") {
		t.Fatalf("PUT of other bytes: %d %s, want 400 BadDigest", code, body)
	}
	if n := s.head(g.Key); n != -1 {
		t.Fatalf("other bytes landed: %d", n)
	}
	// Leaving the header out, or naming the other bytes' checksum, breaks
	// the signature: the URL is no use for other content.
	forged := g.Headers
	forged.ChecksumSHA256 = sha256Of(wrong)
	if code, body := putTo(t, g.URL, forged, wrong); code != http.StatusForbidden {
		t.Fatalf("PUT of other bytes with their own checksum: %d %s, want 403", code, body)
	}
	if code, body := putTo(t, g.URL, g.Headers, right); code != http.StatusOK {
		t.Fatalf("PUT of the right bytes: %d %s", code, body)
	}
	out, err := s.client.HeadObject(context.Background(), &s3.HeadObjectInput{
		Bucket: aws.String(s.s3.Bucket), Key: aws.String(g.Key), ChecksumMode: types.ChecksumModeEnabled,
	})
	if err != nil {
		t.Fatal(err)
	}
	if aws.ToInt64(out.ContentLength) != 1024 || aws.ToString(out.ChecksumSHA256) != sum {
		t.Fatalf("HEAD: %d bytes, checksum %q; want 1024, %s", aws.ToInt64(out.ContentLength), aws.ToString(out.ChecksumSHA256), sum)
	}
	st := s.do(http.MethodGet, "/uploads/"+g.URLID, bearer(alice), "")
	if st.str("checksumSHA256") != sum {
		t.Fatalf("status: %s, want checksumSHA256 %s", st.raw, sum)
	}
}

// A checksum that is not the base64 of a SHA-256 is a 400; the checksum
// is part of the request an Idempotency-Key names.
func TestChecksumSignRequests(t *testing.T) {
	s := start(t, newStack(t).env(t))
	alice := s.token("acme", "alice")
	sum := sha256Of([]byte("hello"))
	for _, body := range []string{
		sumBody(5, ""),
		sumBody(5, sum[:43]),
		sumBody(5, strings.ReplaceAll(sum, "+", "-")),
		sumBody(5, base64.StdEncoding.EncodeToString(make([]byte, 31))+"AAAA"),
		`{"contentType":"image/png","contentLength":5,"checksumSHA256":5}`,
		`{"contentType":"image/png","contentLength":5,"checksumAlgorithm":"SHA256"}`,
	} {
		if r := s.sign(alice, newKey(), body); r.status != http.StatusBadRequest || r.code() != apierr.CodeInvalidRequest {
			t.Errorf("%s: %d %s, want 400 invalid_request", body, r.status, r.raw)
		}
	}
	key := newKey()
	first := s.sign(alice, key, sumBody(5, sum))
	if first.status != http.StatusCreated {
		t.Fatalf("sign: %d %s", first.status, first.raw)
	}
	if again := s.sign(alice, key, sumBody(5, sum)); again.status != http.StatusOK || !bytes.Equal(again.raw, first.raw) {
		t.Errorf("replay: %d %s", again.status, again.raw)
	}
	for _, body := range []string{sumBody(5, sha256Of([]byte("world"))), `{"contentType":"image/png","contentLength":5}`} {
		if r := s.sign(alice, key, body); r.status != http.StatusUnprocessableEntity || r.code() != apierr.CodeKeyReused {
			t.Errorf("the key again with %s: %d %s, want 422 %s", body, r.status, r.raw, apierr.CodeKeyReused)
		}
	}
}

// MINTGATE_REQUIRE_CHECKSUM=true: a sign or create without a checksum is
// 400 checksum_required, and GET /uploads/limits says so; a tenant's
// requireChecksum in the tiers file decides for that tenant.
func TestRequireChecksum(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tiers.json")
	if err := os.WriteFile(file, []byte(`{"relaxed":{"requireChecksum":false},"acme":{"user":"50:1"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	env := newStack(t).env(t)
	env["MINTGATE_REQUIRE_CHECKSUM"] = "true"
	env["MINTGATE_TENANT_TIERS_FILE"] = file
	s := start(t, env)
	alice, bob := s.token("acme", "alice"), s.token("relaxed", "bob")
	if r := s.sign(alice, newKey(), pngBody); r.status != http.StatusBadRequest || r.code() != apierr.CodeChecksumRequired {
		t.Errorf("sign without a checksum: %d %s, want 400 %s", r.status, r.raw, apierr.CodeChecksumRequired)
	}
	h := bearer(alice)
	h[request.HeaderIdempotencyKey] = newKey()
	if r := s.do(http.MethodPost, "/uploads/multipart", h, `{"contentType":"image/png","contentLength":20000000}`); r.status != http.StatusBadRequest || r.code() != apierr.CodeChecksumRequired {
		t.Errorf("create without a checksum: %d %s, want 400 %s", r.status, r.raw, apierr.CodeChecksumRequired)
	}
	if r := s.sign(alice, newKey(), sumBody(5, sha256Of([]byte("hello")))); r.status != http.StatusCreated {
		t.Errorf("sign with a checksum: %d %s", r.status, r.raw)
	}
	if r := s.sign(bob, newKey(), pngBody); r.status != http.StatusCreated {
		t.Errorf("a tenant with requireChecksum false: %d %s", r.status, r.raw)
	}
	if r := s.do(http.MethodGet, "/uploads/limits", nil, ""); r.body["requireChecksum"] != true {
		t.Errorf("limits: %s, want requireChecksum true", r.raw)
	}
	// The file is re-read: acme now requires none, relaxed must send one.
	if err := os.WriteFile(file, []byte(`{"acme":{"requireChecksum":false},"relaxed":{"requireChecksum":true}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "the new file applied", func() bool {
		return s.sign(alice, newKey(), pngBody).status == http.StatusCreated
	})
	if r := s.sign(bob, newKey(), pngBody); r.code() != apierr.CodeChecksumRequired {
		t.Errorf("relaxed after the reload: %d %s, want %s", r.status, r.raw, apierr.CodeChecksumRequired)
	}
	// A value that is no boolean is refused like a bad tier: counted, and
	// the last good file stays.
	if err := os.WriteFile(file, []byte(`{"acme":{"requireChecksum":"yes"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "the bad file counted", func() bool {
		return s.metric("mintgate_config_reload_errors_total") == 1
	})
	if r := s.sign(alice, newKey(), pngBody); r.status != http.StatusCreated {
		t.Errorf("acme after a bad file: %d %s, want the last good file's answer", r.status, r.raw)
	}
}
