package main

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/mintgate/mintgate/shared/s3event"
)

// queue is the SQS calls the consumer makes.
type queue interface {
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
}

// Receive parameters: the longest long poll, the largest batch.
const (
	waitSeconds = 20
	maxMessages = 10
)

// consumer is the loop around a handler: it receives, parses, hands each
// notification to handle, deletes what was handled, leaves what was not,
// and backs off when handling fails. It knows nothing of Redis or uploads.
type consumer struct {
	q          queue
	queueURL   string
	visibility time.Duration // 0: the queue's own
	handle     func(ctx context.Context, n s3event.Notification) error
	// ready tells whether handle's store answers again; while the gate
	// is closed after a failure, receivers probe it instead of receiving.
	ready   func(ctx context.Context) error
	gate    *gate
	m       *metrics
	log     *slog.Logger
	backoff backoff
}

// run starts receivers concurrent long-polling loops and returns when ctx
// ends and each has finished the batch in its hands.
func (c *consumer) run(ctx context.Context, receivers int) {
	var wg sync.WaitGroup
	for i := range receivers {
		wg.Go(func() { c.loop(ctx, i) })
	}
	wg.Wait()
}

// loop is one receiver: long poll, handle the batch, delete, repeat.
func (c *consumer) loop(ctx context.Context, id int) {
	log := c.log.With("receiver", id)
	failures := 0
	for ctx.Err() == nil {
		if failures > 0 && !sleep(ctx, c.backoff.wait(failures)) {
			return
		}
		if c.gate.isDown() {
			if err := c.ready(ctx); err != nil {
				failures++
				log.Warn("store unavailable, not receiving", "err", err)
				continue
			}
			c.gate.up()
			log.Info("store available again, receiving")
		}
		// A long poll in flight when another receiver finds the store down
		// is cut short, so it does not take (and count a receive of)
		// messages it could not handle.
		rctx, stop := c.gate.whileUp(ctx)
		out, err := c.q.ReceiveMessage(rctx, &sqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(c.queueURL),
			MaxNumberOfMessages:         maxMessages,
			WaitTimeSeconds:             waitSeconds,
			VisibilityTimeout:           int32(c.visibility / time.Second),
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount},
		})
		stop()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if rctx.Err() != nil {
				continue // the gate closed; wait for the store above
			}
			c.m.errors.WithLabelValues(opReceive).Inc()
			failures++
			log.Error("receive failed", "err", err)
			continue
		}
		c.m.received.Add(float64(len(out.Messages)))
		// A batch in hand is finished even during shutdown: deleting what
		// was handled saves a redelivery.
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		ok := c.batch(bctx, log, out.Messages)
		cancel()
		if ok {
			failures = 0
		} else {
			failures++
			c.gate.down()
		}
	}
}

// gate is shared by the receivers: closed while handle's store is down, so
// none of them receives (SQS counts every receive toward the queue's
// maxReceiveCount, and an outage must not move good messages to the
// dead-letter queue).
type gate struct {
	mu     sync.Mutex
	closed bool
	cut    context.Context // canceled when the gate closes
	cancel context.CancelFunc
}

func newGate() *gate {
	g := &gate{}
	g.cut, g.cancel = context.WithCancel(context.Background())
	return g
}

func (g *gate) isDown() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed
}

// down closes the gate and cuts the long polls in flight.
func (g *gate) down() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	g.cancel()
}

// up opens the gate again.
func (g *gate) up() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		g.closed = false
		g.cut, g.cancel = context.WithCancel(context.Background())
	}
}

// whileUp is ctx, also canceled when the gate closes.
func (g *gate) whileUp(ctx context.Context) (context.Context, context.CancelFunc) {
	g.mu.Lock()
	cut := g.cut
	g.mu.Unlock()
	rctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(cut, cancel)
	return rctx, func() { stop(); cancel() }
}

// batch handles msgs in order and deletes those fully handled. It stops at
// the first failure of handle (the store is likely down; the rest come
// back after the visibility timeout) and reports whether there was one.
func (c *consumer) batch(ctx context.Context, log *slog.Logger, msgs []types.Message) bool {
	ok := true
	var handled []types.Message
	for _, msg := range msgs {
		n, err := s3event.Parse([]byte(aws.ToString(msg.Body)))
		if err != nil {
			// Not deleted: it comes back until the redrive policy moves it
			// to the dead-letter queue, where a person can look at it.
			c.m.unparseable.Inc()
			log.Warn("unparseable message left for the dead-letter queue", "err", err,
				"messageId", aws.ToString(msg.MessageId),
				"receiveCount", msg.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)],
				"body", truncate(aws.ToString(msg.Body), 512))
			continue
		}
		if err := c.handle(ctx, n); err != nil {
			c.m.errors.WithLabelValues(opHandle).Inc()
			log.Error("handle failed; message left in the queue", "err", err, "messageId", aws.ToString(msg.MessageId))
			ok = false
			break
		}
		handled = append(handled, msg)
	}
	c.delete(ctx, log, handled)
	return ok
}

// delete removes handled messages in batches of at most ten. A failed
// delete only means the message comes back and is handled again.
func (c *consumer) delete(ctx context.Context, log *slog.Logger, msgs []types.Message) {
	for len(msgs) > 0 {
		chunk := msgs[:min(len(msgs), maxMessages)]
		msgs = msgs[len(chunk):]
		entries := make([]types.DeleteMessageBatchRequestEntry, len(chunk))
		for i, m := range chunk {
			entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle}
		}
		out, err := c.q.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(c.queueURL), Entries: entries})
		if err != nil {
			c.m.errors.WithLabelValues(opDelete).Add(float64(len(chunk)))
			log.Error("delete failed; the messages will be handled again", "err", err, "messages", len(chunk))
			continue
		}
		for _, f := range out.Failed {
			c.m.errors.WithLabelValues(opDelete).Inc()
			log.Error("delete failed; the message will be handled again", "id", aws.ToString(f.Id),
				"code", aws.ToString(f.Code), "message", aws.ToString(f.Message))
		}
		c.m.deleted.Add(float64(len(out.Successful)))
	}
}

// backoff is capped exponential backoff with jitter.
type backoff struct{ min, max time.Duration }

// wait is the pause after the n-th consecutive failure (n ≥ 1): between
// half and all of min·2ⁿ⁻¹, capped at max.
func (b backoff) wait(n int) time.Duration {
	d := b.max
	if n < 30 {
		d = min(b.min<<(n-1), b.max)
	}
	return d/2 + rand.N(d/2+1)
}

// sleep waits d or until ctx ends, reporting whether the wait was complete.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
