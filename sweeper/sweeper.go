package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/mintgate/mintgate/shared/grant"
)

// sweeper is the business of one due batch; the consume loop in
// shared/grant does the acking, retrying and terminating around it.
type sweeper struct {
	refunder *refunder
	grace    time.Duration
	metrics  *metrics
	log      *slog.Logger
}

// Outcomes of a grant that the sweeper decides without Redis.
const (
	outcomeDegraded  = "degraded"  // issued from in-process buckets: Redis was never charged
	outcomeShadow    = "shadow"    // issued in shadow mode past a short bucket: nothing was charged
	outcomeStale     = "stale"     // older than the refunded marker lives: applying it could credit twice
	outcomeMalformed = "malformed" // names no valid tenant, subject or issuing tier
)

// staleAfter is how long after its expiry a grant may still be refunded.
// Past it, the refunded marker of an earlier application (or of the
// signer's undo) may have expired, so a refund could be a second one; the
// grant is skipped and counted instead. Only a sweeper outage of about a
// day, or a replayed old batch, gets here.
const staleAfter = refundedTTL - time.Hour

// handle refunds every grant of b whose upload did not land and that was
// not refunded before, in one round trip per batch. An error leaves the
// whole batch for a later delivery; the grants applied already find their
// markers then.
func (s *sweeper) handle(ctx context.Context, b grant.Batch) error {
	now := s.refunder.now()
	outs := make([]string, len(b.Grants))
	var live []grant.Grant
	var at []int
	for i, g := range b.Grants {
		switch {
		case g.Degraded:
			outs[i] = outcomeDegraded
		case g.Shadow:
			outs[i] = outcomeShadow
		case now.Sub(g.ExpiresAt) > staleAfter:
			s.log.Warn("due grant too old to refund exactly once; skipped", "urlId", g.URLID, "tenant", g.Tenant, "expiresAt", g.ExpiresAt)
			outs[i] = outcomeStale
		default:
			live = append(live, g)
			at = append(at, i)
		}
	}
	if len(live) > 0 {
		res, err := s.refunder.refundAll(ctx, live)
		if err != nil {
			return err
		}
		for j, o := range res {
			outs[at[j]] = o
		}
	}
	applied := s.refunder.now()
	for i, g := range b.Grants {
		if outs[i] == outcomeMalformed {
			// The batch is sealed by a signer, so this is a signer's bug:
			// this grant is skipped, not the refunds of the others.
			s.log.Error("due grant can never be applied; skipped", "urlId", g.URLID, "tenant", g.Tenant, "tier", g.Tier, "batch", b.ID)
		}
		s.metrics.outcome(outs[i])
		late := applied.Sub(g.ExpiresAt.Add(s.grace))
		s.metrics.lateness.Observe(late.Seconds())
		s.log.Debug("due grant swept", "urlId", g.URLID, "tenant", g.Tenant, "batch", b.ID, "outcome", outs[i], "late", late)
	}
	return nil
}
