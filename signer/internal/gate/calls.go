package gate

import (
	"context"
	"time"

	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/quota"
)

// The Redis calls of the routes besides a sign's, one method each. Every
// one runs through call: bounded by MINTGATE_REDIS_TIMEOUT (within the
// route's own budget, when it has one) and observed in
// mintgate_signer_redis_script_seconds under its name.

// Peek is what buckets of tenant hold at now, spending nothing: one Result
// per bucket.
func (g *Gate) Peek(ctx context.Context, now time.Time, tenant string, buckets []bucket.Bucket) (res []bucket.Result, err error) {
	err = g.call(ctx, "peek", func(ctx context.Context) (err error) {
		res, err = g.store.Peek(ctx, now, tenant, buckets)
		return err
	})
	return res, err
}

// Refill fills tenant's bucket key to its capacity at once (the admin
// API's reset).
func (g *Gate) Refill(ctx context.Context, tenant, key string) error {
	return g.call(ctx, "refill", func(ctx context.Context) error { return g.store.Refill(ctx, tenant, key) })
}

// Status is grant urlID's record and markers.
func (g *Gate) Status(ctx context.Context, tenant, urlID string) (st quota.Status, err error) {
	err = g.call(ctx, "status", func(ctx context.Context) (err error) {
		st, err = g.store.Status(ctx, tenant, urlID)
		return err
	})
	return st, err
}

// ClaimComplete claims multipart grant urlID for a complete, for lease.
func (g *Gate) ClaimComplete(ctx context.Context, tenant, urlID string, lease time.Duration) (cl quota.Closing, err error) {
	err = g.call(ctx, "claim_complete", func(ctx context.Context) (err error) {
		cl, err = g.store.ClaimComplete(ctx, tenant, urlID, lease)
		return err
	})
	return cl, err
}

// Release gives up a complete's claim on grant urlID.
func (g *Gate) Release(ctx context.Context, tenant, urlID string) error {
	return g.call(ctx, "release", func(ctx context.Context) error { return g.store.Release(ctx, tenant, urlID) })
}

// Complete sets a grant's done marker as c says (quota.Store.Complete).
func (g *Gate) Complete(ctx context.Context, now time.Time, c quota.Completion) (got quota.Completed, err error) {
	err = g.call(ctx, "complete_upload", func(ctx context.Context) (err error) {
		got, err = g.store.Complete(ctx, now, c)
		return err
	})
	return got, err
}

// ClaimAbort claims multipart grant urlID for an abort, for good.
func (g *Gate) ClaimAbort(ctx context.Context, tenant, urlID string) (cl quota.Closing, err error) {
	err = g.call(ctx, "claim_abort", func(ctx context.Context) (err error) {
		cl, err = g.store.ClaimAbort(ctx, tenant, urlID)
		return err
	})
	return cl, err
}

// Refund gives back what each of dues owes, each once (quota.Store.Refund).
func (g *Gate) Refund(ctx context.Context, now time.Time, dues []quota.Due) (outs []quota.RefundOutcome, err error) {
	err = g.call(ctx, "abort", func(ctx context.Context) (err error) {
		outs, err = g.store.Refund(ctx, now, dues)
		return err
	})
	return outs, err
}

// Keep stores body as the answer of ask's same-key replays for ttl
// (quota.Store.Keep): a download grant's idempotency record.
func (g *Gate) Keep(ctx context.Context, ask quota.Ask, body []byte, ttl time.Duration) error {
	return g.call(ctx, "keep", func(ctx context.Context) error { return g.store.Keep(ctx, ask, body, ttl) })
}
