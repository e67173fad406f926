package integration

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mintgate/mintgate/shared/testenv"
)

// TestBrowserVerdict: the demo page in Chromium against a real stack whose
// completer verifies content (issue 37). A real PNG shows Verifying… and
// then completes, in the page's entry and in Uppy's Dashboard; HTML named
// x.png is rejected type_mismatch, and the Dashboard shows that file in
// error, naming the reason, never complete.
func TestBrowserVerdict(t *testing.T) {
	s := verdictStack(t)
	stack := browserStack{SignerURL: s.SignerURL, Tenant: "demo", Bucket: s.Bucket, S3Endpoint: s.S3Endpoint,
		S3: browserS3Client(s.S3Endpoint, testenv.AWSAccessKey, testenv.AWSSecretKey)}
	origin := browserOrigin(t, stack.SignerURL)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := browserAllowOrigin(ctx, stack.S3, stack.Bucket, origin); err != nil {
		t.Fatalf("bucket CORS for %s: %v", origin, err)
	}
	pageURL := stack.SignerURL + "/demo/?tenant=" + url.QueryEscape(stack.Tenant)
	item := `document.querySelector('.uppy-Dashboard-Item')`

	// Each case has a browser (a profile) of its own: Golden Retriever
	// keeps a page's uploads in the profile's storage, and the first
	// case's may still be there when the second opens the page.
	t.Run("a real PNG completes", func(t *testing.T) {
		tab := browserTab(t, newBrowser(t), time.Minute)
		browserOpen(t, tab, pageURL)
		browserAdd(t, tab, browserPNG(t))
		if s := browserWaitState(t, tab, 30*time.Second, "completed", "rejected", "error", "timeout"); s != "completed" {
			t.Fatalf("state %s: %s", s, browserStatus(tab))
		}
		browserPoll[bool](t, tab, "the Dashboard's complete", `(() => { const i = `+item+`;
			return !!i && i.classList.contains('is-complete') && !i.classList.contains('is-error'); })()`, 10*time.Second)
		browserShot(t, tab, "verdict-completed")
	})

	t.Run("HTML named x.png is rejected", func(t *testing.T) {
		html := filepath.Join(t.TempDir(), "x.png")
		if err := os.WriteFile(html, []byte("<!doctype html><html><body><script>alert(1)</script></body></html>\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		tab := browserTab(t, newBrowser(t), time.Minute)
		browserOpen(t, tab, pageURL)
		browserAdd(t, tab, html)
		if s := browserWaitState(t, tab, 30*time.Second, "completed", "rejected", "error", "timeout"); s != "rejected" {
			t.Fatalf("state %s: %s", s, browserStatus(tab))
		}
		if st := browserStatus(tab); !strings.Contains(st, "rejected: type_mismatch") {
			t.Errorf("the page says %q; want the rejection's reason", st)
		}
		dash := browserPoll[string](t, tab, "the Dashboard's error", `(() => { const i = `+item+`;
			return i && i.classList.contains('is-error') ? i.className + ' | ' + (i.querySelector('.uppy-Dashboard-Item-errorDetails')?.getAttribute('aria-label') || '') : false; })()`, 10*time.Second)
		if strings.Contains(dash, "is-complete") || !strings.Contains(dash, "type_mismatch") {
			t.Errorf("the Dashboard's item %q; want is-error naming type_mismatch, not is-complete", dash)
		}
		browserShot(t, tab, "verdict-rejected")
	})
}
