package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	awsevents "github.com/aws/aws-lambda-go/events"
	"github.com/google/uuid"

	"github.com/mintgate/mintgate/shared/events"
	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/quota"
	"github.com/mintgate/mintgate/shared/s3event"
)

// doneStore keeps the done markers (quota.Store): Complete sets one, and
// takes back a refund its upload landed after, in one step; Settle moves
// it from one value to the next; Shape reads what the grant was signed for.
type doneStore interface {
	Complete(ctx context.Context, now time.Time, c quota.Completion) (quota.Completed, error)
	Settle(ctx context.Context, tenant, urlID, from, to string) (held string, moved bool, err error)
	Shape(ctx context.Context, tenant, urlID string) (quota.GrantShape, error)
}

// eventPublisher stores upload events (events.Publisher).
type eventPublisher interface {
	Publish(ctx context.Context, ev events.Event) (duplicate bool, err error)
	PublishRejected(ctx context.Context, ev events.Rejected) (duplicate bool, err error)
}

// Values of the done marker (quota.ReadDone reads them). The sweeper, the
// refund and an undo only ask whether it exists, so an upload being
// verified or rejected is never refunded; GET /uploads/{urlId} reads the
// value.
const (
	// markerDone: the upload is done and, with events on, its event is
	// stored. Also what a completer with events off writes.
	markerDone = quota.DoneCompleted
	// markerUnpublished: the upload passed the gate, its event may not be
	// stored yet.
	markerUnpublished = quota.DoneVerified
	// markerVerifying: the object arrived, no verdict yet.
	markerVerifying = quota.DoneVerifying
)

// completer is the service's business: an upload that happened gets its
// done marker, so the sweeper does not refund its token, and a verdict of
// the verification gate.
type completer struct {
	store   doneStore
	bucket  string        // MINTGATE_S3_BUCKET: the only bucket whose records count
	doneTTL time.Duration // MINTGATE_DONE_TTL: of a pending marker; a done one lives quota.MarkerTTL at least
	// events publishes upload events; nil when they are off.
	events eventPublisher
	gate   *gate
	trace  tracing // OTEL_*: each record's handling a span of its upload's trace
	m      *metrics
	log    *slog.Logger
}

// handle sets the done marker for every ObjectCreated record of n from S3
// (eventSource aws:s3) for our bucket under incoming/<tenant>/<uuid>, and
// ignores (counting why) the test event and every other record: a done
// marker stops a refund, so a record of another bucket notifying the same
// queue, or one written by anyone else who can send to it, must not set it.
// Then it verifies the object and completes or rejects the upload
// (complete). It is safe to run twice on the same notification. An error
// means Redis, NATS, S3 or clamd failed: the consumer holds the message
// until they answer. None of its errors is poison (pipeline.ErrPoison):
// what can never apply — a foreign record, a key not the signer's, an
// object gone before its verdict — is ignored and counted, and a body that
// does not parse never reaches it.
func (c *completer) handle(ctx context.Context, n s3event.Notification) error {
	if n.IsTest() {
		c.m.ignored.WithLabelValues(ignoredTestEvent).Inc()
		return nil
	}
	for _, r := range n.Records {
		if reason := c.foreign(r); reason != "" {
			c.m.ignored.WithLabelValues(reason).Inc()
			c.log.Debug("record ignored", "reason", reason, "eventSource", r.EventSource, "bucket", r.S3.Bucket.Name)
			continue
		}
		if !s3event.IsObjectCreated(r) {
			c.m.ignored.WithLabelValues(ignoredNotCreated).Inc()
			continue
		}
		key := r.S3.Object.URLDecodedKey
		tenant, urlID, reason := upload(key)
		if reason != "" {
			c.m.ignored.WithLabelValues(reason).Inc()
			c.log.Debug("record ignored", "reason", reason, "bucket", r.S3.Bucket.Name, "key", key)
			continue
		}
		if err := c.completeTraced(ctx, r, events.Event{URLID: urlID, Tenant: tenant, Key: key}); err != nil {
			return fmt.Errorf("complete %s: %w", key, err)
		}
		c.m.done.Inc()
		c.m.lag.Observe(time.Since(completedAt(r)).Seconds())
	}
	return nil
}

// set runs one quota.Store.Complete and counts what it did.
func (c *completer) set(ctx context.Context, m quota.Completion) (quota.Completed, error) {
	start := time.Now()
	got, err := c.store.Complete(ctx, time.Now(), m)
	c.m.redisSeconds.Observe(time.Since(start).Seconds())
	if err == nil && got.TookBack {
		// A PUT that started before its URL expired and finished after
		// the grant was refunded: it is paid for after all.
		c.m.takenBack.Inc()
		c.log.InfoContext(ctx, "upload landed after its grant was refunded; refund taken back", "tenant", m.Tenant, "urlId", m.URLID)
	}
	return got, err
}

// complete marks the upload of r arrived, verifies its object and ends it
// completed or rejected, with its one event, however often S3 or SQS
// repeat the record. Every step is a value of the done marker, so that a
// redelivery resumes where a completer that died (SIGKILL, or Redis,
// NATS, S3 or clamd failing) left off:
//
//  1. Marker verifying, set only if absent, in the script that takes back
//     a refund its upload landed after (quota.Store.Complete; TTL the
//     longer of MINTGATE_DONE_TTL and quota.MarkerTTL): the marker exists
//     from here on, so the sweeper never refunds an upload that happened,
//     even while NATS, S3 or clamd are down. The old value tells what an
//     earlier delivery did (step, below); pending (the signer or the
//     sweeper saw a multipart upload complete) reads as verifying.
//  2. The gate (gate.check): size, type, pixels, scan. No verdict (S3 or
//     clamd down): the message is held, the marker stays verifying.
//  3. The verdict, moved from the value step 1 found (quota.Store.Settle:
//     only if it still holds it, so two deliveries never reach both
//     verdicts): verified, or rejecting:<reason>, the intent.
//  4. Passed: publish the completed event (Nats-Msg-Id urlId), then marker
//     done (1). Rejected: see reject.
//  5. The consumer deletes the SQS message (after every record of it).
//
// A completer SIGKILLed at each point:
//   - before 1: nothing written; the message reappears after its
//     visibility timeout and the next delivery is the first.
//   - after 1, during 2 or before 3: verifying; the redelivery verifies
//     again (the object is still in incoming/).
//   - after 3 (verified), before 4's publish reached the stream: the
//     redelivery publishes the event, the first and only one.
//   - after 4's publish reached the stream (ack received or not), before
//     marker done: the redelivery publishes again and the stream drops it
//     as a duplicate by Nats-Msg-Id, as long as it comes within the
//     stream's duplicate window, MINTGATE_DONE_TTL (the completer warns at
//     start about a stream whose window is shorter): far longer than SQS
//     takes to deliver a message again.
//   - after 3 (rejecting): see reject.
//   - after marker done or rejected, before 5: the redelivery changes
//     nothing. After 5 nothing comes back.
//
// Two deliveries of one record handled at once may both verify; only one
// moves the marker in 3, the other follows the value it finds. Both may
// publish: the stream keeps the first (events_duplicate_total).
//
// NATS down: the publish fails, the message is held and retried when NATS
// answers again. A marker older than events (value 1, written with events
// off) counts as done: an upload completed before events were turned on
// gets no event. With events off there is no publish: verified is skipped,
// the verdict is done (1) or, for a rejection, rejecting then rejected.
func (c *completer) complete(ctx context.Context, r awsevents.S3EventRecord, ev events.Event) error {
	got, err := c.set(ctx, quota.Completion{Tenant: ev.Tenant, URLID: ev.URLID, Value: markerVerifying, TTL: c.doneTTL, First: true})
	if err != nil {
		return err
	}
	prev := markerVerifying
	if got.Existed {
		prev = got.Previous
	}
	ev.Size, ev.ETag, ev.CompletedAt = r.S3.Object.Size, r.S3.Object.ETag, completedAt(r)
	// A lost move (another delivery's verdict came first) follows the
	// value it found: at most once from verifying to a verdict, and once
	// more from that verdict to its end.
	for range 3 {
		next, err := c.step(ctx, ev, prev)
		if err != nil || next == "" {
			return err
		}
		prev = next
	}
	return fmt.Errorf("the done marker of %s kept changing", ev.URLID)
}

// step carries the upload on from the marker value prev; it returns the
// value another delivery moved the marker to first, for the caller to
// follow, or "" once this delivery is done with it.
func (c *completer) step(ctx context.Context, ev events.Event, prev string) (string, error) {
	v, reason := quota.ReadDone(prev)
	switch {
	case v == quota.Unverified:
		return c.verify(ctx, ev, prev)
	case v == quota.Refusing && c.events != nil, prev == markerUnpublished:
		// A verdict an earlier delivery reached: its event still names
		// the grant's checksum.
		shape, err := c.store.Shape(ctx, ev.Tenant, ev.URLID)
		if err != nil {
			return "", err
		}
		ev.ChecksumSHA256 = shape.ChecksumSHA256
		if v == quota.Refusing {
			return c.reject(ctx, ev, reason)
		}
		return c.publishCompleted(ctx, ev)
	case v == quota.Refusing:
		return c.reject(ctx, ev, reason)
	case v == quota.Refused:
		// Rejected: incoming/ must be empty; an object there was written
		// after the verdict (extra.go).
		return "", c.extra(ctx, ev)
	}
	// Done: nothing left to do. Its object stays in incoming/, so its URL
	// cannot PUT again (412): no second object to look for.
	return "", nil
}

// counted counts one publish of an upload event: an error, a duplicate the
// stream dropped, or an event stored.
func (c *completer) counted(dup bool, err error) error {
	switch {
	case err != nil:
		c.m.errors.WithLabelValues(opPublish).Inc()
		return err
	case dup:
		c.m.eventsDuplicate.Inc()
	default:
		c.m.eventsPublished.Inc()
	}
	return nil
}

// publishCompleted publishes the completed event of a verified upload
// (with events on) and marks it done.
func (c *completer) publishCompleted(ctx context.Context, ev events.Event) (string, error) {
	if c.events != nil {
		if err := c.counted(c.events.Publish(ctx, ev)); err != nil {
			return "", err
		}
	}
	if _, _, err := c.store.Settle(ctx, ev.Tenant, ev.URLID, markerUnpublished, markerDone); err != nil {
		return "", err
	}
	return "", nil
}

// completedAt is the record's eventTime, or now if S3 sent none that
// parses (s3event.Parse leaves it zero).
func completedAt(r awsevents.S3EventRecord) time.Time {
	if r.EventTime.IsZero() {
		return time.Now().UTC()
	}
	return r.EventTime.UTC()
}

// foreign says why r is not a record of our bucket from S3, or is "".
func (c *completer) foreign(r awsevents.S3EventRecord) string {
	switch {
	case r.EventSource != "aws:s3":
		return ignoredSource
	case r.S3.Bucket.Name != c.bucket:
		return ignoredBucket
	}
	return ""
}

// upload splits a decoded object key incoming/<tenant>/<urlId> as the
// signer makes it; for any other key, reason says why it is not one.
func upload(key string) (tenant, urlID, reason string) {
	tenant, urlID, inside, ok := keys.ParseObject(key)
	if !inside {
		return "", "", ignoredOutside
	}
	if !ok || !keys.ValidTenant(tenant) {
		return "", "", ignoredTenant
	}
	if !canonicalUUID(urlID) {
		return "", "", ignoredURLID
	}
	return tenant, urlID, ""
}

// canonicalUUID accepts only the form the signer issues (uuid.NewString:
// 36 characters, lower-case hex), so the marker's key is the grant's.
func canonicalUUID(s string) bool {
	u, err := uuid.Parse(s)
	return err == nil && u.String() == s
}
