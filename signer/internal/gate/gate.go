// Package gate is the signer's Redis side: the sign decision (one Spend
// script per sign, gathered per tenant, with the in-process buckets of
// degraded mode and the canceller of spends cut short) and every other
// Redis call a route makes, each a typed method that runs through one
// wrapper (call) bounding it by MINTGATE_REDIS_TIMEOUT and observing its
// latency. Routes never hold the quota.Store: the Gate is their one way in.
package gate

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/backoff"
	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/quota"
	"github.com/mintgate/mintgate/shared/tiers"
)

// InFlightTTL is how long a request's in-flight mark holds its idempotency
// key: longer than presigning plus the ledger's timeout, short enough that a
// signer that died mid-request frees the key soon.
const InFlightTTL = 30 * time.Second

// Decision is the sign script's answer: quota's Outcome (Allowed, Denied,
// Replay, Reused or Pending; the others are errors, see fromSpend) and what
// goes with it.
type Decision struct {
	Outcome  quota.Outcome
	Result   bucket.Result // for allowed and denied
	Body     []byte        // for replay
	Degraded bool          // decided by the in-process buckets: Redis was unavailable
	Shadow   bool          // denied by a bucket that does not refuse in shadow mode, issued on the hard buckets alone (the caller sets it)
}

// Gate runs the Redis side of a sign through quota.Store, its Spends
// gathered per tenant by a quota.Coalescer and its Finishes by a
// quota.FinishCoalescer. With local set
// (degraded mode) a Redis outage falls back to in-process buckets at a
// share of the limits instead of failing closed.
type Gate struct {
	store    *quota.Store
	spends   *quota.Coalescer       // the Spends of one tenant, in flight at once, share a script call
	finishes *quota.FinishCoalescer // and so do its Finishes
	local    *bucket.Local
	share    float64       // of every limit, for the local buckets (MINTGATE_DEGRADED_SHARE)
	timeout  time.Duration // MINTGATE_REDIS_TIMEOUT, for each call
	metrics  *Metrics
	log      *slog.Logger
	cancels  *canceller // for spends that failed here but may run on Redis (cancel.go)

	degradedLog sampler // the degraded-mode warning, at most once per degradedLogEvery

	rdb    redis.UniversalClient
	clock  quota.Clock               // Redis's clock, for each Spend's Until
	until  func(time.Time) time.Time // clock.Until; tests skew it
	resync chan struct{}             // asks syncClock for a Sync now
}

// degradedLogEvery is the least time between two degraded-mode warnings.
const degradedLogEvery = 10 * time.Second

// sampler lets one event in per degradedLogEvery and counts the others.
type sampler struct {
	mu      sync.Mutex
	last    time.Time
	skipped int
}

// allow reports whether an event at now may be logged, and how many were
// held back since the last one that was.
func (s *sampler) allow(now time.Time) (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.last.IsZero() && now.Sub(s.last) < degradedLogEvery {
		s.skipped++
		return 0, false
	}
	n := s.skipped
	s.last, s.skipped = now, 0
	return n, true
}

// clockSync is how often the gate reads Redis's clock again.
const clockSync = 10 * time.Second

// New is the gate on rdb, each call bounded by timeout
// (MINTGATE_REDIS_TIMEOUT); a share above 0 turns the degraded mode on.
// Its canceller runs from StartCanceller on.
func New(rdb redis.UniversalClient, timeout time.Duration, share float64, m *Metrics, log *slog.Logger) *Gate {
	g := &Gate{store: quota.New(rdb), timeout: timeout, metrics: m, log: log, rdb: rdb, resync: make(chan struct{}, 1)}
	g.spends = quota.NewCoalescer(g.store, 0, 0)
	g.finishes = quota.NewFinishCoalescer(g.store, 0, 0)
	g.until = g.clock.Until
	if share > 0 {
		g.local, g.share = bucket.NewLocal(), share
	}
	return g
}

// Decide checks the idempotency record of ask and spends from every
// bucket of the attempt (the caller's, the tenant's, and for an anonymous
// caller anonymous_all), all or none, in one round trip, shared with the
// tenant's concurrent signs (quota.Coalescer). An error wraps
// bucket.ErrUnavailable. In degraded mode a Redis outage is decided on
// local, the attempt's buckets as the in-process buckets see them.
func (g *Gate) Decide(ctx context.Context, ask quota.Ask, local []bucket.Bucket, now time.Time) (Decision, error) {
	d, err := g.spend(ctx, ask, now)
	if err != nil {
		if spendMayRun(err) {
			// The EVALSHA may sit in a stalled Redis and run after this
			// request has answered: cancel it in the background, so that it
			// takes no token and holds no key (cancel.go). In degraded mode
			// too: the local decision below is charged locally, and the
			// Redis attempt must not charge Redis as well.
			g.cancels.add(ask)
		}
		if g.local == nil {
			return Decision{}, err
		}
		return g.degrade(ask.Tenant, local, now, err), nil
	}
	return fromSpend(d)
}

// spend runs the Spend script within the Redis call's deadline.
func (g *Gate) spend(ctx context.Context, ask quota.Ask, now time.Time) (quota.Decision, error) {
	var d quota.Decision
	err := g.call(ctx, "sign", func(ctx context.Context) (err error) {
		// The Spend may run only until this call gives up, by Redis's
		// clock: one that sat in a stalled Redis and runs after the 503
		// takes nothing. The canceller still covers the one that ran in
		// time and whose reply was lost.
		if dl, ok := ctx.Deadline(); ok {
			ask.Until = g.until(dl)
		}
		d, err = g.spends.Spend(ctx, now, ask, InFlightTTL)
		if err == nil && d.Outcome == quota.Late {
			// Redis answered before our deadline yet judged the Spend late
			// by its own clock: its clock is ahead of the estimate. Nothing
			// was spent; spend without a limit and read its clock again.
			g.metrics.LateSpends.Inc()
			g.askResync()
			ask.Until = time.Time{}
			d, err = g.spends.Spend(ctx, now, ask, InFlightTTL)
		}
		return err
	})
	return d, err
}

// degrade decides tenant's sign with the in-process buckets local while
// Redis is down (err).
func (g *Gate) degrade(tenant string, local []bucket.Bucket, now time.Time, err error) Decision {
	g.metrics.Degraded.Inc()
	if n, ok := g.degradedLog.allow(time.Now()); ok {
		// Once per degradedLogEvery, not per sign: an outage at full
		// load would write thousands of lines a second.
		g.log.Warn("redis unavailable: deciding with in-process buckets; idempotency is not guaranteed",
			"tenant", tenant, "err", err, "degradedSignsSinceLastLine", n)
	}
	res := g.local.Take(now, 1, g.degradedBuckets(local)...)
	dec := Decision{Outcome: quota.Denied, Result: res, Degraded: true}
	if res.Allowed {
		dec.Outcome = quota.Allowed
	}
	return dec
}

// fromSpend is the gate's decision for what the Spend script answered.
func fromSpend(d quota.Decision) (Decision, error) {
	switch d.Outcome {
	case quota.Allowed, quota.Denied, quota.Replay, quota.Reused, quota.InProgress, quota.LiveFull:
		return Decision{Outcome: d.Outcome, Result: d.Result, Body: d.Body}, nil
	case quota.Cancelled:
		// Only a Spend that runs after its own request's Cancel answers
		// this, and that request has had its 503: nobody reads this reply.
		return Decision{}, fmt.Errorf("%w: spend found its own request cancelled", bucket.ErrUnavailable)
	case quota.Late:
		// The retry without Until cannot answer this; kept for safety.
		return Decision{}, fmt.Errorf("%w: spend ran after its deadline", bucket.ErrUnavailable)
	}
	return Decision{}, fmt.Errorf("%w: spend decided %v", bucket.ErrUnavailable, d.Outcome)
}

// SyncClock reads Redis's clock at once, then every clockSync and when a
// Spend came back Late, until ctx ends. Until the first read succeeds,
// Spends run without an Until (the canceller alone covers them).
func (g *Gate) SyncClock(ctx context.Context) {
	t := time.NewTicker(clockSync)
	defer t.Stop()
	synced := false
	for {
		sctx, cancel := context.WithTimeout(ctx, g.timeout)
		err := g.clock.Sync(sctx, g.rdb)
		cancel()
		switch {
		case err == nil && !synced:
			synced = true
			g.log.Info("read redis's clock", "estimate", g.clock.String())
		case err != nil && ctx.Err() == nil:
			g.log.Debug("reading redis's clock failed; keeping the last estimate", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-g.resync:
		}
	}
}

// askResync wakes SyncClock without waiting.
func (g *Gate) askResync() {
	select {
	case g.resync <- struct{}{}:
	default:
	}
}

// Undo gives back the tokens of ask's allowed decision d whose URL urlID is never
// handed out, frees its idempotency key and marks the grant refunded, in
// one step: if the grant reached the ledger after all (an ack lost in a
// stall), the sweeper finds the mark and gives nothing back again.
func (g *Gate) Undo(ctx context.Context, ask quota.Ask, d Decision, urlID string, now time.Time) error {
	if d.Degraded {
		g.local.Take(now, -1, g.degradedBuckets(ask.Buckets)...)
		return nil
	}
	return g.call(ctx, "refund", func(ctx context.Context) error {
		_, err := g.store.Undo(ctx, now, ask, urlID)
		return err
	})
}

// cancel runs one quota.Store.Cancel within the Redis timeout: the
// canceller's attempt.
func (g *Gate) cancel(ctx context.Context, now time.Time, a quota.Ask) (refunded bool, err error) {
	err = g.call(ctx, "cancel", func(ctx context.Context) (err error) {
		refunded, err = g.store.Cancel(ctx, now, a)
		return err
	})
	return refunded, err
}

// finishAttempts is how often finish tries before the URL goes out without
// its replay record: the write is idempotent, and without it a retry of
// the key after the in-flight mark expires would get a second URL.
const finishAttempts = 3

// finishBackoff spaces those tries: a failed call fails every Finish in it
// at once, and their retries should not all land together.
var finishBackoff = backoff.Policy{Min: 50 * time.Millisecond, Max: 200 * time.Millisecond, Jitter: 0.5}

// Finish stores ask's completed idempotency record with the 201 body and the
// grant record, in one step, shared with the tenant's concurrent Finishes
// (quota.FinishCoalescer), retrying a failed write a few times: a failed
// call fails each Finish in it, and each caller retries its own.
func (g *Gate) Finish(ctx context.Context, ask quota.Ask, f quota.Finished) error {
	return g.tryFinish(ctx, func(ctx context.Context) error { return g.finishes.Finish(ctx, ask, f) })
}

// FinishOwn is Finish for a grant that is given back if the write fails (a
// multipart create): quota.Store.FinishOwn, which makes the record done
// only over this request's own in-flight mark, so that a try given up on
// that runs after the undo replays nothing. Not gathered.
func (g *Gate) FinishOwn(ctx context.Context, ask quota.Ask, f quota.Finished) error {
	return g.tryFinish(ctx, func(ctx context.Context) error {
		_, err := g.store.FinishOwn(ctx, ask, f)
		return err
	})
}

// tryFinish runs write up to finishAttempts times, spaced by finishBackoff.
func (g *Gate) tryFinish(ctx context.Context, write func(context.Context) error) error {
	var err error
	for i := range finishAttempts {
		if i > 0 {
			t := time.NewTimer(finishBackoff.Delay(i))
			select {
			case <-ctx.Done():
				t.Stop()
				return err
			case <-t.C:
			}
		}
		if err = g.call(ctx, "complete", write); err == nil {
			return nil
		}
	}
	return err
}

// call runs one store operation within the Redis timeout and observes its
// latency, by name: every Redis call of the signer goes through it. The deadline also cuts short go-redis's dial retries, so an
// unreachable Redis is a 503 within the timeout.
func (g *Gate) call(ctx context.Context, name string, op func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	start := time.Now()
	err := op(ctx)
	g.metrics.ScriptSeconds.WithLabelValues(name).Observe(time.Since(start).Seconds())
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// degradedBuckets are bs shrunk to this instance's share.
func (g *Gate) degradedBuckets(bs []bucket.Bucket) []bucket.Bucket {
	out := make([]bucket.Bucket, len(bs))
	for i, b := range bs {
		out[i] = bucket.Bucket{Key: b.Key, Limit: degradedLimit(b.Limit, g.share), Units: b.Units}
	}
	return out
}

// degradedLimit is the share of a tier each signer instance allows on its
// own while Redis is unavailable (tiers.Share), so that instances × share
// ≤ 1 keeps them together within the real limit (docs/production.md: the
// HPA's maxReplicas × MINTGATE_DEGRADED_SHARE ≤ 1).
func degradedLimit(l bucket.Limit, share float64) bucket.Limit { return tiers.Share(l, share) }
