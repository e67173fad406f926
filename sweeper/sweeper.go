package main

import (
	"context"
	"errors"
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
// not refunded before. An error leaves the whole batch for a later
// delivery; the grants applied already find their markers then.
func (s *sweeper) handle(ctx context.Context, b grant.Batch) error {
	now := s.refunder.now()
	for _, g := range b.Grants {
		out, err := s.sweep(ctx, g, now)
		if err != nil {
			return err
		}
		s.metrics.outcome(out)
		late := s.refunder.now().Sub(g.ExpiresAt.Add(s.grace))
		s.metrics.lateness.Observe(late.Seconds())
		s.log.Debug("due grant swept", "urlId", g.URLID, "tenant", g.Tenant, "batch", b.ID, "outcome", out, "late", late)
	}
	return nil
}

// sweep decides one grant of a verified batch.
func (s *sweeper) sweep(ctx context.Context, g grant.Grant, now time.Time) (string, error) {
	switch {
	case g.Degraded:
		return outcomeDegraded, nil
	case now.Sub(g.ExpiresAt) > staleAfter:
		s.log.Warn("due grant too old to refund exactly once; skipped", "urlId", g.URLID, "tenant", g.Tenant, "expiresAt", g.ExpiresAt)
		return outcomeStale, nil
	}
	out, err := s.refunder.refund(ctx, g)
	if errors.Is(err, grant.ErrMalformed) {
		// The batch is sealed by a signer, so this is a signer's bug: skip
		// this grant, not the refunds of the others in its batch.
		s.log.Error("due grant can never be applied; skipped", "urlId", g.URLID, "err", err)
		return outcomeMalformed, nil
	}
	return out, err
}
