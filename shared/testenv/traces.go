package testenv

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"

	"github.com/mintgate/mintgate/shared/proc"
)

// Span is one exported span as a tracing test reads it back.
type Span struct {
	Service  string
	Name     string
	TraceID  string
	SpanID   string
	ParentID string            // "" for a root
	Kind     string            // server, client, consumer, producer, internal
	Attrs    map[string]string // every attribute, as text
	Start    time.Time         // the OTLP receiver's only (Jaeger's Trace leaves it zero)
	End      time.Time
}

// Traces is where the services export their spans in a test: Endpoint is
// OTEL_EXPORTER_OTLP_ENDPOINT for them (OTLP over HTTP), Trace reads
// back every span of one trace, and QueryURL is the base URL of a Jaeger
// query API serving GET /api/traces/{id} to any loopback origin (CORS),
// as the demo page reads it (MINTGATE_DEMO_TRACES_URL).
type Traces interface {
	Endpoint() string
	Trace(tb testing.TB, traceID string) []Span
	QueryURL() string
	String() string
}

// StartTraces starts a real Jaeger (StartJaeger) when the jaeger binary
// is installed (deploy/local/tools.sh jaeger: a 10–20 minute build, not in
// the default install), else StartOTLPReceiver.
func StartTraces(tb testing.TB) Traces {
	tb.Helper()
	root, _ := Root()
	if _, err := proc.Binary(os.Getenv, root, "jaeger"); err == nil {
		return StartJaeger(tb)
	}
	tb.Logf("testenv: no jaeger binary (deploy/local/tools.sh jaeger builds it): the spans go to an OTLP/HTTP receiver of the test's own")
	return StartOTLPReceiver(tb)
}

// OTLPReceiver is an OTLP/HTTP traces endpoint (POST /v1/traces, protobuf)
// that keeps every span it is sent: the real wire format of the
// services' real exporters, decoded by the OTLP protobuf definitions, when
// the Jaeger binary is not built.
type OTLPReceiver struct {
	url   string
	mu    sync.Mutex
	spans []Span
}

// StartOTLPReceiver listens on a free loopback port until the test ends.
func StartOTLPReceiver(tb testing.TB) *OTLPReceiver {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	r := &OTLPReceiver{url: "http://" + l.Addr().String()}
	srv := &http.Server{Handler: http.HandlerFunc(r.serve), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	tb.Cleanup(func() { _ = srv.Close() })
	return r
}

func (r *OTLPReceiver) serve(w http.ResponseWriter, req *http.Request) {
	if id, ok := strings.CutPrefix(req.URL.Path, "/api/traces/"); ok && req.Method == http.MethodGet {
		r.serveTrace(w, id)
		return
	}
	body, err := io.ReadAll(req.Body)
	var in coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(body, &in)
	}
	if req.URL.Path != "/v1/traces" || err != nil {
		http.Error(w, fmt.Sprint(err), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	for _, rs := range in.ResourceSpans {
		service := attrs(rs.GetResource().GetAttributes())["service.name"]
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				r.spans = append(r.spans, Span{
					Service: service, Name: s.Name, TraceID: hex.EncodeToString(s.TraceId), SpanID: hex.EncodeToString(s.SpanId),
					ParentID: hex.EncodeToString(s.ParentSpanId), Kind: kindName(int32(s.Kind)), Attrs: attrs(s.Attributes),
					Start: time.Unix(0, int64(s.StartTimeUnixNano)), End: time.Unix(0, int64(s.EndTimeUnixNano)),
				})
			}
		}
	}
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	_, _ = w.Write(out)
}

// Endpoint is OTEL_EXPORTER_OTLP_ENDPOINT for it.
func (r *OTLPReceiver) Endpoint() string { return r.url }

// Trace is every span received of traceID.
func (r *OTLPReceiver) Trace(_ testing.TB, traceID string) []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Span
	for _, s := range r.spans {
		if s.TraceID == traceID {
			out = append(out, s)
		}
	}
	return out
}

// QueryURL is its own base URL: it serves /api/traces/{id} (serveTrace).
func (r *OTLPReceiver) QueryURL() string { return r.url }

// serveTrace answers GET /api/traces/{id} in the shape of Jaeger's query
// API (the fields the demo page and Jaeger.Trace read: spans with their
// operation, process, start and duration in µs, and processes by service),
// to any origin: a stand-in for Jaeger when it is not built, so the demo
// page's timeline is tested everywhere. An unknown trace is 404, as Jaeger's.
func (r *OTLPReceiver) serveTrace(w http.ResponseWriter, id string) {
	type jspan struct {
		TraceID       string `json:"traceID"`
		SpanID        string `json:"spanID"`
		OperationName string `json:"operationName"`
		ProcessID     string `json:"processID"`
		StartTime     int64  `json:"startTime"`
		Duration      int64  `json:"duration"`
	}
	type process struct {
		ServiceName string `json:"serviceName"`
	}
	trace := struct {
		TraceID   string             `json:"traceID"`
		Spans     []jspan            `json:"spans"`
		Processes map[string]process `json:"processes"`
	}{TraceID: id, Processes: map[string]process{}}
	for _, s := range r.Trace(nil, id) {
		trace.Processes[s.Service] = process{ServiceName: s.Service}
		trace.Spans = append(trace.Spans, jspan{TraceID: s.TraceID, SpanID: s.SpanID, OperationName: s.Name,
			ProcessID: s.Service, StartTime: s.Start.UnixMicro(), Duration: s.End.Sub(s.Start).Microseconds()})
	}
	w.Header().Set("Access-Control-Allow-Origin", "*")
	w.Header().Set("Content-Type", "application/json")
	if len(trace.Spans) == 0 {
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"data":null,"errors":[{"code":404,"msg":"trace not found"}]}`))
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"data": []any{trace}})
}

// String names it in test logs.
func (r *OTLPReceiver) String() string { return "OTLP receiver " + r.url }

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		v := kv.GetValue()
		switch x := v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.Key] = x.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.Key] = strconv.FormatInt(x.IntValue, 10)
		case *commonpb.AnyValue_BoolValue:
			m[kv.Key] = strconv.FormatBool(x.BoolValue)
		default:
			m[kv.Key] = fmt.Sprint(v)
		}
	}
	return m
}

// kindName is an OTLP span kind's name (1 internal … 5 consumer).
func kindName(k int32) string {
	names := map[int32]string{1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}
	return names[k]
}

// Jaeger is Jaeger v2 (deploy/local/tools.sh jaeger) started with
// deploy/local/jaeger.yaml on free loopback ports: OTLP in, in-memory
// storage, the query API out.
type Jaeger struct {
	*Process
	OTLP  string // OTEL_EXPORTER_OTLP_ENDPOINT (HTTP)
	Query string // the query API's base URL: /api/traces/{id}
}

// StartJaeger starts Jaeger and waits until its query API answers.
func StartJaeger(tb testing.TB) *Jaeger {
	tb.Helper()
	root, err := Root()
	if err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	otlp, grpc, query, qgrpc, health := FreePort(tb), FreePort(tb), FreePort(tb), FreePort(tb), FreePort(tb)
	p := &Process{Process: proc.New(proc.Config{
		Bin: Binary(tb, "jaeger"), Args: []string{"--config", filepath.Join(root, "deploy/local/jaeger.yaml")}, Dir: tb.TempDir(),
		Env: []string{
			"JAEGER_OTLP_HTTP_PORT=" + strconv.Itoa(otlp), "JAEGER_OTLP_GRPC_PORT=" + strconv.Itoa(grpc),
			"JAEGER_QUERY_PORT=" + strconv.Itoa(query), "JAEGER_QUERY_GRPC_PORT=" + strconv.Itoa(qgrpc),
			"JAEGER_HEALTH_PORT=" + strconv.Itoa(health),
			// The demo page of any test's signer (a free loopback port) reads the query API.
			"JAEGER_CORS_ORIGIN=http://127.0.0.1:*",
		},
	}), tb: tb}
	tb.Cleanup(p.Stop)
	j := &Jaeger{Process: p, OTLP: "http://" + addr(otlp), Query: "http://" + addr(query)}
	j.Process.Start()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) && !j.Exited() {
		if resp, err := readyClient.Get(j.Query + "/api/services"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return j
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	tb.Fatalf("testenv: jaeger's query API %s did not answer:\n%s", j.Query, j.Output())
	return nil
}

// Endpoint is OTEL_EXPORTER_OTLP_ENDPOINT for it.
func (j *Jaeger) Endpoint() string { return j.OTLP }

// Trace reads traceID from the query API (/api/traces/{id}); none yet is
// no spans.
func (j *Jaeger) Trace(tb testing.TB, traceID string) []Span {
	tb.Helper()
	resp, err := readyClient.Get(j.Query + "/api/traces/" + traceID)
	if err != nil {
		tb.Logf("testenv: jaeger: %v", err)
		return nil
	}
	defer resp.Body.Close()
	var out struct {
		Data []struct {
			Spans []struct {
				TraceID, SpanID, OperationName, ProcessID string
				References                                []struct{ RefType, SpanID string }
				Tags                                      []struct {
					Key   string
					Value any
				}
			}
			Processes map[string]struct{ ServiceName string }
		}
	}
	if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&out) != nil {
		return nil
	}
	var spans []Span
	for _, tr := range out.Data {
		for _, s := range tr.Spans {
			sp := Span{Service: tr.Processes[s.ProcessID].ServiceName, Name: s.OperationName, TraceID: s.TraceID, SpanID: s.SpanID, Attrs: map[string]string{}}
			for _, r := range s.References {
				if r.RefType == "CHILD_OF" {
					sp.ParentID = r.SpanID
				}
			}
			for _, t := range s.Tags {
				sp.Attrs[t.Key] = fmt.Sprint(t.Value)
			}
			sp.Kind = sp.Attrs["span.kind"]
			if sp.Kind == "" {
				sp.Kind = "internal"
			}
			spans = append(spans, sp)
		}
	}
	return spans
}

// QueryURL is the query API's base URL.
func (j *Jaeger) QueryURL() string { return j.Query }

// String names it in test logs.
func (j *Jaeger) String() string { return "jaeger " + j.Query }
