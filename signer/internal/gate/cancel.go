package gate

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/backoff"
	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/quota"
)

// A Spend that fails on the signer's side may still run on Redis: the
// EVALSHA was written before the timeout struck, and a stalled Redis (a
// SIGSTOP, a slow fork, a failover) runs what sits in its sockets when it
// resumes. By then the client has its 503, so the token that Spend takes
// would never come back, and its in-flight mark would answer 409 to the
// client's retries until it expires. The canceller runs quota.Store.Cancel
// for each such request until Redis answers: a Spend that ran is given
// back, one that has not run finds a tombstone and takes nothing.

const (
	// cancelQueue is how many requests a signer holds for cancelling: a
	// stall's worth of 503s at full load. Beyond it they are dropped and
	// counted; each is at most one token lost.
	cancelQueue = 4096
	// cancelDeadline is how long one request's Cancel is retried. Its
	// tombstone, written at any time before, outlives a Spend that sat
	// CancelTTL in Redis; a Redis that answers nothing for this long has
	// bigger trouble than one token.
	cancelDeadline = quota.CancelTTL / 2
	// cancelDrain bounds the last round at shutdown, inside the pod's grace
	// period after the HTTP drain (shutdownTimeout).
	cancelDrain = 5 * time.Second
)

// cancelBackoff spaces the retries of a Cancel Redis did not answer: a
// stall ends in seconds, an outage in minutes.
var cancelBackoff = backoff.Policy{Min: 50 * time.Millisecond, Max: 2 * time.Second}

// Results of a cancel, the values of mintgate_signer_cancels_total's label.
const (
	CancelRefunded  = "refunded"  // the Spend had run: its tokens went back
	CancelTombstone = "tombstone" // nothing to give back: the Spend had not run (a tombstone now stops it) or took nothing
	CancelGaveUp    = "gave_up"   // Redis did not answer before the deadline or the shutdown: a token may be lost
)

// canceller is one goroutine per signer with a bounded queue. One is
// enough: when Redis answers, a Cancel takes a round trip; when it does
// not, every Cancel would wait on it alike, so the head of the queue is
// retried alone and the rest follow as soon as it passes.
type canceller struct {
	cancel  func(ctx context.Context, now time.Time, a quota.Ask) (refunded bool, err error) // one attempt, bounded by the Redis timeout
	now     func() time.Time                                                                 // the buckets' clock
	metrics *Metrics
	log     *slog.Logger

	// The constants above; tests shorten or lengthen them.
	deadline, drain time.Duration
	backoff         backoff.Policy

	queue chan pendingCancel
	stop  chan struct{} // closed by close
	done  chan struct{} // closed when run has returned

	mu     sync.Mutex
	closed bool // add drops from now on
}

// pendingCancel is one request to cancel.
type pendingCancel struct {
	ask   quota.Ask
	until time.Time // by the wall clock: retries stop after it
}

// newCanceller returns a canceller with the signer's settings; run starts it.
func newCanceller(cancel func(context.Context, time.Time, quota.Ask) (bool, error), now func() time.Time, m *Metrics, log *slog.Logger) *canceller {
	return &canceller{
		cancel: cancel, now: now, metrics: m, log: log,
		deadline: cancelDeadline, drain: cancelDrain, backoff: cancelBackoff,
		queue: make(chan pendingCancel, cancelQueue),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
}

// startCanceller is newCanceller, running.
func startCanceller(cancel func(context.Context, time.Time, quota.Ask) (bool, error), now func() time.Time, m *Metrics, log *slog.Logger) *canceller {
	c := newCanceller(cancel, now, m, log)
	go c.run()
	return c
}

// StartCanceller starts g's canceller, which cancels, on the buckets'
// clock now, the spends Decide gave up on that may still run on Redis.
func (g *Gate) StartCanceller(now func() time.Time) {
	g.cancels = startCanceller(g.cancel, now, g.metrics, g.log)
}

// StopCanceller stops the canceller after a last round (canceller.close):
// call it once the handlers have drained and before the Redis client
// closes.
func (g *Gate) StopCanceller() { g.cancels.close() }

// add queues a's cancel without waiting: a request on its way to a 503
// must not wait on a stalled Redis a second time.
func (c *canceller) add(a quota.Ask) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		select {
		case c.queue <- pendingCancel{ask: a, until: time.Now().Add(c.deadline)}:
			c.metrics.CancelPending.Inc()
			return
		default:
		}
	}
	c.metrics.CancelDropped.Inc()
}

// close stops the canceller after a last round: what it holds is tried
// once more, within c.drain and one Redis timeout. Call it once the
// handlers have drained and before the Redis client closes.
func (c *canceller) close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.mu.Unlock()
	close(c.stop)
	<-c.done
}

func (c *canceller) run() {
	defer close(c.done)
	for {
		select {
		case p := <-c.queue:
			if !c.settle(p) {
				c.last(p)
				return
			}
			c.metrics.CancelPending.Dec()
		case <-c.stop:
			c.last()
			return
		}
	}
}

// settle retries p's Cancel with a capped backoff until Redis answers or
// p's deadline passes. It returns false, p unsettled, when the signer
// stops first.
func (c *canceller) settle(p pendingCancel) bool {
	for n := 1; ; n++ {
		err := c.try(context.Background(), p)
		if err == nil {
			return true
		}
		if !errors.Is(err, bucket.ErrUnavailable) || !time.Now().Before(p.until) {
			// A refusal no retry fixes (Spend refused the same Ask before
			// sending it, so it cannot come here), or out of time.
			c.gaveUp(p, err)
			return true
		}
		t := time.NewTimer(c.backoff.Delay(n))
		select {
		case <-t.C:
		case <-c.stop:
			t.Stop()
			return false
		}
	}
}

// last is the round at shutdown: held, then what is queued, each tried
// once while the drain lasts; the rest gives up.
func (c *canceller) last(held ...pendingCancel) {
	ctx, cancel := context.WithTimeout(context.Background(), c.drain)
	defer cancel()
	once := func(p pendingCancel) {
		defer c.metrics.CancelPending.Dec()
		err := ctx.Err()
		if err == nil {
			err = c.try(ctx, p)
		}
		if err != nil {
			c.gaveUp(p, err)
		}
	}
	for _, p := range held {
		once(p)
	}
	for {
		select {
		case p := <-c.queue:
			once(p)
		default:
			return
		}
	}
}

// try runs one Cancel and counts what it did.
func (c *canceller) try(ctx context.Context, p pendingCancel) error {
	refunded, err := c.cancel(ctx, c.now(), p.ask)
	if err != nil {
		return err
	}
	result := CancelTombstone
	if refunded {
		result = CancelRefunded
	}
	c.metrics.Cancels.WithLabelValues(result).Inc()
	return nil
}

func (c *canceller) gaveUp(p pendingCancel, err error) {
	c.metrics.Cancels.WithLabelValues(CancelGaveUp).Inc()
	c.log.Warn("cancelling a sign whose spend may have run gave up: if it ran, a token is lost until the bucket refills and the key stays in flight until its mark expires",
		"tenant", p.ask.Tenant, "urlId", p.ask.Nonce, "err", err)
}

// spendMayRun reports whether a Spend that failed with err may still run on
// Redis, so that it needs a Cancel. It may, unless nothing reached Redis
// or Redis answered:
//   - a refusal (an invalid Ask) is never sent;
//   - a dial that failed (refused, unreachable, timed out) is a
//     *net.OpError with Op "dial" in go-redis's errors: no connection, so
//     no EVALSHA written;
//   - a pool timeout: no connection came free in time, nothing written;
//   - a Redis error reply (NOSCRIPT is retried by the Store; NOPERM,
//     READONLY, CLUSTERDOWN, BUSY, OOM …): the script did not run, or
//     failed on its first reads, before any write.
//
// A timeout after the EVALSHA was written is none of these, nor is a
// connection lost while waiting for the reply.
func spendMayRun(err error) bool {
	if !errors.Is(err, bucket.ErrUnavailable) {
		return false
	}
	if op, ok := errors.AsType[*net.OpError](err); ok && op.Op == "dial" {
		return false
	}
	if errors.Is(err, redis.ErrPoolTimeout) {
		return false
	}
	_, replied := errors.AsType[redis.Error](err)
	return !replied
}
