package ledger

import (
	"log/slog"
	"time"

	"github.com/mintgate/mintgate/shared/backoff"
)

// consumeOptions are Consume's settings (see the With options).
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
	trimHold      string // another durable whose unacked due messages the trim keeps
}

// DefaultAckWait is how long the server waits for a consumer's ack before
// it delivers a grant batch again (WithAckWait): a batch delivered to a
// sweeper that was killed, or through a nats-server that was, comes back
// this long after.
const DefaultAckWait = 5 * time.Second

// defaultConsumeOptions are Consume's settings before its options.
func defaultConsumeOptions() consumeOptions {
	return consumeOptions{
		workers: 8, batch: 16, ackWait: DefaultAckWait, maxAckPending: 1000,
		backoff: backoff.Policy{Min: time.Second, Max: 30 * time.Second, Jitter: 0.2}, handleTimeout: 10 * time.Second,
		trimInterval: 10 * time.Second, rescueAfter: 30 * time.Second, now: time.Now, log: slog.Default(),
	}
}

// ConsumeOption tunes Consume.
type ConsumeOption func(*consumeOptions)

// WithWorkers sets how many batches are handled at once (default 8).
func WithWorkers(n int) ConsumeOption { return func(o *consumeOptions) { o.workers = max(1, n) } }

// WithBatch sets how many messages one pull asks for (default 16, each up
// to a full batch of grants). What one instance pulled and has not acked
// is what its death delays by the ack wait, so keep it small — but not so
// small that the pulls, not the workers, bound the sweep: then refunds
// land later than their schedules fire (docs/performance.md).
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

// WithTrimObserver is called after each trim that did (or failed to do)
// something, from the trimming goroutine.
func WithTrimObserver(f func(Trim)) ConsumeOption {
	return func(o *consumeOptions) { o.observeTrim = f }
}

// WithLogger sets the loop's logger (default slog.Default()).
func WithLogger(l *slog.Logger) ConsumeOption { return func(o *consumeOptions) { o.log = l } }

// WithObserver is called after each delivery, from the worker that handled it.
func WithObserver(f func(Outcome)) ConsumeOption { return func(o *consumeOptions) { o.observe = f } }

// WithTrimHold has the trim also keep every due message durable (another
// consumer of the stream, such as the upload records' feed) has not
// acked: the purge goes no higher than the lower of the two ack floors.
// A durable that does not exist holds nothing.
func WithTrimHold(durable string) ConsumeOption {
	return func(o *consumeOptions) { o.trimHold = durable }
}
