package events

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Ended is an upload that ended without an object: refunded by the
// sweeper (its URL expired unused, or its multipart upload was never
// completed) or aborted by its caller (DELETE /uploads/{urlId}). At is
// when that happened (RFC 3339, UTC). Its Nats-Msg-Id is
// "refunded:<urlId>" or "aborted:<urlId>", so a replay within the window
// stores nothing, and never collides with the upload's completed or
// rejected event (a late completion after a refund is still stored).
type Ended struct {
	URLID  string    `json:"urlId"`
	Tenant string    `json:"tenant"`
	Key    string    `json:"key"`
	At     time.Time `json:"at"`
}

// ErrNoSubject is wrapped (with ErrUnavailable) by PublishRefunded,
// PublishAborted and PublishTally when the stored stream does not take
// the subject yet (the operator step, which adds it, has not run since an
// upgrade): the caller may carry on without the event.
var ErrNoSubject = errors.New("uploads: the stream does not take this subject yet (the operator step adds it)")

// PublishRefunded stores a refunded event of ev's upload.
func (p *Publisher) PublishRefunded(ctx context.Context, ev Ended) (duplicate bool, err error) {
	if err := p.takes(ctx, RefundedPrefix+">"); err != nil {
		return false, err
	}
	return p.publish(ctx, RefundedPrefix+ev.Tenant, "refunded:"+ev.URLID, ev)
}

// PublishAborted stores an aborted event of ev's upload.
func (p *Publisher) PublishAborted(ctx context.Context, ev Ended) (duplicate bool, err error) {
	if err := p.takes(ctx, AbortedPrefix+">"); err != nil {
		return false, err
	}
	return p.publish(ctx, AbortedPrefix+ev.Tenant, "aborted:"+ev.URLID, ev)
}

// PublishTally stores body (a records.Tally) of signer on its subject with
// id as Nats-Msg-Id.
func (p *Publisher) PublishTally(ctx context.Context, signer, id string, body any) (duplicate bool, err error) {
	if err := p.takes(ctx, TalliesPrefix+">"); err != nil {
		return false, err
	}
	return p.publish(ctx, TalliesPrefix+signer, id, body)
}

// takes checks, once per Publisher until it holds, that the stream takes
// subject: a publish on a subject no stream takes would wait for its
// timeout and fail.
func (p *Publisher) takes(ctx context.Context, subject string) error {
	p.mu.Lock()
	ok := p.subjects[subject]
	p.mu.Unlock()
	if ok {
		return nil
	}
	info, err := p.Stream(ctx)
	if err != nil {
		return err
	}
	if !slices.Contains(info.Config.Subjects, subject) {
		return fmt.Errorf("%w: %w: %s", ErrUnavailable, ErrNoSubject, subject)
	}
	p.mu.Lock()
	if p.subjects == nil {
		p.subjects = map[string]bool{}
	}
	p.subjects[subject] = true
	p.mu.Unlock()
	return nil
}
