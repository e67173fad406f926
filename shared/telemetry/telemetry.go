// Package telemetry is mintgate's tracing (OpenTelemetry): a service's
// tracer provider, configured only by the standard OTEL_* variables
// (Setup), the upload every span of a trace carries (WithUpload), the
// grant's trace context (Traceparent, Provider.Continue), child spans
// (Start), and the HTTP, Redis and log glue.
//
// With no OTLP endpoint (or OTEL_SDK_DISABLED=true) the provider is a
// no-op one: nothing is exported, no wrapper is installed, and Start on a
// context without a recording span allocates nothing.
//
// No global of the OpenTelemetry API is set: a child span is made by the
// provider of its parent span (trace.Span.TracerProvider), so services
// started in one test process each keep their own service.name.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Scope is the instrumentation scope of every mintgate span.
const Scope = "github.com/mintgate/mintgate"

// Provider is one service's tracing.
type Provider struct {
	tp     trace.TracerProvider
	tracer trace.Tracer
	sdk    *sdktrace.TracerProvider // nil when off
}

// Off is the provider of a service that does not trace.
func Off() *Provider {
	tp := noop.NewTracerProvider()
	return &Provider{tp: tp, tracer: tp.Tracer(Scope)}
}

// Setup reads the standard variables through getenv and returns the
// service's provider (Off when no endpoint is set or OTEL_SDK_DISABLED is
// true):
//
//   - OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (used as is) or
//     OTEL_EXPORTER_OTLP_ENDPOINT (http/protobuf: plus /v1/traces);
//   - OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL:
//     http/protobuf (the default) or grpc;
//   - OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG (default
//     parentbased_always_on);
//   - OTEL_SERVICE_NAME, default service.
//
// The exporter reads its other standard variables (…_HEADERS, …_TIMEOUT,
// …_CERTIFICATE, …_INSECURE) from the process's environment itself.
func Setup(ctx context.Context, service string, getenv func(string) string) (*Provider, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return Off(), nil
	}
	endpoint, protocol := Endpoint(getenv)
	if endpoint == "" {
		return Off(), nil
	}
	sampler, err := Sampler(getenv("OTEL_TRACES_SAMPLER"), getenv("OTEL_TRACES_SAMPLER_ARG"))
	if err != nil {
		return nil, err
	}
	var exp sdktrace.SpanExporter
	switch protocol {
	case "http/protobuf":
		exp, err = otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint))
	case "grpc":
		exp, err = otlptracegrpc.New(ctx, otlptracegrpc.WithEndpointURL(endpoint))
	default:
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL %q: want http/protobuf or grpc", protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter %s: %w", endpoint, err)
	}
	name := strings.TrimSpace(getenv("OTEL_SERVICE_NAME"))
	if name == "" {
		name = service
	}
	sdk := sdktrace.NewTracerProvider(
		sdktrace.WithSampler(sampler),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", name))),
		// Before the batcher: every span of an upload carries its ids.
		sdktrace.WithSpanProcessor(uploadProcessor{}),
		sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(time.Second)),
	)
	return &Provider{tp: sdk, tracer: sdk.Tracer(Scope), sdk: sdk}, nil
}

// Endpoint is the OTLP traces endpoint the variables name ("" for none)
// and its protocol.
func Endpoint(getenv func(string) string) (endpoint, protocol string) {
	protocol = strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"))
	if protocol == "" {
		protocol = strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_PROTOCOL"))
	}
	if protocol == "" {
		protocol = "http/protobuf"
	}
	if e := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")); e != "" {
		return e, protocol
	}
	e := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT"))
	if e != "" && protocol == "http/protobuf" {
		e = strings.TrimSuffix(e, "/") + "/v1/traces"
	}
	return e, protocol
}

// Sampler is the sampler OTEL_TRACES_SAMPLER (name) and its _ARG name.
func Sampler(name, arg string) (sdktrace.Sampler, error) {
	ratio := 1.0
	if arg = strings.TrimSpace(arg); arg != "" {
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || r < 0 || r > 1 {
			return nil, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG %q: want a ratio from 0 to 1", arg)
		}
		ratio = r
	}
	switch strings.TrimSpace(name) {
	case "", "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(ratio), nil
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio)), nil
	}
	return nil, errors.New("OTEL_TRACES_SAMPLER " + strconv.Quote(name) + ": not a sampler mintgate knows")
}

// Enabled reports whether spans are exported.
func (p *Provider) Enabled() bool { return p != nil && p.sdk != nil }

// TracerProvider is the provider's OpenTelemetry side.
func (p *Provider) TracerProvider() trace.TracerProvider { return p.tp }

// Shutdown exports the spans still buffered, within ctx.
func (p *Provider) Shutdown(ctx context.Context) error {
	if !p.Enabled() {
		return nil
	}
	return p.sdk.Shutdown(ctx)
}

// Start starts a root (or a continued remote) span of the provider's.
func (p *Provider) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !p.Enabled() {
		return ctx, noopSpan
	}
	return p.tracer.Start(ctx, name, opts...)
}

// noopSpan is what Start returns when nothing is traced: ending it does
// nothing (unlike ending the span in ctx, which is another's).
var noopSpan = trace.SpanFromContext(context.Background())

// Start starts a child of the span in ctx, made by that span's provider:
// a no-op when ctx holds no recording span.
func Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, noopSpan
	}
	return parent.TracerProvider().Tracer(Scope).Start(ctx, name, opts...)
}

// End ends span, marking it failed with err when err is not nil.
func End(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.RecordError(err)
		span.SetStatus(codesError, err.Error())
	}
	span.End()
}

// Messaging is a messaging span's kind and attributes (semantic
// conventions): system aws_sqs, or nats (a custom value: the conventions
// know none for it), operation publish, receive or process.
func Messaging(kind trace.SpanKind, system, operation, destination string) []trace.SpanStartOption {
	return []trace.SpanStartOption{trace.WithSpanKind(kind), trace.WithAttributes(
		attribute.String("messaging.system", system),
		attribute.String("messaging.operation.type", operation),
		attribute.String("messaging.destination.name", destination),
	)}
}
