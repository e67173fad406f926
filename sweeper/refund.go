package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/ledger"
	"github.com/mintgate/mintgate/shared/quota"
	"github.com/mintgate/mintgate/shared/tiers"
)

// refundedTTL is how long a refunded marker lives (quota owns the script
// that sets it): what GET /uploads/{urlId} reports as "refunded", and the
// age past which a grant is too old to refund exactly once.
const refundedTTL = quota.RefundedTTL

// Outcomes of a refund.
const (
	outcomeRefunded = string(quota.Refunded) // a token went back to the caller and the tenant
	outcomeDone     = string(quota.Done)     // the upload landed: nothing to give back
	outcomeAlready  = string(quota.Already)  // refunded before, by an earlier delivery or the signer's undo
)

// refunder applies due grants through quota.Store.
type refunder struct {
	store *quota.Store
	tiers tiers.Set
	live  *tiers.Live // when set, its tiers, not tiers
	now   func() time.Time
}

// refundAll applies the grants of gs whose outs entry is still empty, in
// as few round trips as their tenants allow, and writes what it found for
// each there; the others it leaves as they are. A grant that names no
// valid tenant, subject or issuing tier gets outcomeMalformed and is
// skipped: no retry can apply it, and it must not hold back the others. An
// error means Redis could not answer; some grants may be applied, and a
// retry of them all is safe.
func (r *refunder) refundAll(ctx context.Context, gs []ledger.Grant, outs []string) error {
	var (
		dues []quota.Due
		at   []int // the index in gs of each due
	)
	for i, g := range gs {
		if outs[i] != "" {
			continue
		}
		d, err := r.due(g)
		if err != nil {
			outs[i] = outcomeMalformed
			continue
		}
		dues, at = append(dues, d), append(at, i)
	}
	if len(dues) == 0 {
		return nil
	}
	res, err := r.store.Refund(ctx, r.now(), dues)
	switch {
	case err != nil && !errors.Is(err, quota.ErrUnavailable):
		// quota refused an input due() let through: find it, apply the
		// rest one by one.
		for j, d := range dues {
			res, err := r.store.Refund(ctx, r.now(), []quota.Due{d})
			switch {
			case errors.Is(err, quota.ErrUnavailable):
				return fmt.Errorf("refund grant %s: %w", gs[at[j]].URLID, err)
			case err != nil:
				outs[at[j]] = outcomeMalformed
			default:
				outs[at[j]] = string(res[0])
			}
		}
	case err != nil:
		return fmt.Errorf("refund %d grants: %w", len(dues), err)
	default:
		for j, o := range res {
			outs[at[j]] = string(o)
		}
	}
	return nil
}

// due is what quota needs to refund g: every bucket its sign spent from,
// each capped by the shape it had at issue. A grant carries both
// (ledger.Credits); one from an older signer carries neither, and its
// buckets are its tier's and this tenant's shape of them from the
// sweeper's own tiers (the anonymous_all bucket too, for an anonymous
// grant).
func (r *refunder) due(g ledger.Grant) (quota.Due, error) {
	if !keys.ValidTenant(g.Tenant) || g.Subject == "" {
		return quota.Due{}, fmt.Errorf("%w: tenant %q, subject %q", ledger.ErrMalformed, g.Tenant, g.Subject)
	}
	// Only the tiers a caller's token comes from: never "tenant", and never
	// an unknown name defaulting to some other capacity.
	if g.Tier != tiers.User && g.Tier != tiers.Anonymous {
		return quota.Due{}, fmt.Errorf("%w: tier %q is not an issuing tier", ledger.ErrMalformed, g.Tier)
	}
	if len(g.Credits) > 0 {
		buckets, err := credited(g)
		if err != nil {
			return quota.Due{}, err
		}
		return quota.Due{Tenant: g.Tenant, URLID: g.URLID, Buckets: buckets}, nil
	}
	set := r.tiers
	if r.live != nil {
		set = r.live.Tiers()
	}
	buckets, ok := set.SignBuckets(g.Tenant, g.Subject, g.Tier)
	if !ok {
		return quota.Due{}, fmt.Errorf("%w: tier %q is not configured", ledger.ErrMalformed, g.Tier)
	}
	return quota.Due{Tenant: g.Tenant, URLID: g.URLID, Buckets: tiers.Plain(buckets)}, nil
}

// credited is the buckets g's credits name, each with its shape at issue
// (ledger.Buckets: a grant only ever credits its own caller and tenant).
func credited(g ledger.Grant) ([]bucket.Bucket, error) {
	bs, err := ledger.Buckets(g.Tenant, g.Subject, g.Tier == tiers.Anonymous, g.Credits)
	if err != nil {
		return nil, fmt.Errorf("grant %s: %w", g.URLID, err)
	}
	return bs, nil
}
