package main

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/mintgate/mintgate/shared/ledger"
	"github.com/mintgate/mintgate/shared/telemetry"
)

// traceSwept gives each grant of gs that carries its sign's trace
// (ledger.Grant.Trace) a span in that trace: the sweeper's handling of it
// (messaging.system nats, the due batch's subject), from start to applied,
// its outcome (refunded, done, already, …) an attribute. The batch's Redis
// round trip is one for many uploads, so it is no child of any of them.
// Grants not handled yet (early) get theirs when they are due.
//
// The spans are made after the refunds are applied and exported in the
// background: a sweeper SIGKILLed before the export loses them and nothing
// else (the batch comes back, its grants find their refunded markers, and
// the redelivery's spans say "already").
func (s *sweeper) traceSwept(ctx context.Context, gs []ledger.Grant, outs []string, start, applied time.Time) {
	if !s.tel.Enabled() {
		return
	}
	opts := append(telemetry.Messaging(trace.SpanKindConsumer, "nats", "process", ledger.SubjectDue), trace.WithTimestamp(start))
	for i, g := range gs {
		if g.Trace == "" || outs[i] == outcomeEarly {
			continue
		}
		name := "refund"
		if g.UploadID != "" {
			name = "abort and refund"
		}
		_, span := s.tel.Continue(ctx, g.Trace, name+" "+ledger.SubjectDue, g.Tenant, g.URLID, opts...)
		span.SetAttributes(attribute.String("mintgate.sweep.outcome", outs[i]))
		span.End(trace.WithTimestamp(applied))
	}
}

// shutdownTracing exports the spans still buffered when the sweeper stops.
func shutdownTracing(tel *telemetry.Provider) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = tel.Shutdown(ctx)
}
