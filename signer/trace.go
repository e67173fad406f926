package main

import (
	"context"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/trace"

	"github.com/mintgate/mintgate/shared/ledger"
	"github.com/mintgate/mintgate/shared/telemetry"
)

// traced is the server span of every request (docs/configuration.md,
// "Tracing"): it continues an incoming traceparent, is named by the
// route's template, and carries the status echo answered. Only installed
// when tracing is on, so a signer without OTEL_* pays nothing for it.
func traced(tel *telemetry.Provider) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r, span := tel.Server(c.Request(), c.Path())
			c.SetRequest(r)
			err := next(c)
			if err != nil {
				// Answer now, so that the span holds the status sent.
				c.Error(err)
			}
			telemetry.EndServer(span, c.Response().Status)
			return nil
		}
	}
}

// recordSpan is the span of a grant's wait for the ledger's ack: a NATS
// publish (messaging.system nats) of the sign's trace.
func recordSpan(ctx context.Context) (context.Context, trace.Span) {
	if span := trace.SpanFromContext(ctx); !span.IsRecording() {
		return ctx, noSpan // not traced: not even the attributes are built
	}
	return telemetry.Start(ctx, "publish "+ledger.SubjectSchedPrefix+"*",
		telemetry.Messaging(trace.SpanKindProducer, "nats", "publish", ledger.SubjectSchedPrefix+"*")...)
}

// noSpan is the span of a sign that is not traced; ending it does nothing.
var noSpan = trace.SpanFromContext(context.Background())

// A signer SIGKILLed loses the spans its exporter had not sent yet, and
// nothing else: the grant's traceparent travels inside the ledger message
// and the grant record, written as before (no extra write, no extra round
// trip), so a sign either left both or neither.

// shutdownTracing exports the spans still buffered when the signer stops.
func shutdownTracing(tel *telemetry.Provider) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = tel.Shutdown(ctx)
}
