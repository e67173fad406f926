package webhook

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mintgate/mintgate/shared/schedule"
)

// rescueAfter is how long past its time a retry's schedule may wait for
// the server to fire it before the deliverer fires it itself.
const rescueAfter = 30 * time.Second

// rescueEvery is how often the deliverer looks for such schedules.
const rescueEvery = 15 * time.Second

// rescuePass bounds the schedules one look reads; the next look goes on
// from where it stopped.
const rescuePass = 512

// rescueLoop fires, until ctx ends, the retries' schedules the server has
// not fired rescueAfter past their time: it publishes each on its due
// subject and then deletes the schedule.
//
// Why: as the grant ledger found (shared/ledger/rescue.go), on a
// replicated stream a fire whose proposal is lost leaves the schedule
// marked in flight on a leader that stays leader, and nothing fires it
// again: a webhook would wait forever. Safe in every order: a schedule
// fired by the server too, or a crash between the publish and the delete,
// gives one more try with the same webhook-id, never a lost one.
//
// Retries wait from seconds to hours, so due times do not rise with the
// stream sequence: each look walks the schedules from a cursor, at most
// rescuePass of them, and wraps around.
func (d *Deliverer) rescueLoop(ctx context.Context) {
	t := time.NewTicker(rescueEvery)
	defer t.Stop()
	cursor := uint64(1)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		lctx, cancel := context.WithTimeout(ctx, rescueEvery)
		cursor, _ = d.rescue(lctx, cursor, time.Now(), rescuePass)
		cancel()
	}
}

// Rescue fires every retry whose schedule is rescueAfter past its time at
// now, as the deliverer's own loop does every rescueEvery, and returns how
// many it fired.
func (d *Deliverer) Rescue(ctx context.Context, now time.Time) int {
	seq, fired := uint64(1), 0
	for seq > 0 {
		next, n := d.rescue(ctx, seq, now, rescuePass)
		fired += n
		if next <= seq || next == 1 {
			return fired
		}
		seq = next
	}
	return fired
}

// rescue is one look from seq, of at most limit schedules; it returns
// where the next one starts (1 at the end: over again) and how many it
// fired.
func (d *Deliverer) rescue(ctx context.Context, seq uint64, now time.Time, limit int) (next uint64, fired int) {
	s, err := d.js.Stream(ctx, Stream)
	if err != nil {
		return seq, 0
	}
	cutoff := now.Add(-rescueAfter)
	for range limit {
		m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(SchedPrefix+">"))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return 1, fired // the end: the next look starts over
		}
		if err != nil {
			d.log.Warn("webhooks: looking for overdue retries failed; trying again later", "err", err)
			return seq, fired
		}
		seq = m.Sequence + 1
		at, ok := schedule.Parse(m.Header.Get(jetstream.ScheduleHeader))
		if !ok || at.After(cutoff) {
			continue
		}
		due := &nats.Msg{Subject: DuePrefix + strings.TrimPrefix(m.Subject, SchedPrefix), Header: nats.Header{}, Data: m.Data}
		if err := publish(ctx, d.js, due); err != nil {
			return m.Sequence, fired
		}
		fired++
		if err := s.DeleteMsg(ctx, m.Sequence); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			d.log.Warn("webhooks: an overdue retry was fired; deleting its schedule failed", "subject", m.Subject, "err", err)
		}
		d.log.Warn("webhooks: the server had not fired this retry; fired it", "subject", m.Subject, "overdueBy", now.Sub(at).Round(time.Second))
	}
	return seq, fired
}
