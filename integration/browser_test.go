package integration

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
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
	S3     *s3.Client
	Bucket string
}

// TestBrowserUpload uploads a PNG through the demo page in headless
// Chromium against the whole stack, sees it completed, drains the caller's
// bucket and sees the page count down on 429 and then succeed with the same
// idempotency key. Screenshots of each state go to artifacts/browser/.
func TestBrowserUpload(t *testing.T) {
	stack := startStack(t)
	browser := newBrowser(t)
	file := browserPNG(t)
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	origin := browserOrigin(t, stack.SignerURL)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The PUT goes from the signer's origin to S3's: without this rule the
	// browser never sends it.
	if err := browserAllowOrigin(ctx, stack.S3, stack.Bucket, origin); err != nil {
		t.Fatalf("bucket CORS for %s: %v", origin, err)
	}

	tab := browserTab(t, browser, 3*time.Minute)
	pageURL := stack.SignerURL + "/demo/?tenant=" + url.QueryEscape(stack.Tenant)
	browserChoose(t, tab, pageURL, file)

	// The completer takes at least one poll (1 s) to confirm, so the page
	// shows the finished upload still waiting for confirmation first.
	browserWaitProgress(t, tab, 100, 30*time.Second)
	browserShot(t, tab, "progress")
	if s := browserWaitState(t, tab, 60*time.Second, "completed", "error", "timeout"); s != "completed" {
		t.Fatalf("first upload: %s", browserStatus(tab))
	}
	browserShot(t, tab, "completed")
	key := browserText(t, tab, "detail-key")
	obj, err := stack.S3.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(stack.Bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("the uploaded object %s: %v", key, err)
	}
	got, _ := io.ReadAll(obj.Body)
	obj.Body.Close()
	if !bytes.Equal(got, want) {
		t.Fatalf("S3 holds %d bytes at %s; want the %d-byte PNG", len(got), key, len(want))
	}

	// Spend what is left of the caller's bucket from here: same tenant,
	// same client IP, so the page's next sign is refused.
	retryAfter := browserDrain(t, stack.SignerURL, stack.Tenant, len(want))
	browserClick(t, tab, "upload")
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
