package records

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mintgate/mintgate/shared/backoff"
	"github.com/mintgate/mintgate/shared/events"
	"github.com/mintgate/mintgate/shared/ledger"
)

// Durable is the name of the feed's consumer on both streams; the
// sweepers' trim of the ledger keeps every due message it has not acked
// (ledger.WithTrimHold).
const Durable = "records"

// The feed's pulls: up to fetchBatch messages, waiting at most fetchWait
// for the first; a message held while PostgreSQL is down is kept from
// redelivery (InProgress) every retry, well inside ackWait.
const (
	fetchBatch = 256
	fetchWait  = time.Second
	ackWait    = 30 * time.Second
	retryMax   = 5 * time.Second
)

// Feed writes the rows from JetStream: the grants of the ledger
// (MINTGATE_GRANTS, its schedule and due messages: a grant is read when
// signed, or, had the feed been away past its firing, when due) and the
// events of MINTGATE_UPLOADS (completed, rejected, refunded, aborted, and
// the signers' tallies). A message is acked only once its rows are
// written, so PostgreSQL down for any time loses nothing: the feed holds
// its batch, retries, and catches up. Every write is idempotent (a
// status only moves forward; a tally's ID is applied once), so a
// redelivery after a SIGKILL at any line counts nothing twice.
type Feed struct {
	Store   *Store
	JS      jetstream.JetStream
	Secrets [][]byte // the grant secret, and the previous one in a rotation
	Log     *slog.Logger
	// Behind is set while a write fails (PostgreSQL down): /readyz names
	// "postgres" then.
	behind atomic.Bool
}

// Ping is the feed's /readyz check "postgres": PostgreSQL answers and no
// write is failing.
func (f *Feed) Ping(ctx context.Context) error {
	if err := f.Store.Ping(ctx); err != nil {
		return err
	}
	if f.behind.Load() {
		return fmt.Errorf("%w: the last write failed; retrying", ErrUnavailable)
	}
	return nil
}

// Run consumes both streams until ctx ends.
func (f *Feed) Run(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.run(ctx, ledger.DefaultStream, []string{ledger.SubjectSchedPrefix + ">", ledger.SubjectDue}, f.applyGrants)
	}()
	f.run(ctx, events.Stream, []string{events.SubjectPrefix + ">", events.RejectedPrefix + ">",
		events.RefundedPrefix + ">", events.AbortedPrefix + ">", events.TalliesPrefix + ">"}, f.applyEvents)
	<-done
}

// run opens the durable on stream (retrying while the stream is missing
// or NATS is away) and applies what it pulls until ctx ends.
func (f *Feed) run(ctx context.Context, stream string, subjects []string, apply func(context.Context, []jetstream.Msg) error) {
	cfg := jetstream.ConsumerConfig{
		Durable: Durable, Description: "mintgate upload records (PostgreSQL)", FilterSubjects: subjects,
		DeliverPolicy: jetstream.DeliverAllPolicy, AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait,
		MaxAckPending: 4 * fetchBatch, MaxDeliver: -1,
	}
	for n := 1; ctx.Err() == nil; n++ {
		cons, err := f.JS.CreateOrUpdateConsumer(ctx, stream, cfg)
		if err != nil {
			f.Log.Warn("records: the feed cannot open its consumer; retrying", "stream", stream, "err", err)
			sleep(ctx, retry.Delay(n))
			continue
		}
		f.pull(ctx, cons, apply)
	}
}

// pull fetches and applies batches until ctx ends or the consumer fails.
func (f *Feed) pull(ctx context.Context, cons jetstream.Consumer, apply func(context.Context, []jetstream.Msg) error) {
	for ctx.Err() == nil {
		batch, err := cons.Fetch(fetchBatch, jetstream.FetchMaxWait(fetchWait))
		if err != nil {
			f.Log.Warn("records: fetch failed", "err", err)
			sleep(ctx, time.Second)
			return
		}
		var msgs []jetstream.Msg
		for m := range batch.Messages() {
			msgs = append(msgs, m)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && len(msgs) == 0 {
			if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrConsumerDeleted) {
				return
			}
		}
		if len(msgs) == 0 {
			continue
		}
		f.write(ctx, msgs, apply)
	}
}

// write applies msgs until it succeeds or ctx ends, then acks them. While
// it fails the messages are held (kept from redelivery), never acked.
// A SIGKILL before the acks: the messages come again after ackWait, and
// writing them again changes nothing.
func (f *Feed) write(ctx context.Context, msgs []jetstream.Msg, apply func(context.Context, []jetstream.Msg) error) {
	for n := 1; ; n++ {
		err := apply(ctx, msgs)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return // not acked: redelivered to the next feed
		}
		if !f.behind.Swap(true) || n%20 == 0 {
			f.Log.Warn("records: writing rows failed; holding them and retrying", "messages", len(msgs), "err", err)
		}
		sleep(ctx, retry.Delay(n))
		for _, m := range msgs {
			_ = m.InProgress()
		}
	}
	if f.behind.Swap(false) {
		f.Log.Info("records: writing rows again")
	}
	for _, m := range msgs {
		_ = m.Ack()
	}
}

// applyGrants writes the grants of the ledger's messages. One that does
// not verify under the secret is terminated and logged, never written.
func (f *Feed) applyGrants(ctx context.Context, msgs []jetstream.Msg) error {
	var gs []ledger.Grant
	for _, m := range msgs {
		b, err := ledger.UnsealAny(m.Data(), f.Secrets...)
		if err != nil {
			f.Log.Error("records: a ledger message does not verify; skipped", "subject", m.Subject(), "err", err)
			_ = m.Term()
			continue
		}
		gs = append(gs, b.Grants...)
	}
	return f.Store.PutGrants(ctx, gs)
}

// applyEvents writes the rows' moves and the tallies of the events.
func (f *Feed) applyEvents(ctx context.Context, msgs []jetstream.Msg) error {
	var ts []Transition
	for _, m := range msgs {
		t, tally, err := decode(m.Subject(), m.Data())
		switch {
		case err != nil:
			f.Log.Error("records: an event does not decode; skipped", "subject", m.Subject(), "err", err)
		case tally != nil:
			if err := f.Store.AddTally(ctx, *tally); err != nil {
				return err
			}
		default:
			ts = append(ts, t)
		}
	}
	return f.Store.Move(ctx, ts)
}

// decode reads one event of MINTGATE_UPLOADS by its subject.
func decode(subject string, data []byte) (Transition, *Tally, error) {
	switch {
	case strings.HasPrefix(subject, events.SubjectPrefix):
		var ev events.Event
		err := json.Unmarshal(data, &ev)
		return Transition{URLID: ev.URLID, Tenant: ev.Tenant, Key: ev.Key, Status: Completed, Size: ev.Size,
			Checksum: ev.ChecksumSHA256, At: ev.CompletedAt}, nil, checkID(ev.URLID, err)
	case strings.HasPrefix(subject, events.RejectedPrefix):
		var ev events.Rejected
		err := json.Unmarshal(data, &ev)
		return Transition{URLID: ev.URLID, Tenant: ev.Tenant, Key: ev.Key, Status: Rejected, Reason: ev.Reason,
			Size: ev.Size, Checksum: ev.ChecksumSHA256, At: ev.RejectedAt}, nil, checkID(ev.URLID, err)
	case strings.HasPrefix(subject, events.RefundedPrefix), strings.HasPrefix(subject, events.AbortedPrefix):
		var ev events.Ended
		err := json.Unmarshal(data, &ev)
		st := Refunded
		if strings.HasPrefix(subject, events.AbortedPrefix) {
			st = Aborted
		}
		return Transition{URLID: ev.URLID, Tenant: ev.Tenant, Key: ev.Key, Status: st, At: ev.At}, nil, checkID(ev.URLID, err)
	case strings.HasPrefix(subject, events.TalliesPrefix):
		var t Tally
		if err := json.Unmarshal(data, &t); err != nil || t.ID == "" {
			return Transition{}, nil, fmt.Errorf("tally: %w", err)
		}
		return Transition{}, &t, nil
	}
	return Transition{}, nil, fmt.Errorf("unknown subject %s", subject)
}

// checkID refuses an event whose urlId is no uuid (the column's type):
// writing it would fail the whole batch forever.
func checkID(id string, err error) error {
	if err != nil {
		return err
	}
	if len(id) != 36 || strings.Count(id, "-") != 4 {
		return fmt.Errorf("urlId %q is not a uuid", id)
	}
	return nil
}

// retry is the feed's wait between tries: 100 ms doubling to 5 s.
var retry = backoff.Policy{Min: 100 * time.Millisecond, Max: retryMax, Jitter: 0.2}

func sleep(ctx context.Context, d time.Duration) { _ = backoff.Sleep(ctx, d) }
