package integration

import (
	"context"
	"fmt"
	"math"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mintgate/mintgate/shared/testenv"
)

// TestBrowserPerf measures, in headless Chromium against the whole stack,
// a 256 MiB upload (16 parts of 16 MiB) through the Mintgate Uppy plugin
// and through the client alone, in turns within one run, and prints the
// times side by side with their spread. It asserts nothing about time (a
// report, not a timed test) and runs only with MINTGATE_PERF=1:
//
//	MINTGATE_PERF=1 go test ./integration -run TestBrowserPerf -v
//
// MINTGATE_PERF_ROUNDS sets the rounds (default 5); docs/performance.md
// holds a report.
func TestBrowserPerf(t *testing.T) {
	if os.Getenv("MINTGATE_PERF") != "1" {
		t.Skip("a measurement, not a test: set MINTGATE_PERF=1")
	}
	rounds := 5
	if n, err := fmt.Sscan(os.Getenv("MINTGATE_PERF_ROUNDS"), &rounds); n != 1 || err != nil || rounds < 1 {
		rounds = 5
	}
	browser := newBrowser(t)
	s := newStack(t, stackOptions{Tiers: "anonymous=100:1,user=30:0.5,tenant=1000:10"})
	stack := browserStack{SignerURL: s.SignerURL, Tenant: "demo", Bucket: s.Bucket, S3Endpoint: s.S3Endpoint,
		S3: browserS3Client(s.S3Endpoint, testenv.AWSAccessKey, testenv.AWSSecretKey)}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	if err := browserAllowOrigin(ctx, stack.S3, stack.Bucket, browserOrigin(t, stack.SignerURL)); err != nil {
		t.Fatal(err)
	}
	tab := browserTab(t, browser, 30*time.Minute)
	browserOpen(t, tab, stack.SignerURL+"/demo/?debug=1&tenant="+url.QueryEscape(stack.Tenant))

	// One Blob of 256 MiB, made once in the page, uploaded by both ways
	// (each upload is a new grant and a new key, so nothing is deduplicated).
	const setup = `(() => {
		const size = 256 * 1024 * 1024, chunk = new Uint8Array(1 << 20);
		const chunks = [];
		for (let i = 0; i < size / chunk.length; i++) { crypto.getRandomValues(chunk.subarray(0, 65536)); chunk[65536] = i; chunks.push(chunk.slice()); }
		window.perfBlob = new Blob(chunks, { type: 'application/pdf' });
		return window.perfBlob.size; })()`
	if _, err := chromedp.Run(tab, chromedp.Evaluate[int](setup)); err != nil {
		t.Fatalf("make the blob: %v", err)
	}
	const viaClient = `(async () => { const m = window.mintgate; const t0 = performance.now();
		const r = await m.client.upload(window.perfBlob); if (r.size !== window.perfBlob.size) throw new Error('size ' + r.size);
		return performance.now() - t0; })()`
	const viaPlugin = `(async () => { const m = window.mintgate;
		const u = new m.Uppy({ id: 'perf-' + Math.random() }); u.use(m.Mintgate, { client: m.client });
		u.addFile({ name: 'perf.pdf', type: 'application/pdf', data: window.perfBlob });
		const t0 = performance.now(); const r = await u.upload(); const ms = performance.now() - t0;
		if (r.failed.length) throw new Error(String(r.failed[0].error)); u.destroy(); return ms; })()`
	times := map[string][]float64{}
	for i := range rounds {
		// Alternate the order, so neither way always goes first.
		order := []string{"plugin", "client"}
		if i%2 == 1 {
			slices.Reverse(order)
		}
		for _, way := range order {
			expr := viaClient
			if way == "plugin" {
				expr = viaPlugin
			}
			ms, err := chromedp.Run(tab, chromedp.Evaluate[float64](expr, chromedp.EvalAwaitPromise))
			if err != nil {
				t.Fatalf("round %d, %s: %v", i+1, way, err)
			}
			times[way] = append(times[way], ms/1000)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "256 MiB in 16 parts of 16 MiB, %d rounds, Chromium %s, timed in the page (performance.now)\n", rounds, browserVersion(t, tab))
	fmt.Fprintf(&b, "%-28s %8s %8s %8s %8s %10s\n", "way", "median", "min", "max", "stddev", "MiB/s (med)")
	for _, way := range []string{"client", "plugin"} {
		v := times[way]
		med, lo, hi, sd := perfStats(v)
		fmt.Fprintf(&b, "%-28s %7.2fs %7.2fs %7.2fs %7.2fs %10.0f\n", map[string]string{"client": "client.upload (no Uppy)", "plugin": "Uppy 6 + Mintgate plugin"}[way], med, lo, hi, sd, 256/med)
	}
	for _, way := range []string{"client", "plugin"} {
		fmt.Fprintf(&b, "%s, round by round: %.2f s\n", way, times[way])
	}
	t.Logf("report:\n%s", b.String())
}

// perfStats is the median, minimum, maximum and standard deviation of v.
func perfStats(v []float64) (med, lo, hi, sd float64) {
	s := slices.Sorted(slices.Values(v))
	n := len(s)
	med = s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	var sum float64
	for _, x := range s {
		sum += x
	}
	mean := sum / float64(n)
	for _, x := range s {
		sd += (x - mean) * (x - mean)
	}
	return med, s[0], s[n-1], math.Sqrt(sd / float64(n))
}

// browserVersion is the browser's user agent version, for the report.
func browserVersion(t *testing.T, tab context.Context) string {
	t.Helper()
	v, err := chromedp.Run(tab, chromedp.Evaluate[string](`(navigator.userAgent.match(/Chrome\/([\d.]+)/) || [])[1] || navigator.userAgent`))
	if err != nil {
		return "unknown"
	}
	return v
}
