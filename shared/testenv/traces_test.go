package testenv

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// TestOTLPReceiverServesTraces: a span exported to the receiver is served
// back by /api/traces/{id} in Jaeger's shape (what Jaeger.Trace and the
// demo page read: operation, service, start and duration in µs), to any
// origin; an unknown trace is 404.
func TestOTLPReceiverServesTraces(t *testing.T) {
	r := StartOTLPReceiver(t)
	traceID := bytes.Repeat([]byte{0xab}, 16)
	start := time.Date(2026, 12, 4, 18, 0, 0, 0, time.UTC)
	in := &coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{
		Resource: &resourcepb.Resource{Attributes: []*commonpb.KeyValue{{Key: "service.name",
			Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: "signer"}}}}},
		ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{{
			TraceId: traceID, SpanId: bytes.Repeat([]byte{1}, 8), Name: "POST /uploads/sign",
			StartTimeUnixNano: uint64(start.UnixNano()), EndTimeUnixNano: uint64(start.Add(6500 * time.Microsecond).UnixNano()),
		}}}},
	}}}
	body, _ := proto.Marshal(in)
	resp, err := http.Post(r.Endpoint()+"/v1/traces", "application/x-protobuf", bytes.NewReader(body))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("export: %v %v", resp, err)
	}
	resp.Body.Close()

	id := "abababababababababababababababab"
	if spans := (&Jaeger{Query: r.QueryURL()}).Trace(t, id); len(spans) != 1 || spans[0].Service != "signer" || spans[0].Name != "POST /uploads/sign" {
		t.Errorf("Jaeger.Trace of the receiver: %+v", spans)
	}
	resp, err = http.Get(r.QueryURL() + "/api/traces/" + id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Data []struct {
			Spans []struct{ StartTime, Duration int64 }
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || len(out.Data) != 1 || len(out.Data[0].Spans) != 1 {
		t.Fatalf("the trace: %v %+v", err, out)
	}
	if s := out.Data[0].Spans[0]; s.StartTime != start.UnixMicro() || s.Duration != 6500 {
		t.Errorf("start %d duration %d µs, want %d and 6500", s.StartTime, s.Duration, start.UnixMicro())
	}
	if o := resp.Header.Get("Access-Control-Allow-Origin"); o != "*" {
		t.Errorf("Access-Control-Allow-Origin %q, want *", o)
	}
	none, err := http.Get(r.QueryURL() + "/api/traces/" + "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd")
	if err != nil {
		t.Fatal(err)
	}
	none.Body.Close()
	if none.StatusCode != http.StatusNotFound {
		t.Errorf("an unknown trace: %d, want 404", none.StatusCode)
	}
}
