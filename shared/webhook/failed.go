package webhook

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mintgate/mintgate/shared/events"
)

// The events stream and the subjects the first tries are read from.
var (
	eventsStream  = events.Stream
	eventSubjects = []string{events.SubjectPrefix + ">", events.RejectedPrefix + ">"}
)

// ErrNotFound is a webhook-id no failed delivery has.
var ErrNotFound = errors.New("webhooks: no failed delivery has this id")

// MaxListed bounds what List returns.
const MaxListed = 1000

// Failed is the store of deliveries that failed every try: one message
// per delivery on mintgate.webhooks.failed.<tenant>.<webhookId>. The
// signer's admin routes list and redeliver them.
type Failed struct{ js jetstream.JetStream }

// NewFailed is the store on js; it does not touch the server.
func NewFailed(js jetstream.JetStream) *Failed { return &Failed{js: js} }

// List is the failed deliveries, oldest first, at most MaxListed.
func (f *Failed) List(ctx context.Context) ([]Delivery, error) {
	s, err := f.stream(ctx)
	if err != nil {
		return nil, err
	}
	out := []Delivery{}
	for seq := uint64(1); len(out) < MaxListed; {
		m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(FailedPrefix+">"))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: read failed deliveries: %w", ErrUnavailable, err)
		}
		if d, err := parseDelivery(m.Data); err == nil {
			out = append(out, d)
		}
		seq = m.Sequence + 1
	}
	return out, nil
}

// Redeliver sends the failed delivery id again: it is stored as due for a
// first try (with its webhook-id, and a full schedule of retries), then
// its failed record is removed. ErrNotFound when no failed delivery has
// that id. A crash between the two leaves the record listed while the
// delivery goes on; a redelivery that fails again replaces it.
func (f *Failed) Redeliver(ctx context.Context, id string) (Delivery, error) {
	if !token(id) {
		return Delivery{}, ErrNotFound
	}
	s, err := f.stream(ctx)
	if err != nil {
		return Delivery{}, err
	}
	m, err := s.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(FailedPrefix+"*."+id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Delivery{}, ErrNotFound
	}
	if err != nil {
		return Delivery{}, fmt.Errorf("%w: read failed delivery %s: %w", ErrUnavailable, id, err)
	}
	d, err := parseDelivery(m.Data)
	if err != nil {
		return Delivery{}, err
	}
	again := d
	again.Attempts, again.LastStatus, again.LastError, again.FailedAt = 0, 0, "", nil
	msg, err := deliveryMsg(DueSubject(d.Tenant, d.ID), again)
	if err != nil {
		return Delivery{}, err
	}
	if err := publish(ctx, f.js, msg); err != nil {
		return Delivery{}, err
	}
	if err := s.DeleteMsg(ctx, m.Sequence); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return Delivery{}, fmt.Errorf("%w: remove failed delivery %s: %w", ErrUnavailable, id, err)
	}
	return d, nil
}

// Count is how many deliveries are kept as failed.
func (f *Failed) Count(ctx context.Context) (int, error) {
	info, err := StreamInfo(ctx, f.js, jetstream.WithSubjectFilter(FailedPrefix+">"))
	if err != nil {
		return 0, err
	}
	return len(info.State.Subjects), nil
}

func (f *Failed) stream(ctx context.Context) (jetstream.Stream, error) {
	if _, err := StreamInfo(ctx, f.js); err != nil {
		return nil, err
	}
	s, err := f.js.Stream(ctx, Stream)
	if err != nil {
		return nil, fmt.Errorf("%w: stream %s: %w", ErrUnavailable, Stream, err)
	}
	return s, nil
}

// failedEvery is how often the deliverer reads the count of failed
// deliveries for mintgate_webhook_failed (also after each new one): the
// admin route's redeliveries change it from another process.
const failedEvery = 15 * time.Second

// watchFailed keeps mintgate_webhook_failed current until ctx ends.
func (d *Deliverer) watchFailed(ctx context.Context) {
	t := time.NewTicker(failedEvery)
	defer t.Stop()
	for {
		d.refreshFailed(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (d *Deliverer) refreshFailed(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	n, err := NewFailed(d.js).Count(ctx)
	if err != nil {
		return
	}
	d.m.failed.Set(float64(n))
}
