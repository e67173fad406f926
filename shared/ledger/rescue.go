package ledger

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mintgate/mintgate/shared/schedule"
)

// maxRescues bounds the schedules one rescue applies; the next trim
// interval goes on.
const maxRescues = 256

// rescue applies, and then deletes, the schedules the server has not
// fired rescueAfter after their due time, oldest first, up to maxRescues.
//
// Why: the sweep otherwise trusts nats-server's scheduler alone. On a
// replicated stream the leader marks a schedule in flight when it fires
// it and forgets the mark only when leadership moves or the schedule is
// removed; a fire whose proposal is lost leaves the schedule marked on a
// leader that stays leader, and nothing fires it again. The grants in it
// would never be refunded (docs/performance.md tells of a soak that
// found thousands).
//
// Safe in every order: a batch is applied only through the handler, which
// refunds each grant at most once by its own marker, so a schedule fired
// by the server after (or while) it was rescued, a rescue by two sweepers
// at once, or a crash between the apply and the delete (the next rescue
// applies it again) each still refund once. A schedule whose body does not
// verify is left alone for the due path to terminate and count.
//
// Cost when nothing is stuck: one direct read per trim interval, of the
// oldest schedule, which is not overdue.
//
// Order: schedules are walked in stream order and the walk stops at the
// first one not yet overdue. Due times rise with the stream sequence as
// long as MINTGATE_URL_TTL and MINTGATE_SWEEP_GRACE stay the same; after
// they are lowered, an older schedule due later holds back the rescue of
// the newer ones until it is due.
func (c *consumeLoop) rescue() {
	ctx, cancel := context.WithTimeout(c.run, c.o.handleTimeout+trimTimeout) // a stop ends it
	defer cancel()
	cutoff := c.o.now().Add(-c.o.rescueAfter)
	rescued := 0
	for seq := uint64(1); rescued < maxRescues; {
		m, err := c.stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(SubjectSchedPrefix+">"))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break // no schedule left at or after seq
		}
		if err != nil {
			c.o.log.Warn("due grants: looking for overdue schedules failed; trying again later", "err", err)
			break
		}
		seq = m.Sequence + 1
		due, ok := schedule.Parse(m.Header.Get(jetstream.ScheduleHeader))
		if !ok || due.After(cutoff) {
			break
		}
		b, err := UnsealAny(m.Data, c.l.cfg.Secret, c.l.cfg.PreviousSecret)
		if err != nil {
			continue // the due path terminates and counts it, if it ever fires
		}
		if err := c.handle(ctx, b); err != nil {
			c.o.log.Warn("due grants: an overdue schedule could not be applied; trying again later", "batch", b.ID, "seq", m.Sequence, "err", err)
			break
		}
		// Applied: a failed delete only means the next rescue applies it again.
		if err := c.stream.DeleteMsg(ctx, m.Sequence); err != nil {
			c.o.log.Warn("due grants: a rescued schedule could not be deleted", "batch", b.ID, "seq", m.Sequence, "err", err)
		}
		rescued++
		c.observe(Outcome{Batch: b, Attempt: 1, Action: Rescued})
	}
	if rescued > 0 {
		c.o.log.Warn("due grants: the server had not fired these schedules; applied them from the schedules", "batches", rescued, "overdueBy", c.o.rescueAfter)
	}
}
