package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/mintgate/mintgate/shared/grant"
)

// sweeper is the business of one due grant; the consume loop in
// shared/grant does the acking, retrying and terminating around it.
type sweeper struct {
	refunder *refunder
	grace    time.Duration
	metrics  *metrics
	log      *slog.Logger
}

// handle refunds g unless its upload landed or it was refunded before.
// An error leaves the grant for a later delivery.
func (s *sweeper) handle(ctx context.Context, g grant.Grant) error {
	out, err := s.refunder.refund(ctx, g)
	if err != nil {
		return err
	}
	s.metrics.outcome(out)
	late := s.refunder.now().Sub(g.ExpiresAt.Add(s.grace))
	s.metrics.lateness.Observe(late.Seconds())
	s.log.Debug("due grant swept", "urlId", g.URLID, "tenant", g.Tenant, "outcome", out, "late", late)
	return nil
}
