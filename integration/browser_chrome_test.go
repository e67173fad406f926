package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

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
// timeout. When the test fails, what the page logged and threw is printed.
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

// browserChoose opens the page, picks the file and presses Upload.
func browserChoose(t *testing.T, tab context.Context, pageURL, file string) {
	t.Helper()
	err := chromedp.Do(tab,
		chromedp.Navigate(pageURL),
		chromedp.WaitVisible(chromedp.ID("file")),
		chromedp.SetUploadFiles(chromedp.ID("file"), []string{file}),
	)
	if err != nil {
		t.Fatalf("choose %s on %s: %v", file, pageURL, err)
	}
	browserClick(t, tab, "upload")
}

// browserClick clicks the element with the id once it is enabled.
func browserClick(t *testing.T, tab context.Context, id string) {
	t.Helper()
	if err := chromedp.Do(tab, chromedp.WaitEnabled(chromedp.ID(id)), chromedp.Click(chromedp.ID(id))); err != nil {
		t.Fatalf("click #%s: %v (status %q)", id, err, browserStatus(tab))
	}
}

// browserPoll waits until the JavaScript expression is truthy and returns
// its value. On timeout it fails the test with what #status says.
func browserPoll[T any](t *testing.T, tab context.Context, what, expr string, timeout time.Duration) T {
	t.Helper()
	v, err := chromedp.Run(tab, chromedp.Poll[T](expr,
		chromedp.WithPollingInterval(25*time.Millisecond), chromedp.WithPollingTimeout(timeout)))
	if err != nil {
		t.Fatalf("waiting for %s: %v (status %q)", what, err, browserStatus(tab))
	}
	return v
}

// browserWaitState waits until #status is in one of the states and returns
// the state it reached.
func browserWaitState(t *testing.T, tab context.Context, timeout time.Duration, states ...string) string {
	t.Helper()
	list, _ := json.Marshal(states)
	expr := fmt.Sprintf(`(() => { const s = document.getElementById('status').dataset.state; return %s.includes(s) ? s : false; })()`, list)
	return browserPoll[string](t, tab, "state "+strings.Join(states, "|"), expr, timeout)
}

// browserWaitProgress waits until the progress bar says percent.
func browserWaitProgress(t *testing.T, tab context.Context, percent int, timeout time.Duration) {
	t.Helper()
	expr := fmt.Sprintf(`document.getElementById('progress').getAttribute('aria-valuenow') === '%d'`, percent)
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

// browserText is the text of the element with the id.
func browserText(t *testing.T, tab context.Context, id string) string {
	t.Helper()
	s, err := chromedp.Run(tab, chromedp.Evaluate[string](fmt.Sprintf(`document.getElementById(%q).textContent`, id)))
	if err != nil {
		t.Fatalf("text of #%s: %v", id, err)
	}
	return s
}

// browserStatus describes #status for failure messages.
func browserStatus(tab context.Context) string {
	ctx, cancel := context.WithTimeout(tab, 2*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](
		`(() => { const s = document.getElementById('status'); return s ? s.dataset.state + ': ' + s.textContent : 'no #status'; })()`))
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
