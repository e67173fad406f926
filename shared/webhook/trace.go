package webhook

import (
	"context"
	"strings"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/mintgate/mintgate/shared/events"
	"github.com/mintgate/mintgate/shared/telemetry"
)

// TraceWith makes each try a span of its upload's trace (the traceparent
// the completer's event message carries), whose POST carries its
// traceparent so that the app's handler joins the trace. Call it before
// Run; without it nothing is traced.
func (d *Deliverer) TraceWith(p *telemetry.Provider) {
	if p.Enabled() {
		d.tel = p
		d.post.client.Transport = telemetry.Transport{Base: d.post.client.Transport, Inject: true}
	}
}

// headerTrace is the header of an event or retry message that carries
// its upload's W3C traceparent (events.Publisher writes it).
const headerTrace = events.HeaderTraceparent

// traceOf is the traceparent msg carries, "" for none.
func traceOf(msg interface{ Headers() nats.Header }) string {
	return msg.Headers().Get(headerTrace)
}

// urlIDOf is the urlId of a webhook-id, msg_<urlId>_<type>.
func urlIDOf(id string) string {
	id = strings.TrimPrefix(id, "msg_")
	if i := strings.LastIndexByte(id, '_'); i >= 0 {
		return id[:i]
	}
	return id
}

// A deliverer SIGKILLed mid-try loses that try's span if it was not
// exported; the message is given again and its next try is traced. A
// retry's traceparent is a header of the retry message, written in the
// same publish as the retry itself.

// trySpan starts the span of one try of del: a nats consumer span of the
// upload's trace.
func (d *Deliverer) trySpan(ctx context.Context, del Delivery) (context.Context, trace.Span) {
	if !d.tel.Enabled() {
		return ctx, trace.SpanFromContext(context.Background()) // a no-op
	}
	ctx, span := d.tel.Continue(ctx, del.Trace, "process "+events.SubjectPrefix+del.Tenant, del.Tenant, urlIDOf(del.ID),
		telemetry.Messaging(trace.SpanKindConsumer, "nats", "process", events.SubjectPrefix+del.Tenant)...)
	if !span.IsRecording() {
		return ctx, span
	}
	span.SetAttributes(attribute.String("mintgate.webhook.id", del.ID), attribute.Int("mintgate.webhook.attempt", del.Attempts+1))
	return ctx, span
}

// endTry ends a try's span with its answer.
func endTry(span trace.Span, t try) {
	if t.Status != 0 {
		span.SetAttributes(attribute.Int("http.response.status_code", t.Status))
	}
	telemetry.End(span, t.Err)
}
