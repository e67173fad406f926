package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/chromedp/chromedp"
	"github.com/google/uuid"

	"github.com/mintgate/mintgate/signer/demo"
)

// TestBrowserPage drives the demo page in real headless Chromium against a
// fake signer (serving the page, signing, reporting status) and an S3 on
// another origin — a fake one that checks what the browser sends, and a
// real versitygw that checks the presigned signature and CORS itself. It
// needs no stack, so it runs in seconds.
func TestBrowserPage(t *testing.T) {
	browser := newBrowser(t)
	file := browserPNG(t)
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	uuidRE := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

	t.Run("upload completes", func(t *testing.T) {
		fs3 := newPageFakeS3(t, true)
		f := newPageSigner(t, fs3)
		tab := browserTab(t, browser, 30*time.Second)
		browserChoose(t, tab, f.pageURL(""), file)
		browserWaitProgress(t, tab, 100, 10*time.Second)
		if s := browserWaitState(t, tab, 10*time.Second, "completed", "error", "timeout"); s != "completed" {
			t.Fatalf("state %s: %s", s, browserStatus(tab))
		}
		browserShot(t, tab, "page-completed")
		if info := browserUpload(t, tab, "title"); !strings.Contains(info, "image/png") ||
			!strings.Contains(info, strconv.Itoa(len(want))+" bytes") {
			t.Errorf("the upload's title %q lacks the type or the size", info)
		}
		if kind := browserUpload(t, tab, "kind"); !strings.HasPrefix(kind, "single PUT") {
			t.Errorf("the upload's kind %q; want a single PUT", kind)
		}

		signs := f.signCalls()
		if len(signs) != 1 {
			t.Fatalf("%d sign requests, want 1", len(signs))
		}
		s := signs[0]
		if !uuidRE.MatchString(s.idemKey) {
			t.Errorf("Idempotency-Key %q is not a random UUID", s.idemKey)
		}
		if s.tenant != "demo" || s.auth != "" {
			t.Errorf("identity: X-Tenant-ID %q, Authorization %q; want demo and none", s.tenant, s.auth)
		}
		// The client sends the file's SHA-256 by default (issue 30), and its
		// name as filename (issue 40).
		sum := sha256.Sum256(want)
		checksum := base64.StdEncoding.EncodeToString(sum[:])
		if wantBody := fmt.Sprintf(`{"contentType":"image/png","contentLength":%d,"filename":"mintgate-demo.png","checksumSHA256":%q}`, len(want), checksum); s.body != wantBody {
			t.Errorf("sign body %s, want %s", s.body, wantBody)
		}

		pre, puts := fs3.requests()
		if len(pre) != 1 || pre[0].origin != f.origin() || pre[0].method != "PUT" ||
			pre[0].headers != "content-type,if-none-match,x-amz-checksum-sha256" {
			t.Errorf("preflights %+v; want one from %s for PUT with content-type,if-none-match,x-amz-checksum-sha256", pre, f.origin())
		}
		if len(puts) != 1 || !bytes.Equal(puts[0].body, want) {
			t.Fatalf("S3 received %d PUTs; want the file once", len(puts))
		}
		if p := puts[0]; p.ifNoneMatch != "*" || p.contentType != "image/png" || p.contentLength != int64(len(want)) || p.checksum != checksum {
			t.Errorf("PUT headers If-None-Match %q, Content-Type %q, x-amz-checksum-sha256 %q, length %d", p.ifNoneMatch, p.contentType, p.checksum, p.contentLength)
		}
	})

	// The completer verifies an object before it reads completed (SPEC §9):
	// the page shows verifying while it does, then the verdict, a
	// rejection with its reason.
	t.Run("verifying then rejected with its reason", func(t *testing.T) {
		f := newPageSigner(t, newPageFakeS3(t, true))
		f.verdicts = []string{
			`{"status":"verifying"}`, `{"status":"verifying"}`, `{"status":"verifying"}`,
			`{"status":"rejected","reason":"type_mismatch"}`,
		}
		tab := browserTab(t, browser, 30*time.Second)
		browserChoose(t, tab, f.pageURL(""), file)
		browserWaitState(t, tab, 10*time.Second, "verifying")
		if st := browserStatus(tab); !strings.HasPrefix(st, "verifying: ") {
			t.Errorf("status %q; want verifying", st)
		}
		if s := browserWaitState(t, tab, 10*time.Second, "completed", "rejected", "error", "timeout"); s != "rejected" {
			t.Fatalf("state %s: %s", s, browserStatus(tab))
		}
		browserShot(t, tab, "page-rejected")
		if st := browserStatus(tab); !strings.Contains(st, "rejected: type_mismatch") {
			t.Errorf("status %q; want the rejection's reason", st)
		}
		// Uppy's Dashboard shows the verdict (issue 37): the file in error,
		// never complete, its error naming the reason.
		dash := browserPoll[string](t, tab, "the Dashboard's error", `(() => { const i = document.querySelector('.uppy-Dashboard-Item');
			return i && i.classList.contains('is-error') ? i.className + ' | ' + (i.querySelector('.uppy-Dashboard-Item-errorDetails')?.getAttribute('aria-label') || '') : false; })()`, 5*time.Second)
		if strings.Contains(dash, "is-complete") || !strings.Contains(dash, "type_mismatch") {
			t.Errorf("the Dashboard's item %q; want is-error naming type_mismatch, not is-complete", dash)
		}
	})

	t.Run("verifying then completed", func(t *testing.T) {
		f := newPageSigner(t, newPageFakeS3(t, true))
		f.verdicts = []string{`{"status":"verifying"}`, `{"status":"verifying"}`, `{"status":"completed"}`}
		tab := browserTab(t, browser, 30*time.Second)
		browserChoose(t, tab, f.pageURL(""), file)
		browserWaitState(t, tab, 10*time.Second, "verifying")
		// While the completer verifies, the Dashboard shows the file in
		// post-processing ("Verifying…"), not complete.
		browserPoll[bool](t, tab, "the Dashboard's Verifying…", `(() => { const i = document.querySelector('.uppy-Dashboard-Item');
			return !!i && i.classList.contains('is-processing') && !i.classList.contains('is-complete') && document.body.textContent.includes('Verifying…'); })()`, 5*time.Second)
		if s := browserWaitState(t, tab, 10*time.Second, "completed", "rejected", "error", "timeout"); s != "completed" {
			t.Fatalf("state %s: %s", s, browserStatus(tab))
		}
		browserPoll[bool](t, tab, "the Dashboard's complete", `(() => { const i = document.querySelector('.uppy-Dashboard-Item');
			return !!i && i.classList.contains('is-complete') && !i.classList.contains('is-error'); })()`, 5*time.Second)
	})

	t.Run("429 counts down and retries the same key", func(t *testing.T) {
		f := newPageSigner(t, newPageFakeS3(t, true),
			pageReply{status: 429, retryAfter: 2, body: `{"error":"too_many_signing_requests","scope":"caller","retryAfter":2}`})
		tab := browserTab(t, browser, 30*time.Second)
		browserChoose(t, tab, f.pageURL(""), file)
		if n := browserWaitCountdown(t, tab, 5*time.Second); n < 1 || n > 2 {
			t.Errorf("countdown shows %d s; Retry-After was 2", n)
		}
		if s := browserWaitState(t, tab, time.Second, "rate-limited"); s != "rate-limited" {
			t.Fatal(s)
		}
		if st := browserStatus(tab); !strings.Contains(st, "too_many_signing_requests") {
			t.Errorf("status %q does not name the error code", st)
		}
		browserShot(t, tab, "page-countdown")
		if s := browserWaitState(t, tab, 10*time.Second, "completed", "error", "timeout"); s != "completed" {
			t.Fatalf("after the retry: %s", browserStatus(tab))
		}
		signs := f.signCalls()
		if len(signs) != 2 || signs[0].idemKey != signs[1].idemKey {
			t.Fatalf("sign requests %+v; want two with one idempotency key", signs)
		}
		// The retry waits the countdown plus 0–1 s of jitter.
		if gap := signs[1].at.Sub(signs[0].at); gap < 2*time.Second || gap > 5*time.Second {
			t.Errorf("retried after %v; want 2–3 s (plus latency)", gap)
		}
	})

	t.Run("503 says so and retries the same key", func(t *testing.T) {
		f := newPageSigner(t, newPageFakeS3(t, true),
			pageReply{status: 503, retryAfter: 1, body: `{"error":"limiter_unavailable","message":"rate limiter unavailable"}`})
		tab := browserTab(t, browser, 30*time.Second)
		browserChoose(t, tab, f.pageURL(""), file)
		browserWaitCountdown(t, tab, 5*time.Second)
		if st := browserStatus(tab); !strings.Contains(st, "unavailable: ") || !strings.Contains(st, "limiter_unavailable") {
			t.Errorf("status %q", st)
		}
		if s := browserWaitState(t, tab, 10*time.Second, "completed", "error", "timeout"); s != "completed" {
			t.Fatalf("after the retry: %s", browserStatus(tab))
		}
		if signs := f.signCalls(); len(signs) != 2 || signs[0].idemKey != signs[1].idemKey {
			t.Fatalf("sign requests %+v; want two with one idempotency key", signs)
		}
	})

	t.Run("other errors show their code", func(t *testing.T) {
		f := newPageSigner(t, newPageFakeS3(t, true),
			pageReply{status: 415, body: `{"error":"unsupported_content_type","message":"image/png is not accepted"}`})
		tab := browserTab(t, browser, 30*time.Second)
		browserChoose(t, tab, f.pageURL(""), file)
		browserWaitState(t, tab, 5*time.Second, "error")
		if st := browserStatus(tab); !strings.Contains(st, "unsupported_content_type") {
			t.Errorf("status %q does not name the code", st)
		}
		browserShot(t, tab, "page-error")
		if len(f.signCalls()) != 1 {
			t.Errorf("a 415 was retried")
		}
	})

	// A link that carries a token would sign its victim in as the link's
	// author, whose uploads the victim then makes (issue 10, finding 11):
	// the page ignores it, stays anonymous and drops it from the address.
	t.Run("a bearer token in the address is ignored", func(t *testing.T) {
		f := newPageSigner(t, newPageFakeS3(t, true))
		tab := browserTab(t, browser, 30*time.Second)
		browserChoose(t, tab, f.pageURL("?token=attacker.payload.sig&tenant=acme"), file)
		if s := browserWaitState(t, tab, 10*time.Second, "completed", "error", "timeout"); s != "completed" {
			t.Fatalf("state %s", browserStatus(tab))
		}
		s := f.signCalls()[0]
		if s.auth != "" || s.tenant != "acme" {
			t.Errorf("Authorization %q, X-Tenant-ID %q; want an anonymous sign for acme", s.auth, s.tenant)
		}
		if v, err := chromedp.Run(tab, chromedp.Evaluate[string](`document.getElementById('token').value`)); err != nil || v != "" {
			t.Errorf("token field %q, %v", v, err)
		}
		if loc := browserLocation(t, tab); strings.Contains(loc, "token") || !strings.Contains(loc, "tenant=acme") {
			t.Errorf("address %s: want the token gone and the tenant kept", loc)
		}
	})

	t.Run("bearer token pasted into the form", func(t *testing.T) {
		f := newPageSigner(t, newPageFakeS3(t, true))
		tab := browserTab(t, browser, 30*time.Second)
		browserOpen(t, tab, f.pageURL(""))
		if err := chromedp.Do(tab,
			chromedp.Click(chromedp.ID("mode-bearer")),
			chromedp.SendKeys(chromedp.ID("token"), "header.payload.sig"),
		); err != nil {
			t.Fatal(err)
		}
		browserAdd(t, tab, file)
		if s := browserWaitState(t, tab, 10*time.Second, "completed", "error", "timeout"); s != "completed" {
			t.Fatalf("state %s", browserStatus(tab))
		}
		s := f.signCalls()[0]
		if s.auth != "Bearer header.payload.sig" || s.tenant != "" {
			t.Errorf("Authorization %q, X-Tenant-ID %q", s.auth, s.tenant)
		}
		if polls := f.statusAuth(); len(polls) == 0 || polls[0] != s.auth {
			t.Errorf("status polls sent Authorization %q", polls)
		}
	})

	t.Run("S3 without CORS is reported", func(t *testing.T) {
		fs3 := newPageFakeS3(t, false)
		f := newPageSigner(t, fs3)
		tab := browserTab(t, browser, 30*time.Second)
		browserChoose(t, tab, f.pageURL(""), file)
		browserWaitState(t, tab, 10*time.Second, "error")
		if st := browserStatus(tab); !strings.Contains(st, "network error") || !strings.Contains(st, "CORS") {
			t.Errorf("status %q", st)
		}
		if _, puts := fs3.requests(); len(puts) != 0 {
			t.Errorf("the browser sent the PUT although the preflight failed")
		}
	})

	t.Run("versitygw checks the signature and CORS", func(t *testing.T) {
		gw := browserStartVersityGW(t)
		vs3 := &pageVersityS3{gw: gw}
		f := newPageSigner(t, vs3)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := browserAllowOrigin(ctx, gw.Client, gw.Bucket, f.origin()); err != nil {
			t.Fatal(err)
		}
		tab := browserTab(t, browser, 30*time.Second)
		browserChoose(t, tab, f.pageURL(""), file)
		browserWaitProgress(t, tab, 100, 10*time.Second)
		if s := browserWaitState(t, tab, 10*time.Second, "completed", "error", "timeout"); s != "completed" {
			t.Fatalf("state %s", browserStatus(tab))
		}
		key := browserUpload(t, tab, "key")
		// A deadline of its own: the browser's steps above may have used
		// up the CORS call's on a busy machine.
		gctx, gcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer gcancel()
		obj, err := gw.Client.GetObject(gctx, &s3.GetObjectInput{Bucket: aws.String(gw.Bucket), Key: aws.String(key)})
		if err != nil {
			t.Fatalf("get %s: %v", key, err)
		}
		defer obj.Body.Close()
		got, _ := io.ReadAll(obj.Body)
		if !bytes.Equal(got, want) || aws.ToString(obj.ContentType) != "image/png" {
			t.Errorf("S3 holds %d bytes of %s; want the %d-byte PNG", len(got), aws.ToString(obj.ContentType), len(want))
		}
	})
}

// browserLocation is the page's address.
func browserLocation(t *testing.T, tab context.Context) string {
	t.Helper()
	return browserPoll[string](t, tab, "location", "location.href", time.Second)
}

// pageS3 is the S3 side of the fake signer: it presigns and tells whether
// an object arrived.
type pageS3 interface {
	presign(t *testing.T, key, contentType, checksum string, size int64) (string, map[string]string)
	exists(key string) bool
}

// pageReply is a scripted answer of the fake signer to one sign request.
type pageReply struct {
	status     int
	retryAfter int
	body       string
}

// pageSign is a sign request as the fake signer saw it.
type pageSign struct {
	at                    time.Time
	idemKey, tenant, auth string
	body                  string
}

// pageSigner mimics the signer's API (docs/api.md) and serves the real demo
// page, on its own origin.
type pageSigner struct {
	t       *testing.T
	s3      pageS3
	srv     *httptest.Server
	mu      sync.Mutex
	replies []pageReply
	signs   []pageSign
	keys    map[string]string // urlId → object key
	polls   []string          // Authorization of each status poll
	// verdicts, when set, are the bodies of GET /uploads/{urlId} once the
	// object is there, in turn (the last one repeats): the completer's
	// verification gate, which the real stack does not have yet.
	verdicts []string
}

// newPageSigner starts a fake signer that answers the sign requests with
// the replies in turn, then with 201s presigned by s3.
func newPageSigner(t *testing.T, s3 pageS3, replies ...pageReply) *pageSigner {
	f := &pageSigner{t: t, s3: s3, replies: replies, keys: map[string]string{}}
	mux := http.NewServeMux()
	mux.Handle("GET /demo/", demo.Handler())
	mux.HandleFunc("GET /uploads/limits", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"maxObjectBytes":104857600,"maxMultipartBytes":5368709120,"partSize":16777216,"maxPartsPerRequest":100,"contentTypes":["image/png"]}`)
	})
	mux.HandleFunc("POST /uploads/sign", f.sign)
	mux.HandleFunc("GET /uploads/{urlId}", f.status)
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	if fs3, ok := s3.(*pageFakeS3); ok {
		fs3.setOrigin(f.origin())
	}
	return f
}

func (f *pageSigner) origin() string { return f.srv.URL }

func (f *pageSigner) pageURL(query string) string { return f.srv.URL + "/demo/" + query }

func (f *pageSigner) signCalls() []pageSign {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]pageSign(nil), f.signs...)
}

func (f *pageSigner) statusAuth() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.polls...)
}

func (f *pageSigner) sign(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.signs = append(f.signs, pageSign{at: time.Now(), idemKey: r.Header.Get("Idempotency-Key"),
		tenant: r.Header.Get("X-Tenant-ID"), auth: r.Header.Get("Authorization"), body: string(body)})
	var reply *pageReply
	if len(f.replies) > 0 {
		reply = &f.replies[0]
		f.replies = f.replies[1:]
	}
	remaining := 5 - len(f.signs)
	f.mu.Unlock()

	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("RateLimit-Limit", "5")
	h.Set("RateLimit-Policy", "5;w=60")
	if reply != nil {
		if reply.retryAfter > 0 {
			h.Set("Retry-After", strconv.Itoa(reply.retryAfter))
		}
		h.Set("RateLimit-Remaining", "0")
		w.WriteHeader(reply.status)
		io.WriteString(w, reply.body)
		return
	}
	var req struct {
		ContentType    string `json:"contentType"`
		ContentLength  int64  `json:"contentLength"`
		ChecksumSHA256 string `json:"checksumSHA256"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"error":"invalid_request","message":"bad JSON"}`)
		return
	}
	urlID := uuid.NewString()
	key := "incoming/demo/" + urlID
	u, headers := f.s3.presign(f.t, key, req.ContentType, req.ChecksumSHA256, req.ContentLength)
	f.mu.Lock()
	f.keys[urlID] = key
	f.mu.Unlock()
	expires := time.Now().Add(2 * time.Minute).UTC()
	h.Set("RateLimit-Remaining", strconv.Itoa(max(remaining, 0)))
	w.WriteHeader(http.StatusCreated)
	json.NewEncoder(w).Encode(map[string]any{
		"url": u, "method": "PUT", "headers": headers, "urlId": urlID, "key": key,
		"expiresAt": expires.Format(time.RFC3339), "expiresIn": 120,
	})
}

func (f *pageSigner) status(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	key, ok := f.keys[r.PathValue("urlId")]
	f.polls = append(f.polls, r.Header.Get("Authorization"))
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if !ok {
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"error":"not_found","message":"no such upload"}`)
		return
	}
	status := "pending"
	if f.s3.exists(key) {
		status = "completed"
		f.mu.Lock()
		v := f.verdicts
		if len(v) > 1 {
			f.verdicts = v[1:]
		}
		f.mu.Unlock()
		if len(v) > 0 {
			io.WriteString(w, v[0])
			return
		}
	}
	json.NewEncoder(w).Encode(map[string]string{"status": status})
}

// pageFakeS3 is an S3 stand-in on its own origin that answers the CORS
// preflight like S3 (when cors is on) and checks the PUT's signed headers.
type pageFakeS3 struct {
	cors bool
	srv  *httptest.Server
	mu   sync.Mutex
	orig string
	pre  []pagePreflight
	puts []pagePut
	objs map[string]pagePut // path → upload
}

type pagePreflight struct{ origin, method, headers string }

type pagePut struct {
	path, ifNoneMatch, contentType, checksum string
	contentLength                            int64
	body                                     []byte
}

func newPageFakeS3(t *testing.T, cors bool) *pageFakeS3 {
	s := &pageFakeS3{cors: cors, objs: map[string]pagePut{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *pageFakeS3) setOrigin(o string) { s.mu.Lock(); s.orig = o; s.mu.Unlock() }

func (s *pageFakeS3) requests() ([]pagePreflight, []pagePut) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]pagePreflight(nil), s.pre...), append([]pagePut(nil), s.puts...)
}

func (s *pageFakeS3) presign(_ *testing.T, key, contentType, checksum string, size int64) (string, map[string]string) {
	h := map[string]string{"If-None-Match": "*", "Content-Type": contentType, "Content-Length": strconv.FormatInt(size, 10)}
	if checksum != "" {
		h["x-amz-checksum-sha256"] = checksum
	}
	return s.srv.URL + "/uploads/" + key + "?X-Amz-Signature=fake", h
}

func (s *pageFakeS3) exists(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.objs["/uploads/"+key]
	return ok
}

func (s *pageFakeS3) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	origin := r.Header.Get("Origin")
	allowed := s.cors && origin == s.orig
	if allowed {
		w.Header().Set("Access-Control-Allow-Origin", origin)
		w.Header().Set("Vary", "Origin, Access-Control-Request-Headers, Access-Control-Request-Method")
	}
	switch r.Method {
	case http.MethodOptions:
		p := pagePreflight{origin, r.Header.Get("Access-Control-Request-Method"), r.Header.Get("Access-Control-Request-Headers")}
		s.pre = append(s.pre, p)
		for _, h := range strings.Split(p.headers, ",") {
			if h = strings.ToLower(strings.TrimSpace(h)); h != "content-type" && h != "if-none-match" && h != "x-amz-checksum-sha256" {
				allowed = false
			}
		}
		if !allowed || p.method != http.MethodPut {
			w.Header().Del("Access-Control-Allow-Origin")
			http.Error(w, "CORSResponse: this CORS request is not allowed", http.StatusForbidden)
			return
		}
		w.Header().Set("Access-Control-Allow-Methods", "PUT")
		w.Header().Set("Access-Control-Allow-Headers", p.headers)
		w.Header().Set("Access-Control-Max-Age", "600")
	case http.MethodPut:
		body, _ := io.ReadAll(r.Body)
		p := pagePut{r.URL.Path, r.Header.Get("If-None-Match"), r.Header.Get("Content-Type"), r.Header.Get("x-amz-checksum-sha256"), r.ContentLength, body}
		s.puts = append(s.puts, p)
		if _, ok := s.objs[p.path]; ok {
			w.WriteHeader(http.StatusPreconditionFailed)
			io.WriteString(w, "<Error><Code>PreconditionFailed</Code></Error>")
			return
		}
		s.objs[p.path] = p
		w.Header().Set("ETag", `"fake"`)
	default:
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

// pageVersityS3 presigns real URLs for a versitygw.
type pageVersityS3 struct{ gw *browserVersityGW }

func (s *pageVersityS3) presign(t *testing.T, key, contentType, checksum string, size int64) (string, map[string]string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	in := &s3.PutObjectInput{
		Bucket: aws.String(s.gw.Bucket), Key: aws.String(key),
		ContentType: aws.String(contentType), ContentLength: aws.Int64(size), IfNoneMatch: aws.String("*"),
	}
	if checksum != "" {
		in.ChecksumSHA256 = aws.String(checksum) // a signed header, as the signer signs it
	}
	req, err := s3.NewPresignClient(s.gw.Client).PresignPutObject(ctx, in, s3.WithPresignExpires(2*time.Minute))
	if err != nil {
		t.Errorf("presign: %v", err)
		return "", nil
	}
	headers := map[string]string{}
	for name, v := range req.SignedHeader {
		if !strings.EqualFold(name, "Host") {
			headers[name] = strings.Join(v, ",")
		}
	}
	return req.URL, headers
}

func (s *pageVersityS3) exists(key string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := s.gw.Client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s.gw.Bucket), Key: aws.String(key)})
	return err == nil
}
