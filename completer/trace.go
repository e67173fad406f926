package main

import (
	"context"
	"io"
	"time"

	awsevents "github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/mintgate/mintgate/shared/events"
	"github.com/mintgate/mintgate/shared/telemetry"
)

// tracing is the completer's tracing: its provider, the queue its spans
// name, and where the grants' trace contexts are read.
type tracing struct {
	tel   *telemetry.Provider
	queue string // the SQS queue's URL, the spans' messaging.destination.name
	// traceparent reads the sign's traceparent from the grant record
	// (quota.Store.Traceparent).
	traceparent func(ctx context.Context, tenant, urlID string) (string, error)
}

// completeTraced is complete inside the span of this delivery's handling
// of r: a consumer span (messaging.system aws_sqs) whose parent is the
// sign's span, read from the grant record, so that the S3 event, which
// carries no trace context, lands in the upload's trace. A redelivery
// (a completer SIGKILLed mid-way) reads the same record and lands there
// too. A record gone, or Redis failing that read, only starts a trace of
// its own: the upload is handled all the same.
//
// SIGKILL: the read writes nothing, so a completer killed before, during
// or after it leaves exactly what complete's own steps say (handle.go);
// only the spans not exported yet are lost, and the redelivery makes its
// own in the same trace.
func (c *completer) completeTraced(ctx context.Context, r awsevents.S3EventRecord, ev events.Event) error {
	if !c.trace.tel.Enabled() {
		return c.complete(ctx, r, ev)
	}
	tp, err := c.trace.traceparent(ctx, ev.Tenant, ev.URLID)
	if err != nil {
		c.log.DebugContext(ctx, "grant record unreadable; the upload's handling starts a trace of its own", "urlId", ev.URLID, "err", err)
	}
	opts := append(telemetry.Messaging(trace.SpanKindConsumer, "aws_sqs", "process", c.trace.queue),
		trace.WithAttributes(attribute.String("aws.s3.bucket", r.S3.Bucket.Name), attribute.String("aws.s3.key", ev.Key),
			attribute.String("messaging.message.id", r.ResponseElements["x-amz-request-id"])))
	ctx, span := c.trace.tel.Continue(ctx, tp, "process "+c.trace.queue, ev.Tenant, ev.URLID, opts...)
	err = c.complete(ctx, r, ev)
	telemetry.End(span, err)
	return err
}

// gateStep runs one step of the gate (head, type: magic bytes and pixels,
// scan: clamd) in a span of its own, its verdict's reason an attribute.
func gateStep(ctx context.Context, name string, f func(context.Context) (string, error)) (string, error) {
	ctx, span := telemetry.Start(ctx, "gate "+name, trace.WithAttributes(attribute.String("mintgate.gate.step", name)))
	reason, err := f(ctx)
	if reason != "" && span.IsRecording() {
		span.SetAttributes(attribute.String("mintgate.gate.reason", reason))
	}
	telemetry.End(span, err)
	return reason, err
}

// tracedObjects makes each S3 call of the gate a client span (the AWS SDK
// conventions: rpc.system aws-api, rpc.service S3, rpc.method).
type tracedObjects struct{ objects }

func s3Span(ctx context.Context, method string, bucket, key *string) (context.Context, trace.Span) {
	return telemetry.Start(ctx, "S3."+method, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("rpc.system", "aws-api"), attribute.String("rpc.service", "S3"), attribute.String("rpc.method", method),
		attribute.String("aws.s3.bucket", aws.ToString(bucket)), attribute.String("aws.s3.key", aws.ToString(key))))
}

func (t tracedObjects) GetObject(ctx context.Context, in *s3.GetObjectInput, opts ...func(*s3.Options)) (*s3.GetObjectOutput, error) {
	ctx, span := s3Span(ctx, "GetObject", in.Bucket, in.Key)
	out, err := t.objects.GetObject(ctx, in, opts...)
	telemetry.End(span, err)
	return out, err
}

func (t tracedObjects) HeadObject(ctx context.Context, in *s3.HeadObjectInput, opts ...func(*s3.Options)) (*s3.HeadObjectOutput, error) {
	ctx, span := s3Span(ctx, "HeadObject", in.Bucket, in.Key)
	out, err := t.objects.HeadObject(ctx, in, opts...)
	telemetry.End(span, err)
	return out, err
}

func (t tracedObjects) CopyObject(ctx context.Context, in *s3.CopyObjectInput, opts ...func(*s3.Options)) (*s3.CopyObjectOutput, error) {
	ctx, span := s3Span(ctx, "CopyObject", in.Bucket, in.Key)
	out, err := t.objects.CopyObject(ctx, in, opts...)
	telemetry.End(span, err)
	return out, err
}

func (t tracedObjects) DeleteObject(ctx context.Context, in *s3.DeleteObjectInput, opts ...func(*s3.Options)) (*s3.DeleteObjectOutput, error) {
	ctx, span := s3Span(ctx, "DeleteObject", in.Bucket, in.Key)
	out, err := t.objects.DeleteObject(ctx, in, opts...)
	telemetry.End(span, err)
	return out, err
}

// tracedScanner makes each clamd scan a client span.
type tracedScanner struct{ scanner }

func (t tracedScanner) Scan(ctx context.Context, r io.Reader) (string, error) {
	ctx, span := telemetry.Start(ctx, "clamd INSTREAM", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("rpc.system", "clamd"), attribute.String("rpc.method", "INSTREAM")))
	found, err := t.scanner.Scan(ctx, r)
	if found != "" && span.IsRecording() {
		span.SetAttributes(attribute.String("mintgate.clamd.found", found))
	}
	telemetry.End(span, err)
	return found, err
}

// traceGate wraps the gate's S3 client and scanner in spans when tracing
// is on.
func traceGate(g *gate, tel *telemetry.Provider) {
	if !tel.Enabled() {
		return
	}
	g.s3 = tracedObjects{g.s3}
	if g.scan != nil {
		g.scan = tracedScanner{g.scan}
	}
}

// shutdownTracing exports the spans still buffered when the completer
// stops.
func shutdownTracing(tel *telemetry.Provider) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = tel.Shutdown(ctx)
}
