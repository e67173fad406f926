// Package records keeps the upload records in PostgreSQL (SPEC §10): one
// row per grant in mintgate.uploads, whose status only moves forward, and
// per tenant and minute the signers' tallies in mintgate.tenant_minutes.
// Migrate (the operator's step) applies the schema; a Store reads and
// writes rows as the services' role; a Feed fills them from JetStream (the
// grant ledger and MINTGATE_UPLOADS), at least once and idempotently.
package records

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The statuses of an upload's row, in the order a row may take them.
const (
	Issued    = "issued"
	Verifying = "verifying"
	Completed = "completed"
	Rejected  = "rejected"
	Refunded  = "refunded"
	Aborted   = "aborted"
)

// Statuses is every status, for validating ?status=.
var Statuses = []string{Issued, Verifying, Completed, Rejected, Refunded, Aborted}

// ErrUnavailable wraps every error of a Store: PostgreSQL did not answer
// or refused; nothing the caller holds is lost by retrying.
var ErrUnavailable = errors.New("records: postgres unavailable")

// rank is a status's place in SQL: a row takes a new status only when its
// rank is higher. completed and rejected (the verdict) outrank refunded
// and aborted, so a late completion after a refund is recorded as
// completed (the ledger records the take-back, the done marker wins).
const rank = `CASE %[1]s WHEN 'issued' THEN 0 WHEN 'verifying' THEN 1 WHEN 'refunded' THEN 2 WHEN 'aborted' THEN 2 ELSE 3 END`

// Store reads and writes the rows through a pool of connections.
type Store struct {
	pool *pgxpool.Pool
}

// Open is a Store of the database at url (MINTGATE_POSTGRES_URL). It does
// not wait for the server: a PostgreSQL that is down makes each call fail
// (ErrUnavailable) until it is back.
func Open(ctx context.Context, url string) (*Store, error) {
	cfg, err := parseConfig(url)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("records: MINTGATE_POSTGRES_URL: %w", err)
	}
	return &Store{pool: pool}, nil
}

// parseConfig reads url with bounded waits: a connect never hangs a
// caller longer than 5 s, and a statement never runs longer than 10 s.
func parseConfig(url string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("records: MINTGATE_POSTGRES_URL does not parse (postgres://user:password@host:port/db): %w", errors.Unwrap(err))
	}
	if cfg.ConnConfig.ConnectTimeout == 0 || cfg.ConnConfig.ConnectTimeout > 5*time.Second {
		cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["statement_timeout"]; !ok {
		cfg.ConnConfig.RuntimeParams["statement_timeout"] = "10000"
	}
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = "mintgate"
	}
	cfg.HealthCheckPeriod = 10 * time.Second
	return cfg, nil
}

// Close closes the pool.
func (s *Store) Close() { s.pool.Close() }

// Ping checks that PostgreSQL answers a query (the /readyz check named
// "postgres").
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var one int
	if err := s.pool.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return nil
}

func unavailable(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %s: %w", ErrUnavailable, what, err)
}

// batch sends b and reads every result, closing it.
func (s *Store) batch(ctx context.Context, b *pgx.Batch) error {
	if b.Len() == 0 {
		return nil
	}
	return s.pool.SendBatch(ctx, b).Close()
}
