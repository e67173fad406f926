package grant

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mintgate/mintgate/shared/backoff"
	"github.com/mintgate/mintgate/shared/pipeline"
)

// ErrMalformed marks a batch that can never be applied, whatever the retry:
// a verified body that does not parse, or a handler's verdict (wrap it).
// It is of the class pipeline.ErrPoison: the consume loop terminates such a
// message instead of redelivering it forever.
var ErrMalformed = pipeline.Poison(errors.New("grant: malformed due batch"))

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

type consumeOptions struct {
	workers       int
	batch         int
	ackWait       time.Duration
	maxAckPending int
	backoff       backoff.Policy
	handleTimeout time.Duration
	trimInterval  time.Duration
	rescueAfter   time.Duration
	now           func() time.Time // the rescue's clock; tests move it
	log           *slog.Logger
	observe       func(Outcome)
	observeTrim   func(Trim)
}

// trimTimeout bounds one trim (a consumer info and a purge).
const trimTimeout = 5 * time.Second

// Pulls expire after pullExpiry and the server sends an idle heartbeat
// every pullHeartbeat while one waits. Two missed heartbeats (10 s) tell
// the iterator its pull is gone (the node holding it died without a word)
// and it pulls again: that bounds how long a lost pull stalls the sweep.
//
// Not shorter: a server that is only paused (a stall, a long GC) still
// holds the pull, and answers both it and the new one when it resumes —
// more than the iterator's buffer of one batch, and nats.go drops the rest
// as a slow consumer, to come back after the ack wait. With 2 s heartbeats
// a 3.5 s stall in the chaos soak did exactly that: refunds due after the
// last fault landed up to 5 s late.
const (
	pullExpiry    = 15 * time.Second
	pullHeartbeat = 5 * time.Second
)

// maxRescues bounds the schedules one rescue applies; the next trim
// interval goes on.
const maxRescues = 256

// ConsumeOption tunes Consume.
type ConsumeOption func(*consumeOptions)

// WithWorkers sets how many batches are handled at once (default 8).
func WithWorkers(n int) ConsumeOption { return func(o *consumeOptions) { o.workers = max(1, n) } }

// WithBatch sets how many messages one pull asks for (default 16, each up
// to a full batch of grants). What one instance pulled and has not acked
// is what its death delays by the ack wait, so keep it small — but not
// too small: with 4 (and 4 workers) pulls were the bottleneck, and on an
// R3 ledger at 5k grants/s refunds landed 1.0 s after their due time at
// p99 while the schedules had fired 0.26 s after it; with 16 (and 8
// workers) they land 0.27 s after (sweeper's load report, -r3).
func WithBatch(n int) ConsumeOption { return func(o *consumeOptions) { o.batch = max(1, n) } }

// WithAckWait sets how long the server waits for an ack before redelivering
// (default 5s; a handler at work reports progress every third of it, so
// only a dead instance's messages wait it out), and MaxAckPending bounds
// the deliveries not yet acked across every instance (default 1000).
func WithAckWait(wait time.Duration, maxAckPending int) ConsumeOption {
	return func(o *consumeOptions) { o.ackWait, o.maxAckPending = wait, maxAckPending }
}

// WithBackoff sets the redelivery delay after a failed attempt: min doubled
// per attempt, capped at max, less up to a fifth at random so that
// instances do not retry in step after an outage (default 1s to 30s).
func WithBackoff(minDelay, maxDelay time.Duration) ConsumeOption {
	return func(o *consumeOptions) { o.backoff.Min, o.backoff.Max = minDelay, maxDelay }
}

// WithHandleTimeout bounds one handler call (default 10s). It is also how
// long a stop waits for the grants being handled.
func WithHandleTimeout(d time.Duration) ConsumeOption {
	return func(o *consumeOptions) { o.handleTimeout = d }
}

// WithTrimInterval sets how often the loop removes from the stream the due
// messages the durable has acked or terminated (default 10s; 0 or less
// turns trimming off). Every instance trims; a repeat is harmless.
func WithTrimInterval(d time.Duration) ConsumeOption {
	return func(o *consumeOptions) { o.trimInterval = d }
}

// WithRescueAfter sets how long after its due time a batch whose
// schedule the server has not fired is applied by the sweepers themselves
// (default 30s; 0 or less turns it off). See consumeLoop.rescue. It runs
// every trim interval, so trimming off turns it off too.
func WithRescueAfter(d time.Duration) ConsumeOption {
	return func(o *consumeOptions) { o.rescueAfter = d }
}

// WithRescueClock sets the clock the rescue reads (default time.Now). The
// server's scheduler keeps the real one, so a test can make a schedule due
// in an hour look overdue to the rescue alone, as a scheduler that never
// fires it would.
func WithRescueClock(now func() time.Time) ConsumeOption {
	return func(o *consumeOptions) { o.now = now }
}

// Trim is one attempt to remove what the durable has finished with.
type Trim struct {
	// Floor is the durable's ack floor: every due message at or below
	// this stream sequence was acked or terminated; 0 if unknown.
	Floor uint64
	// Err is why nothing was removed; the messages stay until the next
	// trim, or until MaxAge.
	Err error
}

// WithTrimObserver is called after each trim that did (or failed to do)
// something, from the trimming goroutine.
func WithTrimObserver(f func(Trim)) ConsumeOption {
	return func(o *consumeOptions) { o.observeTrim = f }
}

// WithLogger sets the loop's logger (default slog.Default()).
func WithLogger(l *slog.Logger) ConsumeOption { return func(o *consumeOptions) { o.log = l } }

// WithObserver is called after each delivery, from the worker that handled it.
func WithObserver(f func(Outcome)) ConsumeOption { return func(o *consumeOptions) { o.observe = f } }

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
func (l *Ledger) Consume(ctx context.Context, durable string, handle Handler, opts ...ConsumeOption) (stop func(), err error) {
	o := consumeOptions{
		workers: 8, batch: 16, ackWait: 5 * time.Second, maxAckPending: 1000,
		backoff: backoff.Policy{Min: time.Second, Max: 30 * time.Second, Jitter: 0.2}, handleTimeout: 10 * time.Second,
		trimInterval: 10 * time.Second, rescueAfter: 30 * time.Second, now: time.Now, log: slog.Default(),
	}
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

// consumerConfig is the sweepers' durable pull consumer of the due grants.
func consumerConfig(durable string, o consumeOptions) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       durable,
		Description:   "mintgate sweepers: due grants",
		FilterSubject: SubjectDue,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       o.ackWait,
		MaxAckPending: o.maxAckPending,
		MaxDeliver:    -1, // a refund is retried until it is applied, never dropped
		Replicas:      0,  // the stream's
	}
}

// subscribe finds the stream, creates or updates the durable and starts
// pulling. A clustered stream or consumer without a leader (a node was just
// killed, an election is under way) answers with timeouts, or with
// "temporarily unavailable", for a while: that is retried with backoff until ctx ends, instead of ending the
// service, which would only be restarted into the same election.
func (l *Ledger) subscribe(ctx context.Context, cfg jetstream.ConsumerConfig, o consumeOptions) (jetstream.Stream, jetstream.MessagesContext, error) {
	for n := 1; ; n++ {
		stream, it, err := l.trySubscribe(ctx, cfg, o)
		if err == nil {
			return stream, it, nil
		}
		err = fmt.Errorf("%w: stream %s, consumer %s: %w", ErrUnavailable, l.cfg.Stream, cfg.Durable, err)
		if !passing(err) {
			return nil, nil, err // not a passing election: say so now
		}
		wait := electionBackoff.Delay(n)
		o.log.Warn("due grants: the ledger does not answer yet; retrying", "retryIn", wait, "err", err)
		if backoff.Sleep(ctx, wait) != nil {
			return nil, nil, err
		}
	}
}

// trySubscribe is one try of subscribe, its requests bounded by openTry (a
// request that reached a cluster without a meta leader may get no answer).
func (l *Ledger) trySubscribe(ctx context.Context, cfg jetstream.ConsumerConfig, o consumeOptions) (jetstream.Stream, jetstream.MessagesContext, error) {
	try, cancel := context.WithTimeout(ctx, openTry)
	defer cancel()
	stream, err := l.js.Stream(try, l.cfg.Stream)
	if err != nil {
		return nil, nil, err
	}
	cons, err := l.js.CreateOrUpdateConsumer(try, l.cfg.Stream, cfg)
	if err != nil {
		return nil, nil, err
	}
	it, err := messages(cons, o)
	if err != nil {
		return nil, nil, err
	}
	return stream, it, nil
}

// messages starts pulling, o.batch messages a pull, with heartbeats.
func messages(cons jetstream.Consumer, o consumeOptions) (jetstream.MessagesContext, error) {
	return cons.Messages(jetstream.PullMaxMessages(o.batch), jetstream.PullExpiry(pullExpiry), jetstream.PullHeartbeat(pullHeartbeat))
}

type consumeLoop struct {
	l        *Ledger
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
// one wait, so waits cut short (a second each, as before) never let it
// notice that its pull was lost, and the sweep stalled for good when the
// node holding the pull died.
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

// resubscribe makes a new iterator in place of old (stopped: whatever it
// had pulled comes back after the ack wait), retrying until it works or
// the loop stops.
func (c *consumeLoop) resubscribe(old jetstream.MessagesContext) {
	old.Stop()
	for n := 1; ; n++ {
		if backoff.Sleep(c.run, electionBackoff.Delay(n)) != nil {
			return // stopping
		}
		ctx, cancel := context.WithTimeout(c.hctx, 5*time.Second)
		cons, err := c.l.js.CreateOrUpdateConsumer(ctx, c.l.cfg.Stream, c.cfg)
		cancel()
		if err != nil {
			c.o.log.Warn("due grants: consumer unavailable", "err", err)
			continue
		}
		it, err := messages(cons, c.o)
		if err != nil {
			c.o.log.Warn("due grants: subscribe failed", "err", err)
			continue
		}
		c.mu.Lock()
		c.it = it
		if c.isStopping() {
			it.Drain()
		}
		c.mu.Unlock()
		return
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

// trimLoop removes, every trim interval until the loop stops, the due
// messages the durable has finished with, after rescuing the overdue
// schedules (see rescue).
//
// Why: the stream keeps limits retention (see LedgerConfig.StreamConfig),
// so nothing else removes a handled grant before MaxAge, days later. The
// schedule message needs no removing: nats-server purges a fired one-shot
// "@at" schedule itself, in the same write that stores its due message
// (which carries "Nats-Schedule-Next: purge"). Only the due message stays,
// and only the durable knows when it was applied.
//
// How: one purge of SubjectDue below the durable's ack floor. Every due
// message at or below the floor was acked, after its handler returned nil
// (applied), or terminated (can never apply; its body was logged), so the
// purge removes nothing unapplied. A grant that keeps failing holds the
// floor, and the messages after it wait for it (at worst until MaxAge).
//
// Why not a delete per message after its ack: with sync_interval always,
// every stream write is fsynced on its own (docs/production.md measures
// about a thousand a second per stream, shared with the signer's Record),
// so a delete per grant would take a third of that budget and cap the
// sweep rate near it; one purge per interval costs one write however many
// it removes. Why not Nats-Schedule-TTL: the due message is stored when
// the schedule fires and MaxAge ages it from then, so a TTL equal to
// MaxAge removes nothing sooner, and a shorter one would drop grants no
// sweeper applied during a long outage; it would also need allow_msg_ttl,
// which a stream can never turn off again.
func (c *consumeLoop) trimLoop() {
	t := time.NewTicker(c.o.trimInterval)
	defer t.Stop()
	var trimmed uint64 // the floor of the last purge that worked
	for {
		select {
		case <-c.stopping:
			return
		case <-t.C:
		}
		if c.o.rescueAfter > 0 {
			c.rescue()
		}
		floor, err := c.trim(trimmed)
		if err == nil && floor == trimmed {
			continue // nothing new finished: no write
		}
		if err != nil {
			c.o.log.Warn("due grants: removing the finished ones failed; they stay until the next try", "floor", floor, "err", err)
		} else {
			trimmed = floor
		}
		if c.o.observeTrim != nil {
			c.o.observeTrim(Trim{Floor: floor, Err: err})
		}
	}
}

// trim purges the due messages at or below the durable's ack floor, unless
// the floor is 0 or done (already purged). A floor below done (the stream
// or the durable was recreated) is purged too. It returns the floor.
func (c *consumeLoop) trim(done uint64) (uint64, error) {
	ctx, cancel := context.WithTimeout(c.run, trimTimeout) // a stop does not wait for a slow server
	defer cancel()
	// A fresh info: the floor only moves up, so purging below a floor read
	// a moment ago is safe however far the consumer has gone since.
	cons, err := c.stream.Consumer(ctx, c.cfg.Durable)
	if err != nil {
		return 0, fmt.Errorf("consumer %s info: %w", c.cfg.Durable, err)
	}
	floor := cons.CachedInfo().AckFloor.Stream
	if floor == 0 || floor == done {
		return floor, nil
	}
	if err := c.stream.Purge(ctx, jetstream.WithPurgeSubject(SubjectDue), jetstream.WithPurgeSequence(floor+1)); err != nil {
		return floor, fmt.Errorf("purge %s below sequence %d: %w", SubjectDue, floor+1, err)
	}
	return floor, nil
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
