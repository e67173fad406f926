package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/chromedp/chromedp"

	"github.com/mintgate/mintgate/shared/testenv"
)

// TestBrowserResume drives the demo page (Uppy 6, the Mintgate plugin,
// Golden Retriever with its service worker) against the whole stack:
//   - a 120 MiB file reloaded after two of its 8 parts resumes the same
//     grant, uploads only the parts S3 lacks, and lands with its exact bytes,
//     one token spent and one multipart upload created;
//   - a multipart upload whose file is removed from the Dashboard is
//     aborted: S3 no longer lists it, the grant reads aborted, and its
//     token stays spent (a DELETE gives back the bytes, never the token).
//
// The anonymous tier refills one token an hour here, so the caller's
// bucket counts exactly what the page spent.
func TestBrowserResume(t *testing.T) {
	browser := newBrowser(t)
	gate := newBrowserPartGate(t)
	s := newStack(t, stackOptions{Tiers: "anonymous=10:1/1h,user=30:0.5,tenant=600:10", PresignVia: gate.presignVia})
	stack := browserStack{SignerURL: s.SignerURL, Tenant: "demo", Bucket: s.Bucket, S3Endpoint: s.S3Endpoint,
		S3: browserS3Client(s.S3Endpoint, testenv.AWSAccessKey, testenv.AWSSecretKey)}
	dir := t.TempDir()
	large := browserFile(t, dir, "resume.pdf", 120<<20)
	origin := browserOrigin(t, stack.SignerURL)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := browserAllowOrigin(ctx, stack.S3, stack.Bucket, origin); err != nil {
		t.Fatalf("bucket CORS for %s: %v", origin, err)
	}
	pageURL := stack.SignerURL + "/demo/?debug=1&tenant=" + url.QueryEscape(stack.Tenant)
	tokens := func() int { return browserQuota(t, stack.SignerURL, stack.Tenant) }

	t.Run("reloaded after two parts", func(t *testing.T) {
		tab := browserTab(t, browser, 4*time.Minute)
		requests := browserRecordRequests(t, tab)
		gate.hold(2)
		defer gate.open()
		before := tokens()
		browserOpen(t, tab, pageURL)
		browserAdd(t, tab, large)
		browserWaitParts(t, tab, 2, time.Minute)
		browserShot(t, tab, "resume-before-reload")
		urlID := browserUpload(t, tab, "urlId")
		// Golden Retriever writes the files' state at most every 500 ms.
		time.Sleep(time.Second)
		if err := chromedp.Do(tab, chromedp.Reload()); err != nil {
			t.Fatalf("reload: %v", err)
		}
		gate.open()
		if s := browserWaitState(t, tab, 2*time.Minute, "completed", "error", "timeout"); s != "completed" {
			t.Fatalf("after the reload: %s", browserStatus(tab))
		}
		browserShot(t, tab, "resume-completed")
		if got := browserUpload(t, tab, "urlId"); got != urlID {
			t.Errorf("the page completed grant %s; want the one of before the reload, %s", got, urlID)
		}
		browserSameObject(ctx, t, stack, browserUpload(t, tab, "key"), large)

		creates, lists := 0, 0
		puts := map[string]int{} // part number → PUTs sent
		for _, r := range requests() {
			switch {
			case r.method == http.MethodPost && (strings.HasSuffix(r.path, "/uploads/multipart") || strings.HasSuffix(r.path, "/uploads/sign")):
				creates++
			case r.method == http.MethodGet && strings.HasSuffix(r.path, "/parts"):
				lists++
			case r.method == http.MethodPut:
				if u, err := url.Parse(r.url); err == nil {
					puts[u.Query().Get("partNumber")]++
				}
			}
		}
		if creates != 1 {
			t.Errorf("the page asked for %d grants; want one multipart create across the reload", creates)
		}
		if lists != 1 {
			t.Errorf("the page listed the parts S3 holds %d times; want once, after the reload", lists)
		}
		if puts["1"] != 1 || puts["2"] != 1 {
			t.Errorf("parts 1 and 2 went up %d and %d times; want once each (S3 had them before the reload)", puts["1"], puts["2"])
		}
		if spent := before - tokens(); spent != 1 {
			t.Errorf("the upload spent %d tokens; want 1", spent)
		}
	})

	t.Run("removed file aborts its multipart upload", func(t *testing.T) {
		other := browserFile(t, dir, "cancel.pdf", 110<<20)
		tab := browserTab(t, browser, 2*time.Minute)
		gate.hold(1)
		defer gate.open()
		before := tokens()
		browserOpen(t, tab, pageURL)
		browserAdd(t, tab, other)
		browserWaitParts(t, tab, 1, time.Minute)
		key, urlID := browserUpload(t, tab, "key"), browserUpload(t, tab, "urlId")
		if ups := browserMultipartUploads(ctx, t, stack, key); ups != 1 {
			t.Fatalf("S3 lists %d multipart uploads of %s mid-upload; want 1", ups, key)
		}
		const remove = `(() => { const b = document.querySelector('.uppy-Dashboard-Item-action--remove'); if (b) b.click(); return !!b; })()`
		browserPoll[bool](t, tab, "the Dashboard's remove button", remove, 10*time.Second)
		browserWaitState(t, tab, 10*time.Second, "cancelled")
		eventually(t, 10*time.Second, "the grant reads aborted", func() bool {
			return browserGrantStatus(t, stack.SignerURL, stack.Tenant, urlID) == "aborted"
		})
		if ups := browserMultipartUploads(ctx, t, stack, key); ups != 0 {
			t.Errorf("S3 still lists %d multipart uploads of %s", ups, key)
		}
		if spent := before - tokens(); spent != 1 {
			t.Errorf("the aborted upload spent %d tokens; want 1 (a create's token stays spent)", spent)
		}
	})
}

// browserPartGate is a proxy in front of S3 (the signer presigns for it)
// that holds the PUTs of parts above a number until opened: the way to
// stop an upload after exactly so many parts, as a network that stalls
// would. A held PUT never reaches S3: when the gate opens it is answered
// 503, as a dropped connection (the page that sent it is gone by then; if
// it were passed on late, it would overwrite the part the reloaded page
// sent, with what was left of its body). Everything else it passes on as
// it came (Host included, which the presigned signature covers).
type browserPartGate struct {
	mu     sync.Mutex
	allow  int
	opened chan struct{}
	proxy  *httputil.ReverseProxy
	srv    *httptest.Server
}

func newBrowserPartGate(t *testing.T) *browserPartGate {
	g := &browserPartGate{allow: -1, opened: make(chan struct{})}
	g.srv = httptest.NewServer(g)
	t.Cleanup(g.srv.Close)
	return g
}

// presignVia is stackOptions.PresignVia: it points the gate at S3.
func (g *browserPartGate) presignVia(s3Endpoint string) string {
	target, err := url.Parse(s3Endpoint)
	if err != nil {
		panic(err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.proxy = &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target)
		r.Out.Host = r.In.Host
	}}
	return g.srv.URL
}

// hold holds every part PUT numbered above allow from now on, until open.
func (g *browserPartGate) hold(allow int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.allow, g.opened = allow, make(chan struct{})
}

// open lets every part through from now on, and drops the held ones.
func (g *browserPartGate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.allow >= 0 {
		close(g.opened)
		g.allow = -1
	}
}

func (g *browserPartGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n, _ := strconv.Atoi(r.URL.Query().Get("partNumber"))
	g.mu.Lock()
	allow, opened, proxy := g.allow, g.opened, g.proxy
	g.mu.Unlock()
	if r.Method == http.MethodPut && allow >= 0 && n > allow {
		select {
		case <-opened:
			http.Error(w, "dropped by the test's gate", http.StatusServiceUnavailable)
		case <-r.Context().Done(): // the page went away
		}
		return
	}
	proxy.ServeHTTP(w, r)
}

// browserWaitParts waits until the newest upload shows n parts done.
func browserWaitParts(t *testing.T, tab context.Context, n int, timeout time.Duration) {
	t.Helper()
	expr := fmt.Sprintf(`(() => { const e = %s; return !!e && e.querySelectorAll('.parts li[data-state="done"]').length >= %d; })()`, browserEntry, n)
	browserPoll[bool](t, tab, fmt.Sprintf("%d parts done", n), expr, timeout)
}

// browserMultipartUploads counts the multipart uploads S3 lists for key.
func browserMultipartUploads(ctx context.Context, t *testing.T, stack browserStack, key string) int {
	t.Helper()
	out, err := stack.S3.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String(stack.Bucket), Prefix: aws.String(key)})
	if err != nil {
		t.Fatalf("list multipart uploads: %v", err)
	}
	return len(out.Uploads)
}

// browserAnonGet GETs a signer route as the page's anonymous caller (same
// tenant, same address) and decodes its JSON answer into out.
func browserAnonGet(t *testing.T, signerURL, tenant, path string, out any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, signerURL+path, nil)
	req.Header.Set("X-Tenant-ID", tenant)
	res, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", path, res.StatusCode)
	}
	if err := json.NewDecoder(res.Body).Decode(out); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

// browserQuota is the tokens the anonymous caller has left (GET /uploads/quota spends none).
func browserQuota(t *testing.T, signerURL, tenant string) int {
	t.Helper()
	var q struct {
		Caller struct {
			Remaining int `json:"remaining"`
		} `json:"caller"`
	}
	browserAnonGet(t, signerURL, tenant, "/uploads/quota", &q)
	return q.Caller.Remaining
}

// browserGrantStatus is what GET /uploads/{urlId} says of the anonymous caller's grant.
func browserGrantStatus(t *testing.T, signerURL, tenant, urlID string) string {
	t.Helper()
	var s struct {
		Status string `json:"status"`
	}
	browserAnonGet(t, signerURL, tenant, "/uploads/"+url.PathEscape(urlID), &s)
	return s.Status
}
