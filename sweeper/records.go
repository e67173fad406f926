package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/mintgate/mintgate/shared/events"
	"github.com/mintgate/mintgate/shared/ledger"
	"github.com/mintgate/mintgate/shared/ops"
	"github.com/mintgate/mintgate/shared/records"
)

// The upload records' writer runs in the sweeper (docs/architecture.md,
// "Upload records"): it holds the grant secret, so only grants a signer
// sealed become rows, and its trim of the ledger is the one that must keep
// the due messages the feed has not written (ledger.WithTrimHold). With
// MINTGATE_POSTGRES_URL unset none of this runs.

// openRecords is the records' feed of cfg (not started), and what closes
// its store; a nil feed when records are off. It never waits for
// PostgreSQL.
func openRecords(ctx context.Context, cfg settings, log *slog.Logger) (*records.Feed, func(), error) {
	if cfg.Postgres == "" {
		return nil, func() {}, nil
	}
	st, err := records.Open(ctx, cfg.Postgres)
	if err != nil {
		return nil, nil, err
	}
	return &records.Feed{Store: st, Secrets: [][]byte{cfg.Secret, cfg.Previous}, Log: log}, st.Close, nil
}

// recordsCheck is the /readyz check "postgres" of the feed, none when
// records are off.
func recordsCheck(feed *records.Feed) []ops.Check {
	if feed == nil {
		return nil
	}
	return []ops.Check{{Name: "postgres", Ping: feed.Ping}}
}

// ender publishes a refunded event of each grant the sweeper refunded
// (now or before): the records' feed moves its row to refunded. Its
// Nats-Msg-Id ("refunded:<urlId>") makes a redelivered batch's second
// publish a duplicate the stream drops.
type ender struct {
	pub     *events.Publisher
	log     *slog.Logger
	skipped atomic.Bool // the stream lacks the subject: said once
}

// refunded publishes the events of gs whose outcome is refunded or
// already, before the batch is acked. An error leaves the batch for a
// later delivery (the refunds are applied and answer already then). A
// stream that is missing or does not take the subject yet (an upgrade
// before its operator step) is logged once and skipped: refunds never
// wait for it (those rows stay issued).
//
// A SIGKILL at any line: before a publish, the redelivered batch finds
// the refunds applied (already) and publishes; after, its publish is a
// duplicate.
func (e *ender) refunded(ctx context.Context, gs []ledger.Grant, outs []string, now time.Time) error {
	for i, g := range gs {
		if outs[i] != outcomeRefunded && outs[i] != outcomeAlready {
			continue
		}
		_, err := e.pub.PublishRefunded(ctx, events.Ended{URLID: g.URLID, Tenant: g.Tenant, Key: g.Key, At: now.UTC()})
		switch {
		case errors.Is(err, events.ErrNoSubject), errors.Is(err, events.ErrStreamMissing):
			if !e.skipped.Swap(true) {
				e.log.Warn("refunded events not published: the uploads stream lacks their subject (run the operator step)", "err", err)
			}
			return nil
		case err != nil:
			return fmt.Errorf("refunded event %s: %w", g.URLID, err)
		}
	}
	return nil
}
