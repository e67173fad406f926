package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/mintgate/mintgate/shared/testenv"
)

// browserChromium is Debian's Chromium, which deploy/local/tools.sh installs
// (`tools.sh chromium`). No browser is ever downloaded by a test tool.
const browserChromium = "/usr/bin/chromium"

// newBrowser starts a headless Chromium with a fresh profile for the test
// and returns its browser context; open tabs in it with browserTab. Without
// Chromium the test is skipped, except in CI (CI set), where it fails:
// CI runs tools.sh, so a missing browser there is a broken setup, not a
// reason to skip.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	if _, err := os.Stat(browserChromium); err != nil {
		msg := browserChromium + " not found; install it with deploy/local/tools.sh chromium"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip("browser test skipped: " + msg)
	}
	profile, err := os.MkdirTemp("", "mintgate-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], // headless, no-first-run, disable-background-networking, disable-sync, …
		chromedp.ExecPath(browserChromium),
		chromedp.NoSandbox, // tests run as root
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1000, 1300),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
		// Chromium's helpers can write to the profile for a moment after
		// the browser exits.
		for range 50 {
			if os.RemoveAll(profile) == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	// The first run starts the browser; it must not carry a timeout.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start %s: %v", browserChromium, err)
	}
	return ctx
}

// browserTab opens a tab in the browser that ends with the test or after
// timeout. A violation of the page's Content-Security-Policy fails the
// test; when the test fails, what the page logged and threw is printed.
func browserTab(t *testing.T, browser context.Context, timeout time.Duration) context.Context {
	t.Helper()
	ctx, cancelTimeout := context.WithTimeout(browser, timeout)
	ctx, cancelTab := chromedp.NewContext(ctx)
	if err := chromedp.Do(ctx); err != nil {
		cancelTab()
		cancelTimeout()
		t.Fatalf("open tab: %v", err)
	}
	var (
		mu    sync.Mutex
		lines []string
		wg    sync.WaitGroup
	)
	add := func(s string) { mu.Lock(); lines = append(lines, s); mu.Unlock() }
	var csp []string
	logEvents := chromedp.Events(ctx, cdplog.EntryAdded)
	wg.Go(func() {
		for ev, err := range logEvents {
			if err != nil {
				return
			}
			if e := ev.Entry; e != nil {
				add(fmt.Sprintf("log.%s (%s): %s %s", e.Level, e.Source, e.Text, e.URL))
				if strings.Contains(e.Text, "Content Security Policy") {
					mu.Lock()
					csp = append(csp, e.Text)
					mu.Unlock()
				}
			}
		}
	})
	consoleEvents := chromedp.Events(ctx, runtime.ConsoleAPICalled)
	exceptionEvents := chromedp.Events(ctx, runtime.ExceptionThrown)
	wg.Go(func() {
		for ev, err := range consoleEvents {
			if err != nil {
				return
			}
			var args []string
			for _, a := range ev.Args {
				args = append(args, strings.Trim(string(a.Value), `"`)+a.Description)
			}
			add(fmt.Sprintf("console.%s: %s", ev.Type, strings.Join(args, " ")))
		}
	})
	wg.Go(func() {
		for ev, err := range exceptionEvents {
			if err != nil {
				return
			}
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			add(fmt.Sprintf("exception at %s:%d: %s", d.URL, d.LineNumber, msg))
		}
	})
	t.Cleanup(func() {
		cancelTab()
		cancelTimeout()
		wg.Wait()
		// The page works under its own CSP: the browser refused it nothing.
		for _, v := range csp {
			t.Errorf("the page broke its Content-Security-Policy: %s", v)
		}
		if t.Failed() && len(lines) > 0 {
			t.Logf("the page logged:\n%s", strings.Join(lines, "\n"))
		}
	})
	return ctx
}

// browserPNG writes a small generated PNG (a mint gradient) and returns its
// path.
func browserPNG(t *testing.T) string {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 96, 64))
	for y := range 64 {
		for x := range 96 {
			img.Set(x, y, color.RGBA{R: uint8(x), G: uint8(124 + y), B: uint8(102 + x/2), A: 255})
		}
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "mintgate-demo.png")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// browserChoose opens the page and adds the file to Uppy's Dashboard,
// which uploads it at once.
func browserChoose(t *testing.T, tab context.Context, pageURL, file string) {
	t.Helper()
	browserOpen(t, tab, pageURL)
	browserAdd(t, tab, file)
}

// browserOpen opens the page and waits until it has read the signer's
// limits and set up Uppy.
func browserOpen(t *testing.T, tab context.Context, pageURL string) {
	t.Helper()
	if err := chromedp.Do(tab, chromedp.Navigate(pageURL)); err != nil {
		t.Fatalf("open %s: %v", pageURL, err)
	}
	const ready = `(() => { const n = document.getElementById('notice'); return n && n.dataset.state !== 'loading' ? n.dataset.state + ': ' + n.textContent : false; })()`
	if s := browserPoll[string](t, tab, "the page to set up Uppy", ready, 10*time.Second); !strings.HasPrefix(s, "ready") {
		t.Fatalf("the page did not set up: %s", s)
	}
}

// browserDashboardInput is the file input of Uppy's Dashboard (not the
// folder picker beside it).
const browserDashboardInput = `#dashboard input.uppy-Dashboard-input:not([webkitdirectory])`

// browserAdd gives Uppy's Dashboard the files, as a pick does: with files
// in it already, through its "Add more" button, as a user would.
func browserAdd(t *testing.T, tab context.Context, files ...string) {
	t.Helper()
	open := fmt.Sprintf(`(() => { if (document.querySelector(%q)) return true;
		const more = document.querySelector('.uppy-DashboardContent-addMore'); if (more) more.click(); return false; })()`, browserDashboardInput)
	browserPoll[bool](t, tab, "the Dashboard's file input", open, 10*time.Second)
	if err := chromedp.Do(tab, chromedp.SetUploadFiles(chromedp.CSS(browserDashboardInput), files)); err != nil {
		t.Fatalf("add %v to the Dashboard: %v", files, err)
	}
}

// browserPoll waits until the JavaScript expression is truthy and returns
// its value. On timeout it fails the test with what the newest upload says.
func browserPoll[T any](t *testing.T, tab context.Context, what, expr string, timeout time.Duration) T {
	t.Helper()
	v, err := chromedp.Run(tab, chromedp.Poll[T](expr,
		chromedp.WithPollingInterval(25*time.Millisecond), chromedp.WithPollingTimeout(timeout)))
	if err != nil {
		t.Fatalf("waiting for %s: %v (status %q)", what, err, browserStatus(tab))
	}
	return v
}

// browserEntry is the JavaScript for the newest upload's entry on the page.
const browserEntry = `document.querySelector('#uploads > li')`

// browserWaitState waits until the newest upload is in one of the states
// and returns the state it reached.
func browserWaitState(t *testing.T, tab context.Context, timeout time.Duration, states ...string) string {
	t.Helper()
	list, _ := json.Marshal(states)
	expr := fmt.Sprintf(`(() => { const e = %s; const s = e ? e.dataset.state : ''; return %s.includes(s) ? s : false; })()`, browserEntry, list)
	return browserPoll[string](t, tab, "state "+strings.Join(states, "|"), expr, timeout)
}

// browserWaitProgress waits until the newest upload's PUTs (its parts, or
// its one PUT) have sent percent of the file.
func browserWaitProgress(t *testing.T, tab context.Context, percent int, timeout time.Duration) {
	t.Helper()
	expr := fmt.Sprintf(`(() => { const e = %s; if (!e) return false; let v = 0, m = 0;
		for (const p of e.querySelectorAll('.parts progress')) { v += p.value; m += p.max; }
		return m > 0 && Math.floor(100 * v / m) >= %d; })()`, browserEntry, percent)
	browserPoll[bool](t, tab, fmt.Sprintf("progress %d%%", percent), expr, timeout)
}

// browserWaitCountdown waits until the retry countdown shows and returns the
// seconds it shows.
func browserWaitCountdown(t *testing.T, tab context.Context, timeout time.Duration) int {
	t.Helper()
	const expr = `(() => { const c = document.getElementById('countdown');
		const s = Number(c.dataset.seconds); return !c.hidden && s > 0 ? s : false; })()`
	return browserPoll[int](t, tab, "the retry countdown", expr, timeout)
}

// browserUpload reads a field of the newest upload's entry: its data-*
// attributes (urlId, key, size, state) or, for "title", "kind" and
// "parts", what it shows.
func browserUpload(t *testing.T, tab context.Context, field string) string {
	t.Helper()
	expr := fmt.Sprintf(`(() => { const e = %s; if (!e) return '';
		switch (%q) {
		case 'title': return e.querySelector('h3').textContent;
		case 'kind': return e.querySelector('.kind').textContent;
		case 'parts': return String(e.querySelectorAll('.parts li').length);
		default: return e.dataset[%q] || ''; } })()`, browserEntry, field, field)
	s, err := chromedp.Run(tab, chromedp.Evaluate[string](expr))
	if err != nil {
		t.Fatalf("the upload's %s: %v", field, err)
	}
	return s
}

// browserStatus describes the newest upload for failure messages: its
// state and what it says.
func browserStatus(tab context.Context) string {
	ctx, cancel := context.WithTimeout(tab, 2*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(
		`(() => { const e = %s; return e ? e.dataset.state + ': ' + e.querySelector('.state').textContent : 'no upload: ' + document.getElementById('notice').textContent; })()`, browserEntry)))
	if err != nil {
		return "unreadable: " + err.Error()
	}
	return s
}

// browserShot saves a screenshot of the whole page as
// artifacts/browser/<name>.png at the repository root (git-ignored).
func browserShot(t *testing.T, tab context.Context, name string) {
	t.Helper()
	img, err := chromedp.Run(tab, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	root, err := testenv.Root()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "artifacts", "browser")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, img, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// browserRequest is one request the page sent.
type browserRequest struct{ method, url, path string }

// browserRecordRequests records every request the tab sends from now on
// (documents, scripts, styles, fetches and XHRs, preflights included); the
// function returned lists them so far.
func browserRecordRequests(t *testing.T, tab context.Context) func() []browserRequest {
	t.Helper()
	var (
		mu   sync.Mutex
		seen []browserRequest
	)
	events := chromedp.Events(tab, network.RequestWillBeSent)
	go func() {
		for e, err := range events {
			if err != nil {
				return
			}
			if e.Request == nil {
				continue
			}
			path := ""
			if u, err := url.Parse(e.Request.URL); err == nil {
				path = u.Path
			}
			mu.Lock()
			seen = append(seen, browserRequest{method: e.Request.Method, url: e.Request.URL, path: path})
			mu.Unlock()
		}
	}()
	// chromedp enables the network domain of every tab it opens.
	return func() []browserRequest {
		mu.Lock()
		defer mu.Unlock()
		return append([]browserRequest(nil), seen...)
	}
}
