package main

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/mintgate/mintgate/shared/backoff"
	"github.com/mintgate/mintgate/shared/pipeline"
	"github.com/mintgate/mintgate/shared/s3event"
)

// queue is the SQS calls the consumer makes.
type queue interface {
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
	ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error)
}

// Receive parameters: the longest long poll, the largest batch.
const (
	waitSeconds = 20
	maxMessages = 10
)

// Holding defaults: a held message is kept invisible for holdVisibility,
// renewed every holdVisibility/3, so a held message whose holder died
// reappears within 30 s.
const holdVisibility = 30 * time.Second

// consumer is the loop around a handler: it receives, parses, hands each
// notification to handle, deletes what was handled, leaves what was not,
// and holds what it could not handle while handle's store is down. It
// knows nothing of Redis or uploads. What a handler's error means is
// shared/pipeline's decision (see pipeline):
//   - poison (pipeline.ErrPoison: the notification can never be applied):
//     logged with its body and made visible again at once, so the redrive
//     policy's maxReceiveCount moves it to the dead-letter queue; the
//     messages after it are handled;
//   - anything else is an outage of the store (pipeline.ErrOutage): the
//     message and those after it are held, below.
//
// SQS counts every receive toward the queue's maxReceiveCount, and an
// outage of the store must not move good messages to the dead-letter queue.
// So a store outage adds no receive beyond the first of each message: the
// receiver that holds a message keeps it invisible (ChangeMessageVisibility)
// until the store answers and the message is handled, and no receiver
// starts a long poll while polls are held. A long poll already in flight
// is never cut short for that: SQS would still complete it server-side
// (a "ghost" receive: messages taken, a receive counted, hidden for the
// visibility timeout, never seen by us); it runs to its end and what it
// returns is held too.
type consumer struct {
	q          queue
	queueURL   string
	visibility time.Duration // 0: the queue's own
	handle     pipeline.Handler[s3event.Notification]
	// ready tells whether handle's store answers again; while polls are
	// is closed after a failure, receivers probe it instead of receiving.
	ready   func(ctx context.Context) error
	polls   *polls
	m       *metrics
	log     *slog.Logger
	backoff backoff.Policy // between the tries of the store while it is down
	// batchTimeout bounds the handling of one batch (its records'
	// writes, and with the gate on their objects' reads and scans); 0
	// means 30 s. A batch that runs out is held as in an outage.
	batchTimeout time.Duration
	// hold is the visibility timeout (whole seconds) given to held
	// messages, renewed every extendEvery; 0 means holdVisibility and a
	// third of it.
	hold, extendEvery time.Duration
}

// parsed is a received message, parsed, not yet handled.
type parsed struct {
	msg types.Message
	n   s3event.Notification
}

// run starts receivers concurrent long-polling loops and returns when ctx
// ends and each has finished the batch in its hands (or, holding messages
// for the store, left them to reappear).
func (c *consumer) run(ctx context.Context, receivers int) {
	var wg sync.WaitGroup
	for i := range receivers {
		wg.Go(func() { c.loop(ctx, i) })
	}
	wg.Wait()
}

// loop is one receiver: long poll, handle the batch, delete, hold what
// could not be handled until it can, repeat.
func (c *consumer) loop(ctx context.Context, id int) {
	log := c.log.With("receiver", id)
	failures := 0
	for ctx.Err() == nil {
		if failures > 0 && backoff.Sleep(ctx, c.backoff.Delay(failures)) != nil {
			return
		}
		if c.polls.held() {
			if err := c.ready(ctx); err != nil {
				if ctx.Err() != nil {
					return
				}
				failures++
				log.Warn("store unavailable, not receiving", "err", err)
				continue
			}
			c.polls.resume()
			log.Info("store available again, receiving")
		}
		// Only shutdown cuts a long poll short. SQS may still complete
		// it server-side: up to ten messages get one receive counted and
		// stay hidden for the visibility timeout without our seeing them.
		// That is one such receive per receiver per shutdown, which the
		// redrive policy's maxReceiveCount must leave room for.
		out, err := c.q.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(c.queueURL),
			MaxNumberOfMessages:         maxMessages,
			WaitTimeSeconds:             waitSeconds,
			VisibilityTimeout:           int32(c.visibility / time.Second),
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount},
		})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			c.m.errors.WithLabelValues(opReceive).Inc()
			failures++
			log.Error("receive failed", "err", err)
			continue
		}
		failures = 0
		c.m.received.Add(float64(len(out.Messages)))
		c.work(ctx, log, out.Messages)
	}
}

// work handles a received batch, or holds it while the store is down. A
// batch in hand is finished even during shutdown: deleting what was
// handled saves a redelivery.
func (c *consumer) work(ctx context.Context, log *slog.Logger, msgs []types.Message) {
	var rest []parsed
	if c.polls.held() {
		// Another receiver found the store down while this poll was in
		// flight: trying would only fail; hold the messages instead.
		rest = c.parse(log, msgs)
	} else {
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.batchTime())
		rest = c.batch(bctx, log, msgs)
		cancel()
		if len(rest) > 0 {
			c.polls.hold()
		}
	}
	if len(rest) > 0 {
		c.holdUntilHandled(ctx, log, rest)
	}
}

// polls is shared by the receivers: held while handle's store is down, so
// none of them starts a long poll (it could only take messages it cannot
// handle).
type polls struct{ stopped atomic.Bool }

func newPolls() *polls { return &polls{} }

// held reports whether no long poll may start.
func (p *polls) held() bool { return p.stopped.Load() }

// hold stops new long polls. Those in flight go on: see consumer.
func (p *polls) hold() { p.stopped.Store(true) }

// resume lets them start again.
func (p *polls) resume() { p.stopped.Store(false) }

// parse keeps the messages that are S3 event notifications. The others are
// not deleted: they come back until the redrive policy moves them to the
// dead-letter queue, where a person can look at them.
func (c *consumer) parse(log *slog.Logger, msgs []types.Message) []parsed {
	ps := make([]parsed, 0, len(msgs))
	for _, msg := range msgs {
		n, err := s3event.Parse([]byte(aws.ToString(msg.Body)))
		if err != nil {
			c.m.unparseable.Inc()
			log.Warn("unparseable message left for the dead-letter queue", "err", err,
				"messageId", aws.ToString(msg.MessageId),
				"receiveCount", msg.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)],
				"body", truncate(aws.ToString(msg.Body), 512))
			continue
		}
		ps = append(ps, parsed{msg: msg, n: n})
	}
	return ps
}

// batch parses msgs, handles them in order, deletes those fully handled
// and lets the poison go. It stops at the first outage of handle's store
// and returns the messages from there on, not handled.
func (c *consumer) batch(ctx context.Context, log *slog.Logger, msgs []types.Message) []parsed {
	handled, poison, rest := c.handleAll(ctx, log, c.parse(log, msgs))
	c.delete(ctx, log, handled)
	c.release(ctx, log, poison)
	return rest
}

// pipeline is handle with the completer's policy around it: an error that
// is not poison is an outage (holding is safe, while a good notification
// pushed to the dead-letter queue would let its upload be refunded), and
// every failure counts as errors_total{op="handle"}.
func (c *consumer) pipeline() pipeline.Handler[s3event.Notification] {
	return pipeline.Chain(c.handle,
		pipeline.Observe(func(_ s3event.Notification, err error, _ pipeline.Decision, _ time.Duration) {
			if err != nil {
				c.m.errors.WithLabelValues(opHandle).Inc()
			}
		}),
		pipeline.Classify[s3event.Notification](pipeline.ErrOutage))
}

// handleAll handles ps in order up to the first outage: it returns the
// messages handled, the poison ones and the ones not handled.
func (c *consumer) handleAll(ctx context.Context, log *slog.Logger, ps []parsed) (handled []types.Message, poison, rest []parsed) {
	handle := c.pipeline()
	for i, p := range ps {
		err := handle(ctx, p.n)
		switch pipeline.Decide(err) {
		case pipeline.Ack:
			handled = append(handled, p.msg)
		case pipeline.Terminate:
			log.Error("notification can never be applied; left for the dead-letter queue", "err", err,
				"messageId", aws.ToString(p.msg.MessageId),
				"receiveCount", p.msg.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)],
				"body", truncate(aws.ToString(p.msg.Body), 512))
			poison = append(poison, p)
		default: // Hold: pipeline() makes every other error an outage
			log.Error("handle failed; message held until the store answers", "err", err, "messageId", aws.ToString(p.msg.MessageId))
			return handled, poison, ps[i:]
		}
	}
	return handled, poison, nil
}

// release makes ps visible again at once: each receive counts toward the
// queue's maxReceiveCount, so the redrive policy soon moves them to the
// dead-letter queue, where a person can look at them. A failed release
// only means they reappear after their visibility timeout instead.
func (c *consumer) release(ctx context.Context, log *slog.Logger, ps []parsed) {
	for chunk := range slices.Chunk(ps, maxMessages) {
		out, err := c.q.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{
			QueueUrl: aws.String(c.queueURL), Entries: visibilityEntries(chunk, 0),
		})
		if err != nil {
			log.Warn("releasing poison messages failed; they reappear after their visibility timeout", "err", err, "messages", len(chunk))
			continue
		}
		for _, f := range out.Failed {
			log.Warn("releasing a poison message failed; it reappears after its visibility timeout", "id", aws.ToString(f.Id),
				"code", aws.ToString(f.Code), "message", aws.ToString(f.Message))
		}
	}
}

// visibilityEntries sets the visibility timeout of each of ps to vis.
func visibilityEntries(ps []parsed, vis time.Duration) []types.ChangeMessageVisibilityBatchRequestEntry {
	entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, len(ps))
	for i, p := range ps {
		entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{
			Id: aws.String(strconv.Itoa(i)), ReceiptHandle: p.msg.ReceiptHandle, VisibilityTimeout: int32(vis / time.Second),
		}
	}
	return entries
}

// held is the messages a receiver holds, shared with its extender.
type held struct {
	mu sync.Mutex // held across a visibility change, so none races a delete
	ps []parsed
}

// holdUntilHandled keeps ps, which the store's outage kept from being
// handled, in this receiver's hands: it extends their visibility while it
// waits for the store (ping with capped backoff and jitter), then handles
// and deletes them. Polls stay held meanwhile. On shutdown it stops
// extending and leaves the messages not handled: they reappear after their
// visibility timeout, and nothing is deleted that was not handled.
//
// SQS limits a message's visibility to 12 h from its receipt: in a longer
// outage the extensions fail and the messages reappear; no receiver polls
// while polls are held, so they are received again only once the store is
// back.
func (c *consumer) holdUntilHandled(ctx context.Context, log *slog.Logger, ps []parsed) {
	h := &held{ps: ps}
	c.m.held.Add(float64(len(ps)))
	var wg sync.WaitGroup
	ectx, stopExtending := context.WithCancel(ctx)
	defer func() {
		stopExtending()
		wg.Wait()
		if n := len(h.ps); n > 0 {
			c.m.held.Sub(float64(n))
			log.Warn("shutting down; held messages left to reappear after their visibility timeout", "messages", n)
		}
	}()
	if ctx.Err() != nil {
		return
	}
	log.Warn("holding messages until the store answers", "messages", len(ps))
	wg.Go(func() { c.extendWhileHeld(ectx, log, h) })
	failures := 0
	for {
		if failures > 0 && backoff.Sleep(ctx, c.backoff.Delay(failures)) != nil {
			return
		}
		if err := c.ready(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			log.Warn("store unavailable, holding messages", "messages", len(ps), "err", err)
			continue
		}
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.batchTime())
		handled, poison, rest := c.handleAll(bctx, log, ps)
		h.mu.Lock()
		h.ps, ps = rest, rest
		h.mu.Unlock()
		c.m.held.Sub(float64(len(handled) + len(poison)))
		c.delete(bctx, log, handled)
		c.release(bctx, log, poison)
		cancel()
		if len(rest) == 0 {
			c.polls.resume()
			log.Info("store available again, held messages handled", "messages", len(handled))
			return
		}
		c.polls.hold()
		failures++
	}
}

// extendWhileHeld renews the visibility of h's messages at once and then
// every extendEvery until ctx ends.
func (c *consumer) extendWhileHeld(ctx context.Context, log *slog.Logger, h *held) {
	vis, every := c.hold, c.extendEvery
	if vis == 0 {
		vis = holdVisibility
	}
	if every == 0 {
		every = vis / 3
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		h.mu.Lock()
		if len(h.ps) > 0 {
			cctx, cancel := context.WithTimeout(ctx, every)
			c.extend(cctx, log, h.ps, vis)
			cancel()
		}
		h.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// extend sets the visibility timeout of ps to vis from now, in batches of
// at most ten. A failed extension is counted and logged; the message stays
// held (if it reappears and is received again, handling it twice is safe).
func (c *consumer) extend(ctx context.Context, log *slog.Logger, ps []parsed, vis time.Duration) {
	for len(ps) > 0 {
		chunk := ps[:min(len(ps), maxMessages)]
		ps = ps[len(chunk):]
		out, err := c.q.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(c.queueURL), Entries: visibilityEntries(chunk, vis)})
		if err != nil {
			if errors.Is(ctx.Err(), context.Canceled) {
				return // shutdown
			}
			c.m.errors.WithLabelValues(opExtend).Add(float64(len(chunk)))
			log.Error("visibility extension failed; held messages may reappear", "err", err, "messages", len(chunk))
			continue
		}
		c.failed(log, opExtend, "visibility extension failed; the held message may reappear", out.Failed)
		c.m.extended.Add(float64(len(out.Successful)))
	}
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
		c.failed(log, opDelete, "delete failed; the message will be handled again", out.Failed)
		c.m.deleted.Add(float64(len(out.Successful)))
	}
}

// failed counts and logs, as op, the entries a batch call reports failed.
func (c *consumer) failed(log *slog.Logger, op, msg string, entries []types.BatchResultErrorEntry) {
	for _, f := range entries {
		c.m.errors.WithLabelValues(op).Inc()
		log.Error(msg, "id", aws.ToString(f.Id), "code", aws.ToString(f.Code), "message", aws.ToString(f.Message))
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// batchTime is batchTimeout, or 30 s when it is 0.
func (c *consumer) batchTime() time.Duration {
	if c.batchTimeout > 0 {
		return c.batchTimeout
	}
	return 30 * time.Second
}
