package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/mintgate/mintgate/shared/ledger"
	"github.com/mintgate/mintgate/shared/multipart"
	"github.com/mintgate/mintgate/shared/quota"
	"github.com/mintgate/mintgate/shared/records"
	"github.com/mintgate/mintgate/shared/telemetry"
)

// sweeper is the business of one due batch; the consume loop in
// shared/ledger does the acking, retrying and terminating around it.
type sweeper struct {
	refunder *refunder
	closer   *multipart.Closer // ends multipart grants' uploads before their refund
	grace    time.Duration
	metrics  *metrics
	log      *slog.Logger
	ender    *ender // nil until the ledger opens; publishes refunded events

	feed      *records.Feed       // the upload records' writer; nil: records off
	closeFeed func()              // closes feed's store
	tel       *telemetry.Provider // OTEL_*: each swept grant a span of its upload's trace; nil: off
}

// Outcomes of a grant that the sweeper decides without Redis.
const (
	outcomeDegraded  = "degraded"  // issued from in-process buckets: Redis was never charged
	outcomeShadow    = "shadow"    // issued in shadow mode past a short bucket by an older signer: nothing was charged
	outcomeEarly     = "early"     // delivered before its due time: held until then
	outcomeStale     = "stale"     // older than the refunded marker lives: applying it could credit twice
	outcomeMalformed = "malformed" // names no valid tenant, subject or issuing tier
)

// staleAfter is how long after its issue a grant may still be refunded.
// Every marker of how a grant ended (quota.MarkerTTL) is set at or after
// its issue and lives at least that long, so until then a copy of the
// grant, however late or often it comes, meets the marker of its end and
// moves nothing; past it, that marker may be gone, so the grant is skipped
// and counted instead. The hour is slack for the clocks of the signer, the
// sweeper and Redis. Only a sweeper outage of about a day, or a replayed
// old batch, gets here.
const staleAfter = quota.MarkerTTL - time.Hour

// handle refunds every grant of b whose upload did not land and that was
// not refunded before, in one round trip per batch, each only once it is
// due (ledger.Grant.Due): a grant delivered early — a copy re-published
// before its time, or a server whose clock runs ahead of this sweeper's —
// is left for later, and handle returns ledger.NotDue so that the batch
// comes back then. The grants of b that are due are applied either way. An
// error leaves the whole batch for a later delivery; the grants applied
// already find their markers then.
func (s *sweeper) handle(ctx context.Context, b ledger.Batch) error {
	now := s.refunder.now()
	outs := make([]string, len(b.Grants)) // "" until decided: refundAll applies those
	var notDue time.Time
	for i, g := range b.Grants {
		switch due := g.Due(s.grace); {
		case g.Degraded:
			outs[i] = outcomeDegraded
		case g.Shadow && len(g.Credits) == 0:
			outs[i] = outcomeShadow
		case now.Before(due):
			outs[i] = outcomeEarly
			notDue = later(notDue, due)
		case now.Sub(g.IssuedAt) > staleAfter:
			s.log.Warn("due grant too old to refund exactly once; skipped", "urlId", g.URLID, "tenant", g.Tenant, "issuedAt", g.IssuedAt)
			outs[i] = outcomeStale
		}
	}
	busy, err := s.endUploads(ctx, b.Grants, outs)
	if err != nil {
		return err
	}
	notDue = later(notDue, busy)
	if err := s.refunder.refundAll(ctx, b.Grants, outs); err != nil {
		return err
	}
	applied := s.refunder.now()
	if s.ender != nil {
		if err := s.ender.refunded(ctx, b.Grants, outs, applied); err != nil {
			return err
		}
	}
	s.traceSwept(ctx, b.Grants, outs, now, applied)
	for i, g := range b.Grants {
		switch outs[i] {
		case outcomeEarly:
			continue // counted when it is due
		case outcomeMalformed:
			// The batch is sealed by a signer, so this is a signer's bug:
			// this grant is skipped, not the refunds of the others.
			s.log.Error("due grant can never be applied; skipped", "urlId", g.URLID, "tenant", g.Tenant, "tier", g.Tier, "batch", b.ID)
		}
		s.metrics.outcome(outs[i])
		late := applied.Sub(g.Due(s.grace))
		s.metrics.lateness.Observe(late.Seconds())
		s.log.Debug("due grant swept", "urlId", g.URLID, "tenant", g.Tenant, "batch", b.ID, "outcome", outs[i], "late", late)
	}
	if !notDue.IsZero() {
		return ledger.NotDue(notDue)
	}
	return nil
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
