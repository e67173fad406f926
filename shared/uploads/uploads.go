// Package uploads is the stream of upload-completed events (docs/events.md): the
// completer publishes one JetStream message per first completion of an
// upload, on mintgate.uploads.completed.<tenant> in the stream
// MINTGATE_UPLOADS, with the urlId as Nats-Msg-Id. Consumers read it with
// any JetStream client; Event is the body (docs/events.md).
package uploads

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The stream and its subjects.
const (
	Stream        = "MINTGATE_UPLOADS"
	SubjectPrefix = "mintgate.uploads.completed."
	// DefaultMaxAge is how long the stream Open creates keeps an event.
	DefaultMaxAge = 7 * 24 * time.Hour
	// PublishTimeout bounds one publish and its ack.
	PublishTimeout = 2 * time.Second
)

// ErrUnavailable wraps every error of Open, Publish and Ping: the event was
// not (known to be) stored, so the caller must keep what it came from.
var ErrUnavailable = errors.New("uploads: event stream unavailable")

// Event is one upload-completed message: the upload's urlId and tenant,
// its object key incoming/<tenant>/<urlId>, and the size and ETag S3
// reported for the object (the ETag without quotes). CompletedAt is the
// S3 record's eventTime (RFC 3339, UTC).
type Event struct {
	URLID       string    `json:"urlId"`
	Tenant      string    `json:"tenant"`
	Key         string    `json:"key"`
	Size        int64     `json:"size"`
	ETag        string    `json:"etag"`
	CompletedAt time.Time `json:"completedAt"`
}

// Subject is the subject of a tenant's events.
func Subject(tenant string) string { return SubjectPrefix + tenant }

// StreamConfig is the stream Open creates when there is none: file
// storage, limits retention (every consumer reads every event), events
// kept DefaultMaxAge, and a de-duplication window of dedupe.
func StreamConfig(dedupe time.Duration) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        Stream,
		Description: "mintgate upload-completed events: one per first completion of an upload, Nats-Msg-Id = urlId",
		Subjects:    []string{SubjectPrefix + ">"},
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
		Storage:     jetstream.FileStorage,
		Replicas:    1,
		MaxAge:      DefaultMaxAge,
		Duplicates:  min(dedupe, DefaultMaxAge),
	}
}

// Publisher publishes events into the stream.
type Publisher struct {
	js jetstream.JetStream
	// Window is the stream's de-duplication window as the server has it.
	Window time.Duration
}

// Open makes sure the stream exists and returns its publisher. An absent
// stream is created with StreamConfig(dedupe); an existing one is never
// updated, so an operator's replicas, limits and window stay. A window
// shorter than dedupe is not an error, but the caller should say so: a
// record redelivered after the window can publish its event twice.
func Open(ctx context.Context, js jetstream.JetStream, dedupe time.Duration) (*Publisher, error) {
	s, err := js.Stream(ctx, Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		s, err = js.CreateStream(ctx, StreamConfig(dedupe))
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			s, err = js.Stream(ctx, Stream) // another completer was first
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: stream %s: %w", ErrUnavailable, Stream, err)
	}
	return &Publisher{js: js, Window: s.CachedInfo().Config.Duplicates}, nil
}

// Publish stores ev with its urlId as Nats-Msg-Id and waits for the
// stream's ack. duplicate reports that the stream already held an event
// of that urlId within its window, and stored nothing.
func (p *Publisher) Publish(ctx context.Context, ev Event) (duplicate bool, err error) {
	if st := p.js.Conn().Status(); st != nats.CONNECTED {
		return false, fmt.Errorf("%w: nats connection %s", ErrUnavailable, strings.ToLower(st.String()))
	}
	body, err := json.Marshal(ev)
	if err != nil {
		return false, err
	}
	msg := &nats.Msg{Subject: Subject(ev.Tenant), Header: nats.Header{}, Data: body}
	msg.Header.Set(jetstream.MsgIDHeader, ev.URLID)
	ctx, cancel := context.WithTimeout(ctx, PublishTimeout)
	defer cancel()
	ack, err := p.js.PublishMsg(ctx, msg, jetstream.WithExpectStream(Stream), jetstream.WithRetryAttempts(0))
	if err != nil {
		return false, fmt.Errorf("%w: publish event %s: %w", ErrUnavailable, ev.URLID, err)
	}
	return ack.Duplicate, nil
}

// Ping checks that the connection is up and the stream answers.
func (p *Publisher) Ping(ctx context.Context) error {
	if st := p.js.Conn().Status(); st != nats.CONNECTED {
		return fmt.Errorf("%w: nats connection %s", ErrUnavailable, strings.ToLower(st.String()))
	}
	if _, err := p.js.Stream(ctx, Stream); err != nil {
		return fmt.Errorf("%w: stream %s: %w", ErrUnavailable, Stream, err)
	}
	return nil
}
