package webhook

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// errForged is a message of MINTGATE_WEBHOOKS that names no event of
// MINTGATE_UPLOADS that is its own: no reference, no event at it (long
// expired, or never there), or an event of another id or tenant. Any
// NATS identity allowed to publish on the stream could have written it;
// only the completer writes MINTGATE_UPLOADS, so nothing of it is sent.
var errForged = errors.New("webhooks: the delivery names no event of " + eventsStream + " of its own")

// reread is del as its event makes it: the event at del.EventSeq of
// MINTGATE_UPLOADS, read again before each retry and redelivery, must be
// del's (same webhook-id, same tenant); the payload, type and time sent
// are the event's, never what the delivery message carries. Only the
// count of tries and the last try's outcome come from the message. Why:
// MINTGATE_WEBHOOKS may be written by other NATS identities (the signer
// once could); MINTGATE_UPLOADS by the completer alone
// (deploy/nats/authorization.conf), so a webhook signed with a tenant's
// secret always carries an event the completer published for it.
// errForged when it is not del's; ErrUnavailable when the stream did not
// answer.
func (d *Deliverer) reread(ctx context.Context, del Delivery) (Delivery, error) {
	s, err := d.eventsStream(ctx)
	if err != nil {
		return Delivery{}, err
	}
	if del.EventSeq == 0 { // stored before issue 36 (legacy.go)
		if del.EventSeq, err = findEvent(ctx, s, del); err != nil {
			return Delivery{}, err
		}
	}
	m, err := s.GetMsg(ctx, del.EventSeq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Delivery{}, fmt.Errorf("%w: no event at sequence %d (%s keeps events 7 days by default)", errForged, del.EventSeq, eventsStream)
	}
	if err != nil {
		return Delivery{}, fmt.Errorf("%w: read event %d of %s: %w", ErrUnavailable, del.EventSeq, eventsStream, err)
	}
	ev, err := fromEvent(m.Subject, m.Data, m.Sequence, m.Time)
	if err != nil {
		return Delivery{}, fmt.Errorf("%w: %w", errForged, err)
	}
	if ev.ID != del.ID || ev.Tenant != del.Tenant {
		return Delivery{}, fmt.Errorf("%w: delivery %s of tenant %q names event %d, which is %s of tenant %q",
			errForged, del.ID, del.Tenant, del.EventSeq, ev.ID, ev.Tenant)
	}
	ev.Attempts, ev.Busy, ev.URL, ev.LastStatus, ev.LastError = del.Attempts, del.Busy, del.URL, del.LastStatus, del.LastError
	return ev, nil
}

// eventsStream is MINTGATE_UPLOADS, opened once.
func (d *Deliverer) eventsStream(ctx context.Context) (jetstream.Stream, error) {
	if s := d.events.Load(); s != nil {
		return *s, nil
	}
	s, err := d.js.Stream(ctx, eventsStream)
	if err != nil {
		return nil, fmt.Errorf("%w: stream %s: %w", ErrUnavailable, eventsStream, err)
	}
	d.events.Store(&s)
	return s, nil
}
