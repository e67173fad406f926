package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/mintgate/mintgate/shared/telemetry"
	"github.com/mintgate/mintgate/shared/testenv"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// No endpoint, or the SDK disabled: nothing is traced, and a span started
// anywhere is a no-op that allocates nothing.
func TestOffWithoutEndpoint(t *testing.T) {
	for _, vars := range []map[string]string{
		{},
		{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"},
		{"OTEL_SERVICE_NAME": "x", "OTEL_TRACES_SAMPLER": "always_on"},
	} {
		p, err := telemetry.Setup(context.Background(), "signer", env(vars))
		if err != nil || p.Enabled() {
			t.Errorf("%v: enabled %v, %v", vars, p.Enabled(), err)
		}
	}
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		c, span := telemetry.Start(ctx, "x")
		c = telemetry.WithUpload(c, "acme", "u")
		_ = telemetry.Traceparent(c)
		span.End()
	})
	if allocs != 0 {
		t.Errorf("%v allocations per untraced span, want 0", allocs)
	}
}

func TestEndpointAndSampler(t *testing.T) {
	for _, tc := range []struct {
		vars           map[string]string
		endpoint, prot string
	}{
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://j:4318/"}, "http://j:4318/v1/traces", "http/protobuf"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://j:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "http://j:4317", "grpc"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://j:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:1/x"}, "http://t:1/x", "http/protobuf"},
		{map[string]string{}, "", "http/protobuf"},
	} {
		if e, p := telemetry.Endpoint(env(tc.vars)); e != tc.endpoint || p != tc.prot {
			t.Errorf("%v: %q %q, want %q %q", tc.vars, e, p, tc.endpoint, tc.prot)
		}
	}
	for _, bad := range [][2]string{{"sometimes", ""}, {"traceidratio", "2"}, {"traceidratio", "x"}} {
		if _, err := telemetry.Sampler(bad[0], bad[1]); err == nil {
			t.Errorf("sampler %q arg %q accepted", bad[0], bad[1])
		}
	}
	if _, err := telemetry.Setup(context.Background(), "signer", env(map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})); err == nil {
		t.Error("protocol http/json accepted")
	}
}

// Exported to a real OTLP endpoint: a server span continues the incoming
// traceparent, every span under WithUpload carries the upload, a traced
// client request carries its span's traceparent, and Continue joins a
// stored traceparent's trace.
func TestSpansOfAnUpload(t *testing.T) {
	rx := testenv.StartOTLPReceiver(t)
	p, err := telemetry.Setup(context.Background(), "signer", env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": rx.Endpoint()}))
	if err != nil || !p.Enabled() {
		t.Fatalf("setup: %v", err)
	}
	var sent string
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { sent = r.Header.Get("traceparent") }))
	defer app.Close()

	const caller = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	req := httptest.NewRequest(http.MethodPost, "/uploads/sign", nil)
	req.Header.Set("traceparent", caller)
	req, server := p.Server(req, "/uploads/sign")
	ctx := telemetry.WithUpload(req.Context(), "acme", "u-1")
	stored := telemetry.Traceparent(ctx)
	_, child := telemetry.Start(ctx, "child")
	child.End()
	out, _ := http.NewRequestWithContext(ctx, http.MethodPost, app.URL, nil)
	resp, err := (&http.Client{Transport: telemetry.Transport{Inject: true}}).Do(out)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	telemetry.EndServer(server, 201)

	_, later := p.Continue(context.Background(), stored, "process", "acme", "u-1", trace.WithSpanKind(trace.SpanKindConsumer))
	later.End()
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	spans := rx.Trace(t, "0af7651916cd43dd8448eb211c80319c")
	if len(spans) != 4 {
		t.Fatalf("%d spans, want 4: %+v", len(spans), spans)
	}
	for _, s := range spans {
		if s.Attrs["mintgate.url_id"] != "u-1" || s.Attrs["mintgate.tenant"] != "acme" || s.Service != "signer" {
			t.Errorf("span %q: %v", s.Name, s.Attrs)
		}
		switch s.Name {
		case "POST /uploads/sign":
			if s.ParentID != "b7ad6b7169203331" || s.Attrs["http.response.status_code"] != "201" || s.Kind != "server" {
				t.Errorf("server span %+v", s)
			}
		case "POST":
			if !strings.Contains(sent, s.SpanID) {
				t.Errorf("the request carried %q, not its span %s", sent, s.SpanID)
			}
		}
	}
	if !strings.Contains(stored, "0af7651916cd43dd8448eb211c80319c") {
		t.Errorf("stored traceparent %q", stored)
	}
}

// A line logged with a span's context names its trace and span.
func TestLogHandler(t *testing.T) {
	var out bytes.Buffer
	log := slog.New(telemetry.LogHandler(slog.NewJSONHandler(&out, nil))).With("service", "completer")
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5}, TraceFlags: trace.FlagsSampled,
	})
	log.InfoContext(trace.ContextWithSpanContext(context.Background(), sc), "handled")
	log.Info("no span")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var first, second map[string]any
	_ = json.Unmarshal([]byte(lines[0]), &first)
	_ = json.Unmarshal([]byte(lines[1]), &second)
	if first["trace_id"] != sc.TraceID().String() || first["span_id"] != sc.SpanID().String() || first["service"] != "completer" {
		t.Errorf("line %v", first)
	}
	if _, ok := second["trace_id"]; ok {
		t.Errorf("a line without a span names a trace: %v", second)
	}
}
