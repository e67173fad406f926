package integration

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/google/uuid"
)

// browserStack is what TestBrowserUpload needs of a running mintgate stack:
// signer, completer, sweeper, Redis, NATS, versitygw, fauxqs and the S3→SQS
// bridge, wired as in deploy/local/up.sh.
type browserStack struct {
	// SignerURL is the signer's base URL, e.g. http://127.0.0.1:PORT. The
	// signer runs with MINTGATE_DEMO_PAGE=on (the page at /demo/), the
	// default tiers (anonymous 5 per 60 s) and MINTGATE_IP_SOURCE=remote,
	// so the browser and this test, both on 127.0.0.1, are one caller.
	SignerURL string
	// Tenant is in MINTGATE_ANON_TENANTS.
	Tenant string
	// S3 is an admin client of the S3 server the signer presigns for; the
	// test sets the bucket's CORS rule with it.
	S3         *s3.Client
	S3Endpoint string
	Bucket     string
}

// TestBrowserUpload drives the demo page (Uppy 6's Dashboard with the
// client package's Mintgate plugin) in headless Chromium against the whole stack:
// a 2 MiB file goes up in one PUT, a 120 MiB file in parts (8 of 16 MiB,
// above MINTGATE_MAX_OBJECT_BYTES' 100 MiB), both land in the bucket with
// their exact bytes and the page says each completed, and the first's
// download link opens those bytes in a new tab; every asset the page
// loads comes from the signer, under its CSP. Then the caller's bucket is
// drained and a third file waits out the 429's countdown and completes with
// the same Idempotency-Key. Screenshots go to artifacts/browser/.
func TestBrowserUpload(t *testing.T) {
	stack := startStack(t)
	browser := newBrowser(t)
	dir := t.TempDir()
	small := browserFile(t, dir, "two-mib.png", 2<<20)
	large := browserFile(t, dir, "large.pdf", 120<<20)
	third := browserPNG(t)
	origin := browserOrigin(t, stack.SignerURL)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// The PUTs go from the signer's origin to S3's: without this rule the
	// browser never sends them (nor reads a part's ETag).
	if err := browserAllowOrigin(ctx, stack.S3, stack.Bucket, origin); err != nil {
		t.Fatalf("bucket CORS for %s: %v", origin, err)
	}

	tab := browserTab(t, browser, 5*time.Minute)
	requests := browserRecordRequests(t, tab)
	browserOpen(t, tab, stack.SignerURL+"/demo/?tenant="+url.QueryEscape(stack.Tenant))

	landed := func(name, file, kind string) {
		t.Helper()
		browserAdd(t, tab, file)
		if s := browserWaitState(t, tab, 3*time.Minute, "completed", "error", "timeout"); s != "completed" {
			t.Fatalf("%s: %s", name, browserStatus(tab))
		}
		browserShot(t, tab, "completed-"+name)
		if k := browserUpload(t, tab, "kind"); !strings.HasPrefix(k, kind) {
			t.Errorf("%s: the page shows %q; want %q…", name, k, kind)
		}
		if st := browserStatus(tab); !strings.Contains(st, "completed: S3 holds") {
			t.Errorf("%s: the page says %q", name, st)
		}
		browserSameObject(ctx, t, stack, browserUpload(t, tab, "key"), file)
	}
	landed("2MiB", small, "single PUT of 2 MiB")
	// Its download link opens its bytes in a tab of their own.
	browserDownload(t, tab, small, "image/png")
	landed("120MiB", large, "multipart: 8 parts of 16 MiB")
	if n := browserUpload(t, tab, "parts"); n != "8" {
		t.Errorf("the page shows %s parts of the 120 MiB upload; want 8", n)
	}

	// Spend what is left of the caller's bucket from here: same tenant,
	// same client IP, so the page's next sign is refused.
	retryAfter := browserDrain(t, stack.SignerURL, stack.Tenant, 1)
	browserAdd(t, tab, third)
	shown := browserWaitCountdown(t, tab, 10*time.Second)
	if shown < 1 || shown > retryAfter {
		t.Errorf("countdown shows %d s; the signer's Retry-After was %d s", shown, retryAfter)
	}
	if st := browserStatus(tab); !strings.HasPrefix(st, "rate-limited: ") || !strings.Contains(st, "too_many_signing_requests") {
		t.Errorf("status %q; want rate-limited naming too_many_signing_requests", st)
	}
	browserShot(t, tab, "countdown")
	// Once the bucket refills a token, the retry with the same key signs,
	// uploads and completes.
	deadline := time.Duration(retryAfter+1)*time.Second + 60*time.Second
	if s := browserWaitState(t, tab, deadline, "completed", "error", "timeout"); s != "completed" {
		t.Fatalf("after the countdown: %s", browserStatus(tab))
	}
	browserSameObject(ctx, t, stack, browserUpload(t, tab, "key"), third)

	// Everything the page fetched came from the signer (or the page itself:
	// data: and blob: URLs); only the PUTs and their preflights went to S3.
	s3Origin := browserOrigin(t, stack.S3Endpoint)
	signs := 0
	for _, r := range requests() {
		if strings.HasPrefix(r.url, "data:") || strings.HasPrefix(r.url, "blob:") {
			continue // Uppy's icons and thumbnails: nothing leaves the page
		}
		o := browserOrigin(t, r.url)
		switch {
		case o == origin:
			if strings.HasSuffix(r.path, "/uploads/sign") || strings.HasSuffix(r.path, "/uploads/multipart") {
				signs++
			}
		case o == s3Origin && (r.method == http.MethodPut || r.method == http.MethodOptions):
		default:
			t.Errorf("the page sent %s %s: not to the signer, nor a PUT to S3", r.method, r.url)
		}
	}
	if signs < 4 {
		t.Errorf("the page sent %d sign or create requests; want at least 4 (three uploads, one refused)", signs)
	}
}

// browserFile writes size random bytes to dir/name.
func browserFile(t *testing.T, dir, name string, size int) string {
	t.Helper()
	b := make([]byte, size)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// browserSameObject checks the bucket holds exactly file's bytes at key.
func browserSameObject(ctx context.Context, t *testing.T, stack browserStack, key, file string) {
	t.Helper()
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if key == "" {
		t.Fatalf("the page shows no key for %s", filepath.Base(file))
	}
	obj, err := stack.S3.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(stack.Bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("the uploaded object %s: %v", key, err)
	}
	defer obj.Body.Close()
	got, err := io.ReadAll(obj.Body)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) || sha256.Sum256(got) != sha256.Sum256(want) {
		t.Fatalf("S3 holds %d bytes at %s; want the %d bytes of %s (%s)", len(got), key, len(want), filepath.Base(file), browserDiff(got, want))
	}
	t.Logf("%s: %d bytes at %s", filepath.Base(file), len(got), key)
}

// browserDiff names the 16 MiB stretches (parts, with the default part
// size) where got and want differ.
func browserDiff(got, want []byte) string {
	const part = 16 << 20
	var bad []string
	for i := 0; i*part < max(len(got), len(want)); i++ {
		g, w := got[min(i*part, len(got)):min((i+1)*part, len(got))], want[min(i*part, len(want)):min((i+1)*part, len(want))]
		if sha256.Sum256(g) != sha256.Sum256(w) {
			bad = append(bad, strconv.Itoa(i+1))
		}
	}
	return "differing 16 MiB stretches: " + strings.Join(bad, ",")
}

// browserOrigin is the origin of a base URL, as a browser sends it.
func browserOrigin(t *testing.T, base string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil || u.Scheme == "" || u.Host == "" {
		t.Fatalf("signer URL %q: %v", base, err)
	}
	return u.Scheme + "://" + u.Host
}

// browserDrain signs anonymously for the tenant with fresh idempotency keys
// until the signer answers 429, and returns its Retry-After in seconds.
func browserDrain(t *testing.T, signerURL, tenant string, size int) int {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	body := fmt.Sprintf(`{"contentType":"image/png","contentLength":%d}`, size)
	for i := range 1000 {
		req, _ := http.NewRequest(http.MethodPost, signerURL+"/uploads/sign", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", uuid.NewString())
		req.Header.Set("X-Tenant-ID", tenant)
		res, err := client.Do(req)
		if err != nil {
			t.Fatalf("sign %d: %v", i, err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		switch res.StatusCode {
		case http.StatusCreated:
			continue
		case http.StatusTooManyRequests:
			s, err := strconv.Atoi(res.Header.Get("Retry-After"))
			if err != nil || s < 1 {
				t.Fatalf("429 with Retry-After %q; want an integer ≥ 1", res.Header.Get("Retry-After"))
			}
			t.Logf("drained after %d signs; Retry-After %d s", i, s)
			return s
		default:
			t.Fatalf("sign %d: %d %s", i, res.StatusCode, b)
		}
	}
	t.Fatal("1000 signs and never a 429")
	return 0
}
