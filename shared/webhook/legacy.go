package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mintgate/mintgate/shared/events"
)

// A retry or failed record stored before issue 36 carries no EventSeq.
// findEvent looks its event up in MINTGATE_UPLOADS instead: by time, then
// on its tenant's subject, so it is still sent (and still only if the
// event is its own: reread compares as for any delivery).

// legacyMargin is how far from a delivery's timestamp its event may have
// been stored (clocks of several completers, a slow publish).
const legacyMargin = 5 * time.Minute

// legacyScan bounds the messages of the tenant's subject looked at.
const legacyScan = 5000

// findEvent is the sequence of del's event in s, found by its time and
// urlId; errForged when it is not there.
func findEvent(ctx context.Context, s jetstream.Stream, del Delivery) (uint64, error) {
	urlID, subject, ok := legacyTarget(del)
	if !ok {
		return 0, fmt.Errorf("%w: delivery %s carries no event reference", errForged, del.ID)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("%w: stream %s info: %w", ErrUnavailable, eventsStream, err)
	}
	from := del.Timestamp.Add(-legacyMargin)
	lo, hi := info.State.FirstSeq, info.State.LastSeq+1
	for lo < hi { // the first sequence stored at or after from
		mid := lo + (hi-lo)/2
		m, err := s.GetMsg(ctx, mid, jetstream.WithGetMsgSubject(">"))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			hi = mid
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("%w: read %s: %w", ErrUnavailable, eventsStream, err)
		}
		if m.Time.Before(from) {
			lo = m.Sequence + 1
		} else {
			hi = mid
		}
	}
	for seq, n := lo, 0; n < legacyScan; n++ {
		m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return 0, fmt.Errorf("%w: read %s: %w", ErrUnavailable, eventsStream, err)
		}
		if m.Time.After(del.Timestamp.Add(legacyMargin)) {
			break
		}
		var ev struct {
			URLID string `json:"urlId"`
		}
		if json.Unmarshal(m.Data, &ev) == nil && ev.URLID == urlID {
			return m.Sequence, nil
		}
		seq = m.Sequence + 1
	}
	return 0, fmt.Errorf("%w: delivery %s carries no event reference, and %s holds no such event near %s", errForged, del.ID, eventsStream, del.Timestamp.Format(time.RFC3339))
}

// legacyTarget is the urlId and the events' subject a webhook-id names.
func legacyTarget(del Delivery) (urlID, subject string, ok bool) {
	rest, ok := strings.CutPrefix(del.ID, "msg_")
	if !ok || del.Timestamp.IsZero() {
		return "", "", false
	}
	if u, ok := strings.CutSuffix(rest, "_completed"); ok {
		return u, events.Subject(del.Tenant), true
	}
	if u, ok := strings.CutSuffix(rest, "_rejected"); ok {
		return u, events.RejectedSubject(del.Tenant), true
	}
	return "", "", false
}
