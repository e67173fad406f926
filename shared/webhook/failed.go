package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mintgate/mintgate/shared/events"
)

// The events stream and the subjects the first tries are read from.
var (
	eventsStream  = events.Stream
	eventSubjects = []string{events.SubjectPrefix + ">", events.RejectedPrefix + ">"}
)

// ErrNotFound is a webhook-id no failed delivery has (or one whose event
// MINTGATE_UPLOADS no longer keeps: it cannot be sent again).
var ErrNotFound = errors.New("webhooks: no failed delivery has this id")

// MaxListed bounds one page of List.
const MaxListed = 1000

// RedeliverSubject is where the signer's admin route asks the completer
// to send a failed delivery again (a NATS request carrying only the
// webhook-id); the completers answer it in the queue group Durable.
const RedeliverSubject = "mintgate.webhooks.redeliver"

// Failed is the store of deliveries that failed every try: one message
// per delivery on mintgate.webhooks.failed.<tenant>.<webhookId>, written
// by the completer alone. The signer's admin routes list them (List) and
// ask the completer to send one again (Redeliver).
type Failed struct{ js jetstream.JetStream }

// NewFailed is the store on js; it does not touch the server.
func NewFailed(js jetstream.JetStream) *Failed { return &Failed{js: js} }

// Page is one page of the failed deliveries.
type Page struct {
	Failed []Delivery
	// Next is the cursor of the next page; "" on the last.
	Next string
}

// ErrBadCursor is a cursor List did not hand out.
var ErrBadCursor = errors.New("webhooks: not a cursor of this list")

// List is a page of the failed deliveries, oldest first: at most limit
// (1 to MaxListed; else MaxListed) from cursor ("" for the first page).
// The cursor is the stream sequence the next page starts at, so a
// delivery failing while an operator pages comes on a later page, and a
// redelivered one leaves the list without shifting the others.
func (f *Failed) List(ctx context.Context, cursor string, limit int) (Page, error) {
	seq := uint64(1)
	if cursor != "" {
		n, err := strconv.ParseUint(cursor, 10, 64)
		if err != nil || n == 0 {
			return Page{}, ErrBadCursor
		}
		seq = n
	}
	if limit <= 0 || limit > MaxListed {
		limit = MaxListed
	}
	s, err := f.stream(ctx)
	if err != nil {
		return Page{}, err
	}
	p := Page{Failed: []Delivery{}}
	for {
		m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(FailedPrefix+">"))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return p, nil
		}
		if err != nil {
			return Page{}, fmt.Errorf("%w: read failed deliveries: %w", ErrUnavailable, err)
		}
		if len(p.Failed) == limit {
			p.Next = strconv.FormatUint(m.Sequence, 10)
			return p, nil
		}
		if d, err := parseOn(m.Subject, m.Data); err == nil {
			p.Failed = append(p.Failed, d)
		}
		seq = m.Sequence + 1
	}
}

// redeliverRequest is the signer's request on RedeliverSubject.
type redeliverRequest struct {
	ID string `json:"id"`
}

// redeliverReply is the completer's answer: the delivery's id and tenant,
// or an error ("not_found", "unavailable") and why.
type redeliverReply struct {
	ID      string `json:"id,omitempty"`
	Tenant  string `json:"tenant,omitempty"`
	Error   string `json:"error,omitempty"`
	Message string `json:"message,omitempty"`
}

// Redeliver asks the completer to send the failed delivery id again: the
// request carries only the id; the completer finds the failed record,
// reads its event again from MINTGATE_UPLOADS, stores it due for a first
// try and removes the record (Deliverer.redeliver). ErrNotFound when no
// failed delivery has that id; ErrUnavailable when no completer answers.
func (f *Failed) Redeliver(ctx context.Context, id string) (Delivery, error) {
	if !token(id) {
		return Delivery{}, ErrNotFound
	}
	req, err := json.Marshal(redeliverRequest{ID: id})
	if err != nil {
		return Delivery{}, err
	}
	m, err := f.js.Conn().RequestWithContext(ctx, RedeliverSubject, req)
	if err != nil {
		return Delivery{}, fmt.Errorf("%w: no completer answered the redelivery of %s: %w", ErrUnavailable, id, err)
	}
	var r redeliverReply
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return Delivery{}, fmt.Errorf("%w: the completer's answer: %w", ErrUnavailable, err)
	}
	switch r.Error {
	case "":
		return Delivery{ID: r.ID, Tenant: r.Tenant}, nil
	case "not_found":
		return Delivery{}, fmt.Errorf("%w: %s", ErrNotFound, r.Message)
	default:
		return Delivery{}, fmt.Errorf("%w: the completer: %s", ErrUnavailable, r.Message)
	}
}

// Count is how many deliveries are kept as failed. It lists every failed
// subject (O(n)): the deliverer calls it at start and every
// failedRecountEvery, and counts the failures between.
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

// serveRedeliver answers the signer's redelivery requests until ctx
// ends, in the queue group Durable: one completer answers each.
func (d *Deliverer) serveRedeliver(ctx context.Context) {
	sub, err := d.js.Conn().QueueSubscribe(RedeliverSubject, Durable, func(m *nats.Msg) {
		rctx, cancel := context.WithTimeout(ctx, adminTimeout)
		defer cancel()
		_ = m.Respond(d.answerRedeliver(rctx, m.Data))
	})
	if err != nil {
		d.log.Error("webhooks: cannot answer redeliveries (POST /admin/webhooks/failed/{id}/redeliver answers 503)", "err", err)
		return
	}
	<-ctx.Done()
	_ = sub.Unsubscribe()
}

// adminTimeout bounds the completer's work on one redelivery request,
// within the signer's wait for its answer.
const adminTimeout = 5 * time.Second

// answerRedeliver is the answer to one redelivery request.
func (d *Deliverer) answerRedeliver(ctx context.Context, data []byte) []byte {
	var req redeliverRequest
	r := redeliverReply{}
	del, err := Delivery{}, json.Unmarshal(data, &req)
	if err == nil {
		del, err = d.redeliver(ctx, req.ID)
	}
	switch {
	case err == nil:
		r.ID, r.Tenant = del.ID, del.Tenant
		d.log.Info("webhooks: failed delivery sent again at the admin's request", "webhookId", del.ID, "tenant", del.Tenant)
	case errors.Is(err, ErrNotFound):
		r.Error, r.Message = "not_found", err.Error()
	default:
		r.Error, r.Message = "unavailable", err.Error()
	}
	b, _ := json.Marshal(r)
	return b
}

// redeliver sends the failed delivery id again: its record is read, its
// event read again from MINTGATE_UPLOADS (the record's own event, of its
// tenant; reread), stored as due for a first try (with its webhook-id,
// and a full schedule of retries), then the record is removed.
//
// A SIGKILL of the completer here leaves, before the due publish, the
// record listed and nothing due (the admin's call answers 503 and may be
// made again); between the publish and the delete, the record listed
// while the delivery goes on (a second redelivery gives one more try
// with the same webhook-id; a failure again replaces the record).
func (d *Deliverer) redeliver(ctx context.Context, id string) (Delivery, error) {
	if !token(id) {
		return Delivery{}, ErrNotFound
	}
	s, err := NewFailed(d.js).stream(ctx)
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
	rec, err := parseOn(m.Subject, m.Data)
	if err != nil {
		return Delivery{}, fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	again, err := d.reread(ctx, rec)
	if errors.Is(err, errForged) {
		return Delivery{}, fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	if err != nil {
		return Delivery{}, err
	}
	again.Attempts, again.Busy, again.LastStatus, again.LastError, again.FailedAt = 0, 0, 0, "", nil
	msg, err := deliveryMsg(DueSubject(again.Tenant, again.ID), again)
	if err != nil {
		return Delivery{}, err
	}
	if err := publish(ctx, d.js, msg); err != nil {
		return Delivery{}, err
	}
	if err := s.DeleteMsg(ctx, m.Sequence); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return Delivery{}, fmt.Errorf("%w: remove failed delivery %s: %w", ErrUnavailable, id, err)
	}
	d.m.failed.Dec()
	return again, nil
}
