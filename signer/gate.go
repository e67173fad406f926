package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/backoff"
	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/ledger"
	"github.com/mintgate/mintgate/shared/quota"
	"github.com/mintgate/mintgate/shared/tiers"
	"github.com/mintgate/mintgate/signer/internal/identity"
)

// inFlightTTL is how long a request's in-flight mark holds its idempotency
// key: longer than presigning plus the ledger's timeout, short enough that a
// signer that died mid-request frees the key soon.
const inFlightTTL = 30 * time.Second

// attempt is one sign request as the scripts see it.
type attempt struct {
	who     identity.Caller
	req     signRequest
	ask     quota.Ask
	buckets []bucket.Bucket // the caller's tier, the tenant, and for anonymous callers anonymous_all; in shadow mode the caller's ceiling last
	// hard are the buckets that refuse even in shadow mode: the caller's
	// ceiling and, for an anonymous caller, anonymous_all. Nil outside
	// shadow mode.
	hard []bucket.Bucket
}

// newAttempt is who's sign request req under set. shadowCap above 0 puts
// it in shadow mode: a ceiling of shadowCap times the caller's tier is
// spent by every sign and refuses when short (keys.ShadowBucket).
func newAttempt(who identity.Caller, req signRequest, set tiers.Set, shadowCap float64) attempt {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%d", who.Tenant, who.Subject, req.ContentType, req.ContentLength)
	// tiers.Parse guarantees the caller tiers and the tenant tier exist;
	// tiers.Set.For derives anonymous_all when it is not named.
	buckets, _ := set.SignBuckets(who.Tenant, who.Subject, who.Tier)
	// The tiers of bytes, when set, in the same decision: the caller's and
	// the tenant's buckets of bytes, each spending contentLength.
	buckets = append(buckets, set.ByteBuckets(who.Tenant, who.Subject, who.Tier, req.ContentLength)...)
	var hard []bucket.Bucket
	if shadowCap > 0 {
		ceiling := bucket.Bucket{Key: keys.ShadowBucket(who.Tenant, who.Subject), Limit: shadowLimit(buckets[0].Limit, shadowCap)}
		for _, b := range buckets {
			if b.Key == keys.AnonBucket(who.Tenant) {
				hard = append(hard, b)
			}
		}
		hard = append(hard, ceiling)
		buckets = append(buckets, ceiling)
	}
	return attempt{
		who: who,
		req: req,
		ask: quota.Ask{
			Tenant:      who.Tenant,
			Idem:        keys.Idempotency(who.Tenant, who.Subject, req.Key),
			Fingerprint: hex.EncodeToString(h.Sum(nil)),
			Buckets:     buckets,
		},
		buckets: buckets,
		hard:    hard,
	}
}

// spendsBytes is whether a spends from a bucket of bytes.
func (a attempt) spendsBytes() bool {
	for _, b := range a.ask.Buckets {
		if b.Units > 0 {
			return true
		}
	}
	return false
}

// credits are what a refund of the buckets a's Spend charged
// (a.ask.Buckets) gives back: each bucket by its role, with its shape now.
func (a attempt) credits() []ledger.Credit {
	out := make([]ledger.Credit, len(a.ask.Buckets))
	for i, b := range a.ask.Buckets {
		role := ledger.BucketCaller
		switch b.Key {
		case keys.TenantBucket(a.who.Tenant):
			role = ledger.BucketTenant
		case keys.AnonBucket(a.who.Tenant):
			role = ledger.BucketAnonymousAll
		case keys.ShadowBucket(a.who.Tenant, a.who.Subject):
			role = ledger.BucketShadow
		case keys.ByteBucket(a.who.Tenant, a.who.Subject):
			role = ledger.BucketCallerBytes
		case keys.TenantByteBucket(a.who.Tenant):
			role = ledger.BucketTenantBytes
		}
		out[i] = ledger.Credit{Bucket: role, Capacity: b.Limit.Capacity, Refill: b.Limit.Rate, TTL: b.Limit.TTL.Milliseconds(), Units: b.Units}
	}
	return out
}

// decision is the sign script's answer: quota's Outcome (Allowed, Denied,
// Replay, Reused or Pending; the others are errors, see fromSpend) and what
// goes with it.
type decision struct {
	outcome  quota.Outcome
	result   bucket.Result // for allowed and denied
	body     []byte        // for replay
	degraded bool          // decided by the in-process buckets: Redis was unavailable
	shadow   bool          // denied by a bucket that does not refuse in shadow mode, issued on the hard buckets alone (attempt.hard)
}

// gate runs the Redis side of a sign through quota.Store, its Spends
// gathered per tenant by a quota.Coalescer and its Finishes by a
// quota.FinishCoalescer. With local set
// (degraded mode) a Redis outage falls back to in-process buckets at a
// share of the limits instead of failing closed.
type gate struct {
	store    *quota.Store
	spends   *quota.Coalescer       // the Spends of one tenant, in flight at once, share a script call
	finishes *quota.FinishCoalescer // and so do its Finishes
	local    *bucket.Local
	share    float64       // of every limit, for the local buckets (MINTGATE_DEGRADED_SHARE)
	timeout  time.Duration // MINTGATE_REDIS_TIMEOUT, for each call
	metrics  *metrics
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

// newGate is the gate on rdb; a share above 0 turns the degraded mode on.
func newGate(rdb redis.UniversalClient, timeout time.Duration, share float64, m *metrics, log *slog.Logger) *gate {
	g := &gate{store: quota.New(rdb), timeout: timeout, metrics: m, log: log, rdb: rdb, resync: make(chan struct{}, 1)}
	g.spends = quota.NewCoalescer(g.store, 0, 0)
	g.finishes = quota.NewFinishCoalescer(g.store, 0, 0)
	g.until = g.clock.Until
	if share > 0 {
		g.local, g.share = bucket.NewLocal(), share
	}
	return g
}

// decide checks the idempotency record and spends one token from every
// bucket of the attempt (the caller's, the tenant's, and for an anonymous
// caller anonymous_all), all or none, in one round trip, shared with the
// tenant's concurrent signs (quota.Coalescer). An error wraps
// bucket.ErrUnavailable.
func (g *gate) decide(ctx context.Context, a attempt, now time.Time) (decision, error) {
	d, err := g.spend(ctx, a, now)
	if err != nil {
		if spendMayRun(err) {
			// The EVALSHA may sit in a stalled Redis and run after this
			// request has answered: cancel it in the background, so that it
			// takes no token and holds no key (cancel.go). In degraded mode
			// too: the local decision below is charged locally, and the
			// Redis attempt must not charge Redis as well.
			g.cancels.add(a.ask)
		}
		if g.local == nil {
			return decision{}, err
		}
		return g.degrade(a, now, err), nil
	}
	return fromSpend(d)
}

// spend runs the Spend script within the Redis call's deadline.
func (g *gate) spend(ctx context.Context, a attempt, now time.Time) (quota.Decision, error) {
	var d quota.Decision
	err := g.call(ctx, "sign", func(ctx context.Context) (err error) {
		// The Spend may run only until this call gives up, by Redis's
		// clock: one that sat in a stalled Redis and runs after the 503
		// takes nothing. The canceller still covers the one that ran in
		// time and whose reply was lost.
		ask := a.ask
		if dl, ok := ctx.Deadline(); ok {
			ask.Until = g.until(dl)
		}
		d, err = g.spends.Spend(ctx, now, ask, inFlightTTL)
		if err == nil && d.Outcome == quota.Late {
			// Redis answered before our deadline yet judged the Spend late
			// by its own clock: its clock is ahead of the estimate. Nothing
			// was spent; spend without a limit and read its clock again.
			g.metrics.lateSpends.Inc()
			g.askResync()
			ask.Until = time.Time{}
			d, err = g.spends.Spend(ctx, now, ask, inFlightTTL)
		}
		return err
	})
	return d, err
}

// degrade decides with the in-process buckets while Redis is down (err).
func (g *gate) degrade(a attempt, now time.Time, err error) decision {
	g.metrics.degraded.Inc()
	if n, ok := g.degradedLog.allow(time.Now()); ok {
		// Once per degradedLogEvery, not per sign: an outage at full
		// load would write thousands of lines a second.
		g.log.Warn("redis unavailable: deciding with in-process buckets; idempotency is not guaranteed",
			"tenant", a.who.Tenant, "err", err, "degradedSignsSinceLastLine", n)
	}
	res := g.local.Take(now, 1, g.degradedBuckets(a.buckets)...)
	dec := decision{outcome: quota.Denied, result: res, degraded: true}
	if res.Allowed {
		dec.outcome = quota.Allowed
	}
	return dec
}

// fromSpend is the gate's decision for what the Spend script answered.
func fromSpend(d quota.Decision) (decision, error) {
	switch d.Outcome {
	case quota.Allowed, quota.Denied, quota.Replay, quota.Reused, quota.InProgress, quota.LiveFull:
		return decision{outcome: d.Outcome, result: d.Result, body: d.Body}, nil
	case quota.Cancelled:
		// Only a Spend that runs after its own request's Cancel answers
		// this, and that request has had its 503: nobody reads this reply.
		return decision{}, fmt.Errorf("%w: spend found its own request cancelled", bucket.ErrUnavailable)
	case quota.Late:
		// The retry without Until cannot answer this; kept for safety.
		return decision{}, fmt.Errorf("%w: spend ran after its deadline", bucket.ErrUnavailable)
	}
	return decision{}, fmt.Errorf("%w: spend decided %v", bucket.ErrUnavailable, d.Outcome)
}

// syncClock reads Redis's clock at once, then every clockSync and when a
// Spend came back Late, until ctx ends. Until the first read succeeds,
// Spends run without an Until (the canceller alone covers them).
func (g *gate) syncClock(ctx context.Context) {
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

// askResync wakes syncClock without waiting.
func (g *gate) askResync() {
	select {
	case g.resync <- struct{}{}:
	default:
	}
}

// undo gives back the token of an allowed decision whose URL urlID is never
// handed out, frees its idempotency key and marks the grant refunded, in
// one step: if the grant reached the ledger after all (an ack lost in a
// stall), the sweeper finds the mark and gives nothing back again.
func (g *gate) undo(ctx context.Context, a attempt, d decision, urlID string, now time.Time) error {
	if d.degraded {
		g.local.Take(now, -1, g.degradedBuckets(a.ask.Buckets)...)
		return nil
	}
	return g.call(ctx, "refund", func(ctx context.Context) error {
		_, err := g.store.Undo(ctx, now, a.ask, urlID)
		return err
	})
}

// cancel runs one quota.Store.Cancel within the Redis timeout: the
// canceller's attempt.
func (g *gate) cancel(ctx context.Context, now time.Time, a quota.Ask) (refunded bool, err error) {
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

// finish stores the completed idempotency record with the 201 body and the
// grant record, in one step, shared with the tenant's concurrent Finishes
// (quota.FinishCoalescer), retrying a failed write a few times: a failed
// call fails each Finish in it, and each caller retries its own.
func (g *gate) finish(ctx context.Context, a attempt, f quota.Finished) error {
	return g.tryFinish(ctx, func(ctx context.Context) error { return g.finishes.Finish(ctx, a.ask, f) })
}

// finishOwn is finish for a grant that is given back if the write fails (a
// multipart create): quota.Store.FinishOwn, which makes the record done
// only over this request's own in-flight mark, so that a try given up on
// that runs after the undo replays nothing. Not gathered.
func (g *gate) finishOwn(ctx context.Context, a attempt, f quota.Finished) error {
	return g.tryFinish(ctx, func(ctx context.Context) error {
		_, err := g.store.FinishOwn(ctx, a.ask, f)
		return err
	})
}

// tryFinish runs write up to finishAttempts times, spaced by finishBackoff.
func (g *gate) tryFinish(ctx context.Context, write func(context.Context) error) error {
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
// latency. The deadline also cuts short go-redis's dial retries, so an
// unreachable Redis is a 503 within the timeout.
func (g *gate) call(ctx context.Context, name string, op func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	start := time.Now()
	err := op(ctx)
	g.metrics.scriptSeconds.WithLabelValues(name).Observe(time.Since(start).Seconds())
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// degradedBuckets are bs shrunk to this instance's share.
func (g *gate) degradedBuckets(bs []bucket.Bucket) []bucket.Bucket {
	out := make([]bucket.Bucket, len(bs))
	for i, b := range bs {
		out[i] = bucket.Bucket{Key: b.Key, Limit: degradedLimit(b.Limit, g.share), Units: b.Units}
	}
	return out
}
