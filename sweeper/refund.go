package main

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/config"
	"github.com/mintgate/mintgate/shared/grant"
	"github.com/mintgate/mintgate/shared/keys"
)

//go:embed refund.lua
var refundEntry string

var refundScript = bucket.NewScript(refundEntry)

// refundedTTL is how long a refunded marker lives: far longer than any
// redelivery of the same grant can take, and what GET /uploads/{urlId}
// reports as "refunded".
const refundedTTL = 24 * time.Hour

// Outcomes of the refund script.
const (
	outcomeRefunded = "refunded" // a token went back to the caller and the tenant
	outcomeDone     = "done"     // the upload landed: nothing to give back
	outcomeAlready  = "already"  // an earlier delivery refunded it
)

// refunder runs the refund script for one due grant.
type refunder struct {
	rdb   redis.Scripter
	tiers config.TierSet
	now   func() time.Time
}

// refund applies g once, atomically, and says what it found. A grant that
// names no valid tenant, subject or issuing tier wraps grant.ErrMalformed:
// no retry can apply it.
func (r *refunder) refund(ctx context.Context, g grant.Grant) (string, error) {
	if !keys.ValidTenant(g.Tenant) || g.Subject == "" {
		return "", fmt.Errorf("%w: tenant %q, subject %q", grant.ErrMalformed, g.Tenant, g.Subject)
	}
	// Only the tiers a caller's token comes from: never "tenant", and never
	// an unknown name defaulting to some other capacity.
	if g.Tier != config.TierUser && g.Tier != config.TierAnonymous {
		return "", fmt.Errorf("%w: tier %q is not an issuing tier", grant.ErrMalformed, g.Tier)
	}
	// Both capped by this tenant's limits: its overrides, else the defaults.
	caller, ok := r.tiers.For(g.Tenant, g.Tier)
	if !ok {
		return "", fmt.Errorf("%w: tier %q is not configured", grant.ErrMalformed, g.Tier)
	}
	tenantLimit, _ := r.tiers.For(g.Tenant, config.TierTenant) // ParseTiers requires it
	buckets := []bucket.Bucket{
		{Key: keys.Bucket(g.Tenant, g.Subject), Limit: caller},
		{Key: keys.TenantBucket(g.Tenant), Limit: tenantLimit},
	}
	ks := []string{keys.Done(g.Tenant, g.URLID), keys.Refunded(g.Tenant, g.URLID), buckets[0].Key, buckets[1].Key}
	args := bucket.Args([]any{strconv.FormatInt(refundedTTL.Milliseconds(), 10)}, r.now(), -1, buckets)
	out, err := refundScript.Run(ctx, r.rdb, ks, args...).Text()
	if err != nil {
		return "", fmt.Errorf("refund grant %s: %w", g.URLID, err)
	}
	switch out {
	case outcomeRefunded, outcomeDone, outcomeAlready:
		return out, nil
	}
	return "", fmt.Errorf("refund grant %s: script answered %q", g.URLID, out)
}
