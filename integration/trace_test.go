package integration

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mintgate/mintgate/api"
	"github.com/mintgate/mintgate/shared/testenv"
)

// One trace per upload (SPEC §10, "Tracing"), on real servers: the
// services export OTLP to a real Jaeger when it is built
// (deploy/local/tools.sh jaeger), else to the test's own OTLP receiver
// (testenv.StartTraces says which).

// hookApp is the app's webhook endpoint: it keeps the traceparent of every
// POST by webhook-id and answers 204.
type hookApp struct {
	*httptest.Server
	mu     sync.Mutex
	parent map[string]string
}

func startHookApp(t *testing.T) *hookApp {
	a := &hookApp{parent: map[string]string{}}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		a.mu.Lock()
		a.parent[r.Header.Get("webhook-id")] = r.Header.Get("traceparent")
		a.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(a.Close)
	return a
}

func (a *hookApp) traceparent(id string) (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	tp, ok := a.parent[id]
	return tp, ok
}

// callerSpan is a caller's own trace and span: the traceparent it sends.
func callerSpan(t *testing.T) (traceID, spanID, traceparent string) {
	t.Helper()
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	traceID, spanID = hex.EncodeToString(b[:16]), hex.EncodeToString(b[16:])
	return traceID, spanID, "00-" + traceID + "-" + spanID + "-01"
}

// signTraced is a sign of size bytes of image/png carrying traceparent.
func (s *stack) signTraced(t *testing.T, bearer string, size int, traceparent string) api.SignResponse {
	t.Helper()
	body := fmt.Sprintf(`{"contentType":"image/png","contentLength":%d}`, size)
	req, _ := http.NewRequest(http.MethodPost, s.SignerURL+"/uploads/sign", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", uuid.NewString())
	req.Header.Set("Authorization", "Bearer "+bearer)
	req.Header.Set("traceparent", traceparent)
	resp, err := httpc.Do(req)
	if err != nil {
		t.Fatalf("sign: %v", err)
	}
	defer resp.Body.Close()
	var out api.SignResponse
	if resp.StatusCode != http.StatusCreated || json.NewDecoder(resp.Body).Decode(&out) != nil {
		t.Fatalf("sign: %d", resp.StatusCode)
	}
	return out
}

// pngBytes is a real 4×4 PNG, which the gate's type and pixel checks pass.
func pngBytes(t *testing.T) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, image.NewGray(image.Rect(0, 0, 4, 4))); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// waitSpans polls traces until want holds of traceID's spans.
func waitSpans(t *testing.T, traces testenv.Traces, traceID, what string, want func([]testenv.Span) bool) []testenv.Span {
	t.Helper()
	var spans []testenv.Span
	deadline := time.Now().Add(45 * time.Second)
	for time.Now().Before(deadline) {
		if spans = traces.Trace(t, traceID); want(spans) {
			return spans
		}
		time.Sleep(250 * time.Millisecond)
	}
	for _, s := range spans {
		t.Logf("span %s %q (%s) parent %s %v", s.Service, s.Name, s.Kind, s.ParentID, s.Attrs)
	}
	t.Fatalf("trace %s in %v: %s never held", traceID, traces, what)
	return nil
}

func find(spans []testenv.Span, f func(testenv.Span) bool) (testenv.Span, bool) {
	for _, s := range spans {
		if f(s) {
			return s, true
		}
	}
	return testenv.Span{}, false
}

// checkUpload fails for a span that does not name the upload.
func checkUpload(t *testing.T, spans []testenv.Span, tenant, urlID string) {
	t.Helper()
	for _, s := range spans {
		if s.Attrs["mintgate.url_id"] != urlID || s.Attrs["mintgate.tenant"] != tenant {
			t.Errorf("span %s %q lacks the upload: %v", s.Service, s.Name, s.Attrs)
		}
	}
}

// TestOneTracePerUpload: a sign sent with a traceparent yields one trace
// holding the signer's server span (a child of the caller's), the
// completer's handling of the S3 event (aws_sqs) and its gate steps, and a
// webhook try whose POST carried that trace's traceparent; an expired
// unused grant's trace holds the sweeper's refund (nats). Every span names
// the upload. A completer SIGKILLed while it holds an event (clamd down)
// handles the redelivery in the upload's trace.
func TestOneTracePerUpload(t *testing.T) {
	traces := testenv.StartTraces(t)
	clam := testenv.StartClamd(t, 1<<20)
	app := startHookApp(t)
	secret := newSecret(t)
	env := hookEnv(app.URL+"/hooks", secret)
	env["OTEL_EXPORTER_OTLP_ENDPOINT"] = traces.Endpoint()
	env["MINTGATE_VERIFY"] = "on"
	env["MINTGATE_CLAMD_ADDR"] = clam.Addr
	// URLs live 20 s: the unused grant below is refunded soon after, and its
	// grant record (which keeps the sign's traceparent) lives 2 × (20 s +
	// grace), long enough for the completer's SIGKILL and restart below.
	s := newStack(t, stackOptions{URLTTL: 20 * time.Second, Grace: time.Second, Extra: env})
	tok := s.token(t, "acme", "tracer")
	body := pngBytes(t)

	traceID, callerID, tp := callerSpan(t)
	g := s.signTraced(t, tok, len(body), tp)
	if code := put(t, g, body); code != http.StatusOK {
		t.Fatalf("PUT: %d", code)
	}
	s.waitStatus(t, tok, g.URLID, "completed", 30*time.Second)
	hook := "msg_" + g.URLID + "_completed"
	spans := waitSpans(t, traces, traceID, "sign, handling, gate and webhook", func(spans []testenv.Span) bool {
		_, hooked := find(spans, func(s testenv.Span) bool {
			return s.Service == "completer" && s.Attrs["messaging.system"] == "nats" && s.Attrs["http.response.status_code"] == "204"
		})
		_, scanned := find(spans, func(s testenv.Span) bool { return s.Name == "gate scan" })
		return hooked && scanned
	})
	sign, ok := find(spans, func(s testenv.Span) bool { return s.Service == "signer" && s.Kind == "server" })
	if !ok || sign.ParentID != callerID || sign.Name != "POST /uploads/sign" ||
		sign.Attrs["http.request.method"] != "POST" || sign.Attrs["http.response.status_code"] != "201" {
		t.Errorf("the sign's server span %+v, want POST /uploads/sign, a child of %s, status 201", sign, callerID)
	}
	handled, ok := find(spans, func(s testenv.Span) bool { return s.Attrs["messaging.system"] == "aws_sqs" })
	if !ok || handled.Service != "completer" || handled.Kind != "consumer" || handled.ParentID != sign.SpanID {
		t.Errorf("the completer's handling %+v, want an aws_sqs consumer span, a child of the sign's", handled)
	}
	for _, step := range []string{"gate head", "gate type", "gate scan", "clamd INSTREAM", "S3.HeadObject", "S3.GetObject", "EVALSHA"} {
		if _, ok := find(spans, func(s testenv.Span) bool { return s.Name == step }); !ok {
			t.Errorf("no %q span in the upload's trace", step)
		}
	}
	if got, ok := app.traceparent(hook); !ok || !strings.Contains(got, "-"+traceID+"-") {
		t.Errorf("the webhook POST's traceparent %q, want one of trace %s", got, traceID)
	}
	checkUpload(t, spans, "acme", g.URLID)

	// An expired unused grant: the sweeper's refund joins its trace.
	unusedTrace, _, tp2 := callerSpan(t)
	unused := s.signTraced(t, tok, len(body), tp2)
	s.waitStatus(t, tok, unused.URLID, "refunded", 60*time.Second)
	spans = waitSpans(t, traces, unusedTrace, "the sweeper's refund", func(spans []testenv.Span) bool {
		_, ok := find(spans, func(s testenv.Span) bool { return s.Service == "sweeper" && s.Attrs["messaging.system"] == "nats" })
		return ok
	})
	if r, _ := find(spans, func(s testenv.Span) bool { return s.Service == "sweeper" }); r.Attrs["mintgate.sweep.outcome"] != "refunded" {
		t.Errorf("the sweeper's span %+v, want outcome refunded", r)
	}
	checkUpload(t, spans, "acme", unused.URLID)

	// clamd down: the completer holds the event; SIGKILLed, and started
	// again with clamd back, it handles the redelivery in the same trace.
	killedTrace, _, tp3 := callerSpan(t)
	held := s.signTraced(t, tok, len(body), tp3)
	clam.Stop()
	if code := put(t, held, body); code != http.StatusOK {
		t.Fatalf("PUT: %d", code)
	}
	s.waitStatus(t, tok, held.URLID, "verifying", 30*time.Second)
	s.Completer.Kill()
	clam.Start()
	s.Completer.Start()
	s.waitStatus(t, tok, held.URLID, "completed", 60*time.Second)
	spans = waitSpans(t, traces, killedTrace, "the redelivery's handling", func(spans []testenv.Span) bool {
		_, ok := find(spans, func(s testenv.Span) bool {
			return s.Attrs["messaging.system"] == "aws_sqs" && s.Attrs["mintgate.url_id"] == held.URLID
		})
		_, scanned := find(spans, func(s testenv.Span) bool { return s.Name == "clamd INSTREAM" })
		return ok && scanned
	})
	checkUpload(t, spans, "acme", held.URLID)
}
