// Package events is the stream of upload events (docs/events.md): the
// completer publishes one JetStream message per upload in the stream
// MINTGATE_UPLOADS, with the urlId as Nats-Msg-Id: on
// mintgate.uploads.completed.<tenant> (Event) once its object passed the
// verification gate, or on mintgate.uploads.rejected.<tenant> (Rejected)
// once it failed it. Consumers read it with any JetStream client.
package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/mintgate/mintgate/shared/telemetry"
)

// The stream and its subjects.
const (
	Stream        = "MINTGATE_UPLOADS"
	SubjectPrefix = "mintgate.uploads.completed."
	// RejectedPrefix starts the subjects of upload-rejected events, in the
	// same stream: mintgate.uploads.rejected.<tenant>.
	RejectedPrefix = "mintgate.uploads.rejected."
	// RefundedPrefix and AbortedPrefix start the subjects of an upload's
	// other ends, in the same stream: mintgate.uploads.refunded.<tenant>
	// (the sweeper gave its tokens back: no upload came) and
	// mintgate.uploads.aborted.<tenant> (its caller aborted its multipart
	// upload), each an Ended.
	RefundedPrefix = "mintgate.uploads.refunded."
	AbortedPrefix  = "mintgate.uploads.aborted."
	// TalliesPrefix starts the subjects of the signers' per-minute
	// tallies (shared/records.Tally): mintgate.tallies.<signer instance>.
	// Outside mintgate.uploads.>, so an app reading the uploads never
	// meets them.
	TalliesPrefix = "mintgate.tallies."
	// DefaultMaxAge is how long the stream Open creates keeps an event.
	DefaultMaxAge = 7 * 24 * time.Hour
	// PublishTimeout bounds one publish and its ack.
	PublishTimeout = 2 * time.Second
)

var (
	// ErrUnavailable wraps every error of Open, Publish and Ping: the event
	// was not (known to be) stored, so the caller must keep what it came
	// from.
	ErrUnavailable = errors.New("uploads: event stream unavailable")
	// ErrStreamMissing is wrapped (with ErrUnavailable) when the stream
	// does not exist: the operator step (EnsureStream, run by
	// deploy/streams) creates it; the completer never does.
	ErrStreamMissing = errors.New("uploads: the stream " + Stream + " does not exist (the operator step creates it)")
	// ErrStreamMisconfigured is wrapped (with ErrUnavailable) when the
	// stream lacks what publishing relies on; the error names it.
	ErrStreamMisconfigured = errors.New("uploads: the stream " + Stream + " is misconfigured (the operator step updates it)")
)

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
	// ChecksumSHA256 is the SHA-256 (base64) the grant's URL was bound to,
	// which S3 checked the bytes against; absent for none and for a
	// multipart upload (S3's checksum of one is no SHA-256 of the object).
	ChecksumSHA256 string `json:"checksumSHA256,omitempty"`
}

// Subject is the subject of a tenant's events.
func Subject(tenant string) string { return SubjectPrefix + tenant }

// Rejected is one upload-rejected message: an upload whose object failed
// the completer's verification gate for Reason (size_mismatch,
// type_mismatch, image_too_large, malware, scan_limit,
// encoding_not_allowed, metadata_not_allowed). Key is where it landed,
// incoming/<tenant>/<urlId>; it now lies at QuarantineKey(tenant, urlId).
// Size is the size S3 reported; RejectedAt when the completer carried the
// rejection out (RFC 3339, UTC).
type Rejected struct {
	URLID      string    `json:"urlId"`
	Tenant     string    `json:"tenant"`
	Key        string    `json:"key"`
	Size       int64     `json:"size"`
	Reason     string    `json:"reason"`
	RejectedAt time.Time `json:"rejectedAt"`
	// ChecksumSHA256 is as in Event.
	ChecksumSHA256 string `json:"checksumSHA256,omitempty"`
}

// RejectedSubject is the subject of a tenant's upload-rejected events.
func RejectedSubject(tenant string) string { return RejectedPrefix + tenant }

// QuarantineKey is where a rejected upload's object is moved, in the same
// bucket: quarantine/<tenant>/<urlId>, outside incoming/ (no notification,
// no lifecycle rule of the uploads).
func QuarantineKey(tenant, urlID string) string { return "quarantine/" + tenant + "/" + urlID }

// Subjects is every subject the stream takes.
func Subjects() []string {
	return []string{SubjectPrefix + ">", RejectedPrefix + ">", RefundedPrefix + ">", AbortedPrefix + ">", TalliesPrefix + ">"}
}

// StreamConfig is the stream EnsureStream creates or updates to: file
// storage, limits retention (every consumer reads every event), events
// kept DefaultMaxAge, and a de-duplication window of dedupe.
func StreamConfig(dedupe time.Duration) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        Stream,
		Description: "mintgate upload events: one completed or rejected per upload (Nats-Msg-Id = urlId), refunds, aborts, the signers' tallies",
		Subjects:    Subjects(),
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
		Storage:     jetstream.FileStorage,
		Replicas:    1,
		MaxAge:      DefaultMaxAge,
		Duplicates:  min(dedupe, DefaultMaxAge),
	}
}

// EnsureStream is the operator's step, never the completer's: it creates
// the stream with StreamConfig(dedupe), or updates an existing one to it
// while keeping its replicas and max age (an operator's three replicas or
// longer retention stay). replicas above zero sets them. It is idempotent.
func EnsureStream(ctx context.Context, js jetstream.JetStream, dedupe time.Duration, replicas int) (*jetstream.StreamInfo, error) {
	sc := StreamConfig(dedupe)
	s, err := js.Stream(ctx, Stream)
	switch {
	case err == nil:
		old := s.CachedInfo().Config
		sc.Replicas, sc.MaxAge = old.Replicas, old.MaxAge
		if old.MaxAge > 0 { // the server refuses a window above the max age
			sc.Duplicates = min(sc.Duplicates, old.MaxAge)
		}
	case !errors.Is(err, jetstream.ErrStreamNotFound):
		// Not knowing the stream is not its absence: updating it with the
		// defaults could shrink an operator's three replicas to one.
		return nil, fmt.Errorf("%w: stream %s: %w", ErrUnavailable, Stream, err)
	}
	if replicas > 0 {
		sc.Replicas = replicas
	}
	if s, err = js.CreateOrUpdateStream(ctx, sc); err != nil {
		return nil, fmt.Errorf("%w: create or update stream %s: %w", ErrUnavailable, Stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: stream %s info: %w", ErrUnavailable, Stream, err)
	}
	return info, checkStream(info)
}

// checkStream reports what makes the stored stream unfit (naming each
// setting), or nil: the subjects must take every tenant's events, and the
// retention must be limits, so that no consumer's ack removes an event
// another has not read.
func checkStream(info *jetstream.StreamInfo) error {
	c := info.Config
	var wrong []string
	for _, want := range []string{SubjectPrefix + ">", RejectedPrefix + ">"} {
		if !slices.Contains(c.Subjects, want) {
			wrong = append(wrong, "subjects "+strings.Join(c.Subjects, ",")+" lack "+want)
		}
	}
	if c.Retention != jetstream.LimitsPolicy {
		wrong = append(wrong, "retention "+c.Retention.String()+", want limits")
	}
	if len(wrong) > 0 {
		return fmt.Errorf("%w: %w: %s", ErrUnavailable, ErrStreamMisconfigured, strings.Join(wrong, "; "))
	}
	return nil
}

// HeaderTraceparent is the header of an event message that carries the
// W3C traceparent of its publish, in its upload's trace (absent when the
// completer does not trace).
const HeaderTraceparent = "traceparent"

// Publisher publishes events into the stream.
type Publisher struct {
	js jetstream.JetStream
	// Window is the stream's de-duplication window as the server had it
	// when Open read it (zero from New).
	Window time.Duration

	mu       sync.Mutex
	subjects map[string]bool // the subjects the stream was seen to take (takes)
}

// New is the publisher of the stream on js; it does not touch the server.
func New(js jetstream.JetStream) *Publisher { return &Publisher{js: js} }

// Open is New, and the stream read and checked once (Stream). It never
// creates or changes the stream: that is the operator's (EnsureStream).
// A window shorter than dedupe is not an error, but the caller should say
// so: a record redelivered after the window can publish its event twice.
func Open(ctx context.Context, js jetstream.JetStream, dedupe time.Duration) (*Publisher, error) {
	p := New(js)
	info, err := p.Stream(ctx)
	if err != nil {
		return nil, err
	}
	p.Window = info.Config.Duplicates
	return p, nil
}

// Stream reads the stream (JetStream's STREAM.INFO, the only right it
// needs besides publishing) and checks it: a missing
// stream is ErrStreamMissing, a misconfigured one ErrStreamMisconfigured.
func (p *Publisher) Stream(ctx context.Context) (*jetstream.StreamInfo, error) {
	s, err := p.js.Stream(ctx, Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, ErrStreamMissing)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: stream %s: %w", ErrUnavailable, Stream, err)
	}
	info := s.CachedInfo()
	if err := checkStream(info); err != nil {
		return nil, err
	}
	return info, nil
}

// Publish stores ev with its urlId as Nats-Msg-Id and waits for the
// stream's ack. duplicate reports that the stream already held an event
// of that urlId within its window, and stored nothing.
func (p *Publisher) Publish(ctx context.Context, ev Event) (duplicate bool, err error) {
	return p.publish(ctx, Subject(ev.Tenant), ev.URLID, ev)
}

// PublishRejected stores ev as Publish stores an Event, on the tenant's
// rejected subject. Its Nats-Msg-Id is the urlId too: an upload has one
// event, completed or rejected, never both.
func (p *Publisher) PublishRejected(ctx context.Context, ev Rejected) (duplicate bool, err error) {
	return p.publish(ctx, RejectedSubject(ev.Tenant), ev.URLID, ev)
}

func (p *Publisher) publish(ctx context.Context, subject, urlID string, ev any) (duplicate bool, err error) {
	if st := p.js.Conn().Status(); st != nats.CONNECTED {
		return false, fmt.Errorf("%w: nats connection %s", ErrUnavailable, strings.ToLower(st.String()))
	}
	body, err := json.Marshal(ev)
	if err != nil {
		return false, err
	}
	msg := &nats.Msg{Subject: subject, Header: nats.Header{}, Data: body}
	msg.Header.Set(jetstream.MsgIDHeader, urlID)
	ctx, cancel := context.WithTimeout(ctx, PublishTimeout)
	defer cancel()
	span := trace.SpanFromContext(context.Background()) // a no-op, unless traced
	if trace.SpanFromContext(ctx).IsRecording() {
		ctx, span = telemetry.Start(ctx, "publish "+subject, telemetry.Messaging(trace.SpanKindProducer, "nats", "publish", subject)...)
	}
	if tp := telemetry.Traceparent(ctx); tp != "" {
		msg.Header.Set(HeaderTraceparent, tp) // the webhook tries join the upload's trace
	}
	ack, err := p.js.PublishMsg(ctx, msg, jetstream.WithExpectStream(Stream), jetstream.WithRetryAttempts(0))
	telemetry.End(span, err)
	if err != nil {
		return false, fmt.Errorf("%w: publish event %s: %w", ErrUnavailable, urlID, err)
	}
	return ack.Duplicate, nil
}

// Ping checks that the connection is up and the stream answers and is as
// publishing needs it (Stream).
func (p *Publisher) Ping(ctx context.Context) error {
	if st := p.js.Conn().Status(); st != nats.CONNECTED {
		return fmt.Errorf("%w: nats connection %s", ErrUnavailable, strings.ToLower(st.String()))
	}
	_, err := p.Stream(ctx)
	return err
}
