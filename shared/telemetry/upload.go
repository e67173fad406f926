package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// The attributes every span of an upload's trace carries.
const (
	AttrURLID  = attribute.Key("mintgate.url_id")
	AttrTenant = attribute.Key("mintgate.tenant")
)

const codesError = codes.Error

type uploadKey struct{}

type upload struct{ tenant, urlID string }

func (u upload) attrs() []attribute.KeyValue {
	return []attribute.KeyValue{AttrURLID.String(u.urlID), AttrTenant.String(u.tenant)}
}

// WithUpload tags the span in ctx with the upload (tenant, urlID) and
// returns ctx carrying it, so that every span started under it carries
// the same two attributes (the client libraries' spans included: the
// provider's span processor copies them). Without a recording span it
// returns ctx as is.
func WithUpload(ctx context.Context, tenant, urlID string) context.Context {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return ctx
	}
	u := upload{tenant: tenant, urlID: urlID}
	span.SetAttributes(u.attrs()...)
	return context.WithValue(ctx, uploadKey{}, u)
}

// uploadProcessor copies the upload of a span's parent context onto the
// span as it starts.
type uploadProcessor struct{}

func (uploadProcessor) OnStart(parent context.Context, s sdktrace.ReadWriteSpan) {
	if u, ok := parent.Value(uploadKey{}).(upload); ok {
		s.SetAttributes(u.attrs()...)
	}
}
func (uploadProcessor) OnEnd(sdktrace.ReadOnlySpan)      {}
func (uploadProcessor) Shutdown(context.Context) error   { return nil }
func (uploadProcessor) ForceFlush(context.Context) error { return nil }

// Propagator is W3C Trace Context, the only format mintgate reads and
// writes (traceparent, tracestate).
var Propagator = propagation.TraceContext{}

// Traceparent is the W3C traceparent of the span in ctx, "" when there is
// none: what a grant keeps so that its upload's later steps join the sign's
// trace.
func Traceparent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	Propagator.Inject(ctx, c)
	return c["traceparent"]
}

// Remote is ctx with traceparent (a grant's) as its remote parent; ctx
// itself when traceparent is empty or not valid.
func Remote(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return Propagator.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent})
}

// Continue starts a span of p's, a child of traceparent (the grant's
// trace; a new trace when it is empty), tagged with the upload (tenant,
// urlID, WithUpload). Off, it returns ctx and a no-op span.
func (p *Provider) Continue(ctx context.Context, traceparent, name, tenant, urlID string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !p.Enabled() {
		return ctx, noopSpan
	}
	ctx, span := p.tracer.Start(Remote(ctx, traceparent), name, opts...)
	return WithUpload(ctx, tenant, urlID), span
}
