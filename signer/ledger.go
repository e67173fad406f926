package main

import (
	"context"
	"fmt"
	"time"

	"github.com/mintgate/mintgate/shared/ledger"
	"github.com/mintgate/mintgate/shared/telemetry"
)

// recorder records an issued grant durably and returns once it is
// acknowledged; the sweeper later refunds it if its URL went unused.
// *ledger.Client is the production one.
type recorder interface {
	Record(ctx context.Context, g ledger.Grant) error
}

// ledgerTimeout bounds the wait for the ledger's ack. It stays well inside
// inFlightTTL, so the in-flight mark outlives any request that holds it.
const ledgerTimeout = 2 * time.Second

// record writes g to the ledger and observes how long the ack took.
func record(ctx context.Context, r recorder, m *metrics, g ledger.Grant) error {
	ctx, cancel := context.WithTimeout(ctx, ledgerTimeout)
	defer cancel()
	ctx, span := recordSpan(ctx)
	start := time.Now()
	err := r.Record(ctx, g)
	telemetry.End(span, err)
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.ledgerSeconds.WithLabelValues(result).Observe(time.Since(start).Seconds())
	if err != nil {
		return fmt.Errorf("record grant %s: %w", g.URLID, err)
	}
	return nil
}
