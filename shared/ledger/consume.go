package ledger

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mintgate/mintgate/shared/pipeline"
)

// ErrMalformed marks a batch that can never be applied, whatever the retry:
// a verified body that does not parse, or a handler's verdict (wrap it).
// It is of the class pipeline.ErrPoison: the consume loop terminates such a
// message instead of redelivering it forever.
var ErrMalformed = pipeline.Poison(errors.New("ledger: malformed due batch"))

// Handler applies one due batch of grants; the consume loop acts on its
// result as pipeline.Decide says. Returning nil acks it; an error wrapping
// ErrMalformed (or any pipeline.ErrPoison) terminates it; any other error
// redelivers the whole batch later, with backoff (the durable has no
// delivery limit, so pipeline.ErrOutage does the same). A handler must be
// idempotent per grant: a batch can arrive more than once, and after a
// partial failure some of its grants were applied already. What was acked
// or terminated is later removed from the stream (see WithTrimInterval).
type Handler = pipeline.Handler[Batch]

// Outcome is what the consume loop did with one delivery, for metrics.
type Outcome struct {
	Batch   Batch         // zero when the body did not verify or parse
	Attempt uint64        // 1 on the first delivery
	Action  Action        // what was done with the message
	Err     error         // the handler's (or the parser's) error, nil when acked
	Retry   time.Duration // with Retried and Early: the redelivery delay asked for
}

// Action is the fate of one delivery.
type Action int

// The actions of the consume loop.
const (
	Acked      Action = iota // applied; the message is done
	Retried                  // not applied; redelivered after a backoff
	Terminated               // can never be applied; not redelivered
	Released                 // not started before a stop; redelivered at once
	Forged                   // its MAC did not verify: never applied, not redelivered
	Rescued                  // applied from its schedule, which the server had not fired (see WithRescueAfter)
	Early                    // held a grant not due yet (ErrNotDue): redelivered at its due time
)

// notDueMinDelay is the least wait before an early batch comes back: a
// copy that is due within it is not worth a tighter loop.
const notDueMinDelay = time.Second

func (a Action) String() string {
	switch a {
	case Acked:
		return "acked"
	case Retried:
		return "retried"
	case Terminated:
		return "terminated"
	case Released:
		return "released"
	case Forged:
		return "forged"
	case Rescued:
		return "rescued"
	case Early:
		return "early"
	}
	return fmt.Sprintf("action(%d)", int(a))
}

// Consume delivers due batches to handle through the durable pull consumer
// durable, shared by every process that names it, until ctx ends or stop is
// called. A batch is acked only after handle returned nil; one whose MAC
// does not verify under the ledger's secret is terminated unhandled (a
// forgery, or a grant from before batches). Every trim
// interval, the due messages the durable has acked or terminated are
// purged from the stream (see trimLoop): a handled grant leaves nothing
// behind, and nothing is removed that was not applied or terminated.
//
// Stopping (either way) stops pulling, lets the handlers in flight finish
// (their context is not cancelled by ctx, only bounded by the handle
// timeout), releases the messages pulled but not started for redelivery at
// once, and acks nothing it did not apply. stop waits for all of it.
func (l *Client) Consume(ctx context.Context, durable string, handle Handler, opts ...ConsumeOption) (stop func(), err error) {
	o := defaultConsumeOptions()
	for _, opt := range opts {
		opt(&o)
	}
	o.log = o.log.With("component", "grant-consumer", "durable", durable)
	cfg := consumerConfig(durable, o)
	stream, it, err := l.subscribe(ctx, cfg, o)
	if err != nil {
		return nil, err
	}

	run, cancelRun := context.WithCancel(context.WithoutCancel(ctx))
	c := &consumeLoop{
		l: l, o: o, cfg: cfg, stream: stream,
		handle:   pipeline.Chain(handle, pipeline.Timeout[Batch](o.handleTimeout)),
		hctx:     context.WithoutCancel(ctx),
		run:      run,
		cancel:   cancelRun,
		stopping: make(chan struct{}),
		jobs:     make(chan jetstream.Msg),
		it:       it,
	}
	var readerDone sync.WaitGroup
	readerDone.Go(c.read)
	var workers sync.WaitGroup
	for range o.workers {
		workers.Go(c.work)
	}
	if o.trimInterval > 0 {
		workers.Go(c.trimLoop)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			c.stop()
			readerDone.Wait()
			workers.Wait()
		})
	}
	go func() {
		select {
		case <-ctx.Done():
			stop()
		case <-c.stopping:
		}
	}()
	return stop, nil
}

type consumeLoop struct {
	l        *Client
	o        consumeOptions
	cfg      jetstream.ConsumerConfig
	handle   Handler          // with the handle timeout
	stream   jetstream.Stream // for trimming; its methods need only the name
	hctx     context.Context
	run      context.Context // cancelled when stopping: ends a wait on a pull
	cancel   context.CancelFunc
	stopping chan struct{}
	stopOnce sync.Once
	jobs     chan jetstream.Msg

	mu sync.Mutex
	it jetstream.MessagesContext
}

func (c *consumeLoop) stop() {
	c.stopOnce.Do(func() {
		close(c.stopping)
		c.cancel()
		c.mu.Lock()
		// Drain, not Stop: what was pulled stays readable and is released below.
		c.it.Drain()
		c.mu.Unlock()
	})
}

func (c *consumeLoop) isStopping() bool {
	select {
	case <-c.stopping:
		return true
	default:
		return false
	}
}

// read hands pulled messages to the workers; once stopping, it releases
// the rest. If the iterator dies on its own (the consumer was deleted, the
// connection closed), it builds a new one.
//
// While running, one wait on the iterator lasts until a message comes or
// the loop stops: the iterator checks the server's heartbeats only within
// one wait, so a wait cut short would never notice that its pull was lost
// (the node holding it died), and the sweep would stall for good.
func (c *consumeLoop) read() {
	defer close(c.jobs)
	for {
		c.mu.Lock()
		it := c.it
		c.mu.Unlock()
		var m jetstream.Msg
		var err error
		if c.isStopping() {
			// Drained: what was pulled comes out, then ErrMsgIteratorClosed;
			// bounded, as a stop must not hang on a dead connection.
			m, err = it.Next(jetstream.NextMaxWait(time.Second))
		} else {
			m, err = it.Next(jetstream.NextContext(c.run))
		}
		switch {
		case err == nil:
		case c.isStopping() && errors.Is(err, context.Canceled):
			continue // stopped while waiting: now drain what was pulled
		case c.isStopping():
			return // drained (ErrTimeout: nothing left; or the iterator closed)
		case errors.Is(err, jetstream.ErrNoHeartbeat):
			// The iterator forgot its pull and pulls again by itself.
			c.o.log.Warn("due grants: the server's heartbeats stopped (the node holding the pull went away); pulling again")
			continue
		default:
			c.o.log.Warn("due grants: pull failed, resubscribing", "err", err)
			c.resubscribe(it)
			continue
		}
		if c.isStopping() {
			c.release(m)
			continue
		}
		select {
		case c.jobs <- m:
		case <-c.stopping:
			c.release(m)
		}
	}
}

func (c *consumeLoop) release(m jetstream.Msg) {
	// A failed Nak only means the ack wait redelivers it instead.
	_ = m.Nak()
	c.observe(Outcome{Attempt: attempt(m), Action: Released})
}

func (c *consumeLoop) work() {
	for m := range c.jobs {
		c.deliver(m)
	}
}

func (c *consumeLoop) deliver(m jetstream.Msg) {
	n := attempt(m)
	b, err := UnsealAny(m.Data(), c.l.cfg.Secret, c.l.cfg.PreviousSecret)
	if errors.Is(err, ErrForged) {
		c.o.log.Error("due message not sealed with our secret; terminated unapplied", "subject", m.Subject(), "attempt", n, "err", err, "bytes", len(m.Data()))
		_ = m.TermWithReason("forged")
		c.observe(Outcome{Attempt: n, Action: Forged, Err: err})
		return
	}
	if err == nil {
		err = c.handleWithProgress(m, b)
	}
	switch pipeline.Decide(err) {
	case pipeline.Ack:
		if aerr := m.Ack(); aerr != nil {
			// Applied but not acked: it comes back and the handler, being
			// idempotent, finds it done.
			c.o.log.Warn("due batch applied, ack failed", "batch", b.ID, "err", aerr)
		}
		c.observe(Outcome{Batch: b, Attempt: n, Action: Acked})
	case pipeline.Terminate:
		c.o.log.Error("due batch can never be applied; terminated", "batch", b.ID, "subject", m.Subject(), "err", err, "body", truncate(m.Data(), 512))
		_ = m.TermWithReason(truncate([]byte(err.Error()), 200))
		c.observe(Outcome{Batch: b, Attempt: n, Action: Terminated, Err: err})
	default: // Retry, or Hold: with no delivery limit, a redelivery costs nothing
		delay := c.o.backoff.Delay(int(min(n, math.MaxInt32)))
		if nd := (*NotDueError)(nil); errors.As(err, &nd) {
			// Not a failure: a copy delivered before its grants' time (or
			// a clock behind the server's). It comes back when due.
			delay = max(time.Until(nd.Until), notDueMinDelay)
			c.o.log.Warn("due batch delivered before its time; held until then", "batch", b.ID, "subject", m.Subject(), "dueAt", nd.Until, "attempt", n)
			_ = m.NakWithDelay(delay)
			c.observe(Outcome{Batch: b, Attempt: n, Action: Early, Err: err, Retry: delay})
			return
		}
		c.o.log.Warn("due batch not applied; retrying", "batch", b.ID, "grants", len(b.Grants), "attempt", n, "retryIn", delay, "err", err)
		_ = m.NakWithDelay(delay)
		c.observe(Outcome{Batch: b, Attempt: n, Action: Retried, Err: err, Retry: delay})
	}
}

// handleWithProgress runs the handler (bounded by the handle timeout),
// telling the server every third of the ack wait that the message is still
// being worked on: a short ack wait then only delays the messages of an
// instance that died.
func (c *consumeLoop) handleWithProgress(m jetstream.Msg, b Batch) error {
	done := make(chan struct{})
	defer close(done)
	go func() {
		t := time.NewTicker(max(c.o.ackWait/3, 10*time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = m.InProgress()
			}
		}
	}()
	return c.handle(c.hctx, b)
}

func (c *consumeLoop) observe(out Outcome) {
	if c.o.observe != nil {
		c.o.observe(out)
	}
}

func attempt(m jetstream.Msg) uint64 {
	if md, err := m.Metadata(); err == nil {
		return md.NumDelivered
	}
	return 1
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}
