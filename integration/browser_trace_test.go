package integration

import (
	"context"
	"encoding/json"
	"regexp"
	"testing"
	"time"

	"github.com/mintgate/mintgate/shared/testenv"
)

// TestBrowserTimeline: the demo page in headless Chromium, with every
// service exporting its spans, uploads a PNG; once it is completed the page
// draws the upload's trace under it, read from the query API the signer
// names (MINTGATE_DEMO_TRACES_URL): the signer's sign span and the
// completer's handling of the S3 event, each in its service's group, in
// the trace the page's own traceparent started. The spans go to a real
// Jaeger when it is built (deploy/local/tools.sh jaeger), else to the
// test's OTLP receiver, which serves /api/traces/{id} in Jaeger's shape:
// the page is the same either way. Screenshot: artifacts/browser/timeline.png.
func TestBrowserTimeline(t *testing.T) {
	traces := testenv.StartTraces(t)
	s := newStack(t, stackOptions{
		Extra:       map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": traces.Endpoint()},
		SignerExtra: map[string]string{"MINTGATE_DEMO_TRACES_URL": traces.QueryURL()},
	})
	browser := newBrowser(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	origin := browserOrigin(t, s.SignerURL)
	if err := browserAllowOrigin(ctx, browserS3Client(s.S3Endpoint, testenv.AWSAccessKey, testenv.AWSSecretKey), s.Bucket, origin); err != nil {
		t.Fatalf("bucket CORS for %s: %v", origin, err)
	}
	tab := browserTab(t, browser, 3*time.Minute)
	browserChoose(t, tab, s.SignerURL+"/demo/?tenant=demo", browserPNG(t))
	if st := browserWaitState(t, tab, 2*time.Minute, "completed", "error", "timeout", "rejected"); st != "completed" {
		t.Fatalf("the upload: %s", browserStatus(tab))
	}
	urlID := browserUpload(t, tab, "urlId")

	// The timeline redraws as spans arrive: wait for both services' groups.
	const timeline = `(() => { const tl = document.querySelector('#uploads > li .timeline'); if (!tl) return false;
		const text = (svc) => { const g = tl.querySelector('.trace-service[data-service="' + svc + '"]'); return g ? g.textContent : ''; };
		const sign = text('signer'), done = text('completer');
		return sign.includes('POST /uploads/sign') && done.includes('process ') ?
			JSON.stringify({ trace: tl.dataset.traceId, spans: Number(tl.dataset.spans), bars: tl.querySelectorAll('.trace-bar').length, sign, done }) : false; })()`
	got := browserPoll[string](t, tab, "the timeline's signer and completer spans", timeline, 60*time.Second)
	var shown struct {
		Trace       string
		Spans, Bars int
		Sign, Done  string
	}
	if err := json.Unmarshal([]byte(got), &shown); err != nil {
		t.Fatalf("the timeline %s: %v", got, err)
	}
	browserShot(t, tab, "timeline")

	// It is the upload's own trace: the query API holds the sign's server
	// span of this urlId in it.
	spans := waitSpans(t, traces, shown.Trace, "the sign's span", func(spans []testenv.Span) bool {
		_, ok := find(spans, func(sp testenv.Span) bool { return sp.Service == "signer" && sp.Attrs["mintgate.url_id"] == urlID })
		return ok
	})
	if shown.Bars != shown.Spans || shown.Spans < 2 || shown.Spans > len(spans) {
		t.Errorf("the timeline draws %d bars for %d spans; the trace holds %d", shown.Bars, shown.Spans, len(spans))
	}
	// Each label is the operation and its duration.
	for _, want := range []struct{ group, label string }{
		{shown.Sign, `POST /uploads/sign · [0-9.]+ (µs|ms|s)`},
		{shown.Done, `process \S+ · [0-9.]+ (µs|ms|s)`},
	} {
		if !regexp.MustCompile(want.label).MatchString(want.group) {
			t.Errorf("the timeline shows %q; want a label %s", want.group, want.label)
		}
	}
	t.Logf("timeline of trace %s (%s): %d spans; signer %q; completer %q", shown.Trace, traces, shown.Spans, shown.Sign, shown.Done)
}
