package ledger

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mintgate/mintgate/shared/schedule"
)

// Record stores g in the ledger and returns once the batch that carries it
// is acknowledged: the grants of concurrent calls share one message (see
// committer), due at the latest expiry among them plus Grace. Every error
// wraps ErrUnavailable; after one, the grant may still have been stored
// (an ack lost in a stall), so the caller's undo must leave a mark the
// sweeper honours.
func (l *Client) Record(ctx context.Context, g Grant) error {
	if !validToken(g.URLID) {
		return fmt.Errorf("%w: %w: urlId %q is not a subject token", ErrUnavailable, ErrInvalidGrant, g.URLID)
	}
	if g.ExpiresAt.IsZero() {
		return fmt.Errorf("%w: %w: grant %s has no expiresAt", ErrUnavailable, ErrInvalidGrant, g.URLID)
	}
	if g.DueAt.IsZero() {
		g.DueAt = g.ExpiresAt.Add(l.cfg.Grace)
	}
	// Fail now, not at the timeout, while the connection is down.
	if st := l.nc.Status(); st != nats.CONNECTED {
		return fmt.Errorf("%w: nats connection %s", ErrUnavailable, strings.ToLower(st.String()))
	}
	l.commitOnce.Do(func() {
		cfg := commitConfig(l.cfg.Window, l.cfg.MaxBatch, l.cfg.MaxInFlight, l.cfg.MinGap)
		l.commit = newCommitter(cfg, uuid.NewString, l.publish)
	})
	if err := l.commit.record(ctx, g); err != nil {
		return fmt.Errorf("%w: record grant %s: %w", ErrUnavailable, g.URLID, err)
	}
	return nil
}

// publish sends one sealed batch, scheduled at its due time on its own
// subject, and waits for the stream's ack.
func (l *Client) publish(b Batch) error {
	if st := l.nc.Status(); st != nats.CONNECTED {
		return fmt.Errorf("nats connection %s", strings.ToLower(st.String()))
	}
	body, err := Seal(l.cfg.Secret, b)
	if err != nil {
		return err
	}
	msg := &nats.Msg{
		Subject: SubjectSchedPrefix + b.ID,
		Header:  nats.Header{},
		Data:    body,
	}
	msg.Header.Set(jetstream.MsgIDHeader, b.ID)
	msg.Header.Set(jetstream.ScheduleHeader, schedule.At(b.DueAt(l.cfg.Grace)))
	msg.Header.Set(jetstream.ScheduleTargetHeader, SubjectDue)
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.PublishTimeout)
	defer cancel()
	// No retries on "no responders": a missing stream is an outage to report now.
	if _, err := l.js.PublishMsg(ctx, msg, jetstream.WithExpectStream(l.cfg.Stream), jetstream.WithRetryAttempts(0)); err != nil {
		return fmt.Errorf("publish batch %s of %d grants: %w", b.ID, len(b.Grants), err)
	}
	return nil
}

// validToken reports whether s can be one subject token.
func validToken(s string) bool {
	if s == "" || len(s) > 255 {
		return false
	}
	for _, r := range s {
		if r <= ' ' || r == '.' || r == '*' || r == '>' || r == 0x7f {
			return false
		}
	}
	return true
}
