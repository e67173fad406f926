package webhook

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The stream of deliveries waiting for a retry and of deliveries that
// failed every try, and its subjects. Each delivery has its own subject
// in each (<tenant>.<webhookId>), holding at most one message: a new
// schedule replaces the one before it, a failed record its predecessor.
const (
	Stream = "MINTGATE_WEBHOOKS"
	// SchedPrefix starts a retry's schedule (Nats-Schedule "@at …"),
	// which fires on DuePrefix.
	SchedPrefix = "mintgate.webhooks.sched."
	// DuePrefix starts a delivery due for a try: fired schedules and the
	// admin route's redeliveries. The completer's durable "webhooks"
	// reads them.
	DuePrefix = "mintgate.webhooks.due."
	// FailedPrefix starts a delivery that failed every try.
	FailedPrefix = "mintgate.webhooks.failed."
	// MaxAge is how long the stream keeps a message: a failed delivery is
	// listed for 30 days, far beyond the longest retry schedule.
	MaxAge = 30 * 24 * time.Hour
	// DefaultMaxBytes is MINTGATE_WEBHOOK_STREAM_MAX_BYTES' default: the
	// stream's size bound (1 GiB).
	DefaultMaxBytes = 1 << 30
	// FullShare is the share of the size bound from which the deliverer
	// stores no new retry or failed record.
	FullShare = 0.95
	// Durable is the name of the completer's consumers, on MINTGATE_UPLOADS
	// (the first try of each event) and on this stream (the retries).
	Durable = "webhooks"
)

// SchedSubject is the subject of a delivery's next retry's schedule.
func SchedSubject(tenant, id string) string { return SchedPrefix + tenant + "." + id }

// DueSubject is the subject of a delivery due for a try now.
func DueSubject(tenant, id string) string { return DuePrefix + tenant + "." + id }

// FailedSubject is the subject of a delivery kept as failed.
func FailedSubject(tenant, id string) string { return FailedPrefix + tenant + "." + id }

var (
	// ErrStreamFull wraps (with ErrUnavailable) a retry or failed record
	// not stored because the stream is at FullShare of its size bound.
	ErrStreamFull = errors.New("webhooks: the stream " + Stream + " is at its size bound (MINTGATE_WEBHOOK_STREAM_MAX_BYTES)")
	// ErrUnavailable wraps every error of the stream: JetStream did not
	// (known to) store or answer.
	ErrUnavailable = errors.New("webhooks: stream unavailable")
	// ErrStreamMisconfigured is wrapped (with ErrUnavailable) when the
	// stream is missing or lacks what the deliveries rely on; the
	// operator step (deploy/streams) creates and updates it.
	ErrStreamMisconfigured = errors.New("webhooks: the stream " + Stream + " is missing or misconfigured (the operator step creates it)")
)

// StreamConfig is the stream EnsureStream creates or updates to: file
// storage, limits retention (a schedule must stay when its delivery is
// acked), scheduling on, one message per subject, and at most maxBytes
// (-1: no bound).
//
// The server refuses DiscardNew on a stream with schedules, so at
// maxBytes it would drop the oldest messages (failed records, waiting
// retries) without a word. The deliverer never lets it get there: from
// FullShare of the bound on, it stores no new retry or failed record
// (ErrStreamFull) and leaves the message it came from unacked, tried
// again later (stuckWait): an event's first try stays in MINTGATE_UPLOADS,
// a retry on its due subject. Nothing is dropped; deliveries wait until
// failed records are redelivered or age out (MaxAge), or the bound is
// raised. mintgate_webhook_stream_bytes and the alert
// MintgateWebhookStreamNearlyFull (80 % of the bound) warn before.
func StreamConfig(replicas int, maxBytes int64) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:              Stream,
		Description:       "mintgate webhooks: retries scheduled per delivery, and deliveries that failed every try",
		Subjects:          []string{SchedPrefix + ">", DuePrefix + ">", FailedPrefix + ">"},
		Retention:         jetstream.LimitsPolicy,
		Discard:           jetstream.DiscardOld,
		Storage:           jetstream.FileStorage,
		Replicas:          max(replicas, 1),
		MaxAge:            MaxAge,
		MaxBytes:          maxBytes,
		MaxMsgsPerSubject: 1,
		AllowMsgSchedules: true,
		AllowRollup:       true, // schedules need it
	}
}

// EnsureStream is the operator's step: it creates the stream or updates
// it to StreamConfig, keeping an existing stream's replicas unless
// replicas is above zero. It is idempotent.
func EnsureStream(ctx context.Context, js jetstream.JetStream, replicas int, maxBytes int64) (*jetstream.StreamInfo, error) {
	sc := StreamConfig(replicas, maxBytes)
	s, err := js.Stream(ctx, Stream)
	switch {
	case err == nil:
		if replicas <= 0 {
			sc.Replicas = s.CachedInfo().Config.Replicas
		}
	case !errors.Is(err, jetstream.ErrStreamNotFound):
		return nil, fmt.Errorf("%w: stream %s: %w", ErrUnavailable, Stream, err)
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

// StreamInfo reads the stream and checks it as the deliveries need it.
func StreamInfo(ctx context.Context, js jetstream.JetStream, opts ...jetstream.StreamInfoOpt) (*jetstream.StreamInfo, error) {
	s, err := js.Stream(ctx, Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, ErrStreamMisconfigured)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: stream %s: %w", ErrUnavailable, Stream, err)
	}
	info := s.CachedInfo()
	if len(opts) > 0 {
		if info, err = s.Info(ctx, opts...); err != nil {
			return nil, fmt.Errorf("%w: stream %s info: %w", ErrUnavailable, Stream, err)
		}
	}
	return info, checkStream(info)
}

// checkStream names what makes the stored stream unfit, or is nil.
func checkStream(info *jetstream.StreamInfo) error {
	c := info.Config
	var wrong []string
	for _, want := range []string{SchedPrefix + ">", DuePrefix + ">", FailedPrefix + ">"} {
		if !slices.Contains(c.Subjects, want) {
			wrong = append(wrong, "subjects "+strings.Join(c.Subjects, ",")+" lack "+want)
		}
	}
	if !c.AllowMsgSchedules {
		wrong = append(wrong, "allow_msg_schedules off: retries would go at once")
	}
	if c.Retention != jetstream.LimitsPolicy {
		wrong = append(wrong, "retention "+c.Retention.String()+", want limits")
	}
	if c.Storage != jetstream.FileStorage {
		wrong = append(wrong, "storage "+c.Storage.String()+", want file")
	}
	if c.MaxMsgsPerSubject != 1 {
		wrong = append(wrong, fmt.Sprintf("max_msgs_per_subject %d, want 1", c.MaxMsgsPerSubject))
	}
	if len(wrong) > 0 {
		return fmt.Errorf("%w: %w: %s", ErrUnavailable, ErrStreamMisconfigured, strings.Join(wrong, "; "))
	}
	return nil
}
