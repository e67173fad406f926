package main

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/config"
	"github.com/mintgate/mintgate/shared/keys"
)

var (
	//go:embed sign.lua
	signEntry string
	//go:embed refund.lua
	refundEntry string
	//go:embed complete.lua
	completeSrc string
)

// inFlightTTL is how long a request's in-flight mark holds its idempotency
// key: longer than presigning plus the ledger's timeout, short enough that a
// signer that died mid-request frees the key soon.
const inFlightTTL = 30 * time.Second

// grantRecordMargin keeps the grant record well past the sweeper's check, so
// GET /uploads/{urlId} can still say "refunded" or "completed" after it.
const grantRecordMargin = time.Hour

// outcome is what the sign script decided.
type outcome int

const (
	allowed outcome = iota // a token was spent and the key marked in flight
	denied                 // a bucket is short: 429
	replay                 // the key completed with the same request: replay its body
	reused                 // the key belongs to a different request: 422
	pending                // the key's first request is still in flight: 409
)

// attempt is one sign request as the scripts see it.
type attempt struct {
	who     caller
	req     signRequest
	fp      string          // fingerprint of what was asked
	idem    string          // idempotency record key
	buckets []bucket.Bucket // the caller's tier, the tenant, and for anonymous callers anonymous_all
}

func newAttempt(who caller, req signRequest, tiers config.TierSet) attempt {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%d", who.Tenant, who.Subject, req.ContentType, req.ContentLength)
	a := attempt{
		who:  who,
		req:  req,
		fp:   hex.EncodeToString(h.Sum(nil)),
		idem: keys.Idempotency(who.Tenant, who.Subject, req.Key),
	}
	add := func(key, tier string) {
		// ParseTiers guarantees the caller tiers and the tenant tier exist;
		// TierSet.For derives anonymous_all when it is not named.
		l, _ := tiers.For(who.Tenant, tier)
		a.buckets = append(a.buckets, bucket.Bucket{Key: key, Limit: l})
	}
	add(keys.Bucket(who.Tenant, who.Subject), who.Tier)
	add(keys.TenantBucket(who.Tenant), config.TierTenant)
	if who.Tier == config.TierAnonymous {
		// Every anonymous sign also spends from one bucket per tenant: an
		// IPv6 caller has a fresh /64, and so a fresh anonymous bucket, for
		// each of the 256 in a home /56 (65 536 in a tunnel broker's /48).
		add(keys.AnonBucket(who.Tenant), config.TierAnonymousAll)
	}
	return a
}

// keys is the sign and refund scripts' KEYS: the idempotency record, then
// every bucket.
func (a attempt) keys() []string {
	ks := []string{a.idem}
	for _, b := range a.buckets {
		ks = append(ks, b.Key)
	}
	return ks
}

// decision is the sign script's answer.
type decision struct {
	outcome  outcome
	result   bucket.Result // for allowed and denied
	body     []byte        // for replay
	degraded bool          // decided by the in-process buckets: Redis was unavailable
}

// gate runs the signer's three Redis scripts. With local set (degraded
// mode) a Redis outage falls back to in-process buckets at a share of the
// limits instead of failing closed.
type gate struct {
	rdb      redis.Scripter
	sign     *redis.Script
	refund   *redis.Script
	complete *redis.Script
	local    *bucket.Local
	share    float64       // of every limit, for the local buckets (MINTGATE_DEGRADED_SHARE)
	timeout  time.Duration // MINTGATE_REDIS_TIMEOUT, for the whole call
	metrics  *metrics
	log      *slog.Logger
}

// newGate is the gate on rdb; a share above 0 turns the degraded mode on.
func newGate(rdb redis.Scripter, timeout time.Duration, share float64, m *metrics, log *slog.Logger) *gate {
	g := &gate{
		rdb:      rdb,
		timeout:  timeout,
		sign:     bucket.NewScript(signEntry),
		refund:   bucket.NewScript(refundEntry),
		complete: redis.NewScript(completeSrc),
		metrics:  m,
		log:      log,
	}
	if share > 0 {
		g.local, g.share = bucket.NewLocal(), share
	}
	return g
}

// decide checks the idempotency record and spends one token from every
// bucket of the attempt (the caller's, the tenant's, and for an anonymous
// caller anonymous_all), all or none, in one round trip. An error wraps
// bucket.ErrUnavailable.
func (g *gate) decide(ctx context.Context, a attempt, now time.Time) (decision, error) {
	args := bucket.Args([]any{a.fp, inFlightTTL.Milliseconds()}, now, 1, a.buckets)
	vals, err := g.run(ctx, "sign", g.sign, a.keys(), args)
	if err != nil {
		if g.local == nil {
			return decision{}, err
		}
		g.metrics.degraded.Inc()
		g.log.Warn("redis unavailable: deciding with in-process buckets; idempotency is not guaranteed", "tenant", a.who.Tenant, "err", err)
		res := g.local.Take(now, 1, g.degradedBuckets(a.buckets)...)
		d := decision{outcome: denied, result: res, degraded: true}
		if res.Allowed {
			d.outcome = allowed
		}
		return d, nil
	}
	if s, ok := vals[0].(string); ok {
		switch {
		case s == "reused":
			return decision{outcome: reused}, nil
		case s == "pending":
			return decision{outcome: pending}, nil
		case s == "replay" && len(vals) == 2:
			body, _ := vals[1].(string)
			return decision{outcome: replay, body: []byte(body)}, nil
		}
		return decision{}, fmt.Errorf("%w: sign script replied %q", bucket.ErrUnavailable, s)
	}
	res, err := bucket.ParseResult(vals)
	if err != nil {
		return decision{}, fmt.Errorf("%w: %w", bucket.ErrUnavailable, err)
	}
	d := decision{outcome: denied, result: res}
	if res.Allowed {
		d.outcome = allowed
	}
	return d, nil
}

// undo gives back the token of an allowed decision and frees its
// idempotency key, in one step.
func (g *gate) undo(ctx context.Context, a attempt, d decision, now time.Time) error {
	if d.degraded {
		g.local.Take(now, -1, g.degradedBuckets(a.buckets)...)
		return nil
	}
	args := bucket.Args([]any{a.fp}, now, -1, a.buckets)
	_, err := g.run(ctx, "refund", g.refund, a.keys(), args)
	return err
}

// finish stores the completed idempotency record with the 201 body and the
// grant record, in one step.
func (g *gate) finish(ctx context.Context, a attempt, urlID string, body []byte, expiresAt time.Time, ttl, grace time.Duration) error {
	args := []any{a.fp, body, ttl.Milliseconds(), expiresAt.UnixMilli(), a.who.Subject, (ttl + grace + grantRecordMargin).Milliseconds()}
	_, err := g.run(ctx, "complete", g.complete, []string{a.idem, keys.Grant(a.who.Tenant, urlID)}, args)
	return err
}

// run is Script.Run (EVALSHA, then EVAL on NOSCRIPT) with its latency
// observed and its errors wrapped as bucket.ErrUnavailable. The deadline
// also cuts short go-redis's dial retries, so an unreachable Redis is a
// 503 within the timeout.
func (g *gate) run(ctx context.Context, name string, s *redis.Script, keys []string, args []any) ([]any, error) {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	start := time.Now()
	v, err := s.Run(ctx, g.rdb, keys, args...).Result()
	g.metrics.scriptSeconds.WithLabelValues(name).Observe(time.Since(start).Seconds())
	if err != nil {
		return nil, fmt.Errorf("%w: %s script: %w", bucket.ErrUnavailable, name, err)
	}
	if vals, ok := v.([]any); ok && len(vals) > 0 {
		return vals, nil
	}
	if n, ok := v.(int64); ok {
		return []any{n}, nil
	}
	return nil, fmt.Errorf("%w: %s script: unexpected reply %T", bucket.ErrUnavailable, name, v)
}

// degradedBuckets are bs shrunk to this instance's share.
func (g *gate) degradedBuckets(bs []bucket.Bucket) []bucket.Bucket {
	out := make([]bucket.Bucket, len(bs))
	for i, b := range bs {
		out[i] = bucket.Bucket{Key: b.Key, Limit: degradedLimit(b.Limit, g.share)}
	}
	return out
}
