package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/uuid"

	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/quota"
	"github.com/mintgate/mintgate/shared/s3event"
	"github.com/mintgate/mintgate/shared/uploads"
)

// doneStore sets done markers (quota.Store.Complete): the marker, and the
// take-back of a refund its upload landed after, in one step.
type doneStore interface {
	Complete(ctx context.Context, now time.Time, c quota.Completion) (quota.Completed, error)
}

// eventPublisher stores an upload-completed event (uploads.Publisher).
type eventPublisher interface {
	Publish(ctx context.Context, ev uploads.Event) (duplicate bool, err error)
}

// Values of the done marker. The sweeper, the refund and the status only
// ask whether it exists; the value matters to the completer alone.
const (
	// markerDone: the upload is done and, with events on, its event is
	// stored. Also what a completer with events off writes.
	markerDone = "1"
	// markerUnpublished: the upload is done, its event may not be stored yet.
	markerUnpublished = quota.DoneUnpublished
)

// completer is the service's business: an upload that happened gets its
// done marker, so the sweeper does not refund its token.
type completer struct {
	store   doneStore
	bucket  string        // MINTGATE_S3_BUCKET: the only bucket whose records count
	doneTTL time.Duration // MINTGATE_DONE_TTL: of a pending marker; a done one lives quota.MarkerTTL at least
	// events publishes upload-completed events; nil when they are off.
	events eventPublisher
	m      *metrics
	log    *slog.Logger
}

// handle sets the done marker for every ObjectCreated record of n from S3
// (eventSource aws:s3) for our bucket under incoming/<tenant>/<uuid>, and
// ignores (counting why) the test event and every other record: a done
// marker stops a refund, so a record of another bucket notifying the same
// queue, or one written by anyone else who can send to it, must not set it. It is safe to run twice on the same notification: SET
// of the same value changes nothing. An error means Redis (or NATS)
// failed: the consumer holds the message until the store answers. None of
// its errors is poison (pipeline.ErrPoison): what can never apply — a
// foreign record, a key not the signer's — is ignored and counted, and a
// body that does not parse never reaches it.
//
// With events on, see complete for the order of the writes.
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
		var err error
		if c.events == nil {
			err = c.mark(ctx, tenant, urlID)
		} else {
			err = c.complete(ctx, r, uploads.Event{URLID: urlID, Tenant: tenant, Key: key})
		}
		if err != nil {
			return fmt.Errorf("mark %s done: %w", key, err)
		}
		c.m.done.Inc()
		c.m.lag.Observe(time.Since(completedAt(r)).Seconds())
	}
	return nil
}

// mark sets the done marker of a completed upload (markerDone), taking
// back the grant's refund if it was refunded before its upload landed.
func (c *completer) mark(ctx context.Context, tenant, urlID string) error {
	_, err := c.set(ctx, quota.Completion{Tenant: tenant, URLID: urlID, Value: markerDone, TTL: c.doneTTL})
	return err
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
		c.log.Info("upload landed after its grant was refunded; refund taken back", "tenant", m.Tenant, "urlId", m.URLID)
	}
	return got, err
}

// complete marks the upload of r done and publishes its event, once per
// upload however often S3 or SQS repeat the record:
//
//  1. Marker pending, set only if absent, in the script that takes back a
//     refund its upload landed after (quota.Store.Complete; TTL the longer
//     of MINTGATE_DONE_TTL and quota.MarkerTTL): the marker exists from
//     here on, so the sweeper never refunds an upload that happened, even
//     while NATS is down. The old value tells what an earlier delivery
//     did: none — this is the first completion; pending — an earlier
//     delivery died or failed before step 3; done — the event is stored,
//     nothing more to do (the message is deleted).
//  2. Publish the event, Nats-Msg-Id = urlId, and wait for the ack.
//  3. Marker done (the same script, overwriting; a take-back is never
//     done twice: the refunded marker records it).
//  4. The consumer deletes the SQS message (after every record of it).
//
// A completer SIGKILLed (or failing: Redis or NATS down) at each point:
//   - before 1: nothing written; the message reappears after its
//     visibility timeout and the next delivery is the first.
//   - after 1, before 2's publish reached the stream: the marker says
//     pending; the redelivery publishes the event, the first and only one.
//   - after 2 reached the stream (ack received or not), before 3: pending;
//     the redelivery publishes again and the stream drops it as a duplicate
//     by Nats-Msg-Id, as long as it comes within the stream's duplicate
//     window, MINTGATE_DONE_TTL (the completer warns at start about a
//     stream whose window is shorter): far longer than SQS takes to
//     deliver a message again. A pending marker lives longer (MarkerTTL);
//     a redelivery later than the window may publish a second event.
//   - after 3, before 4: done; the redelivery changes nothing.
//   - after 4: nothing comes back.
//
// Two deliveries of one record handled at once may both find the marker
// pending and both publish: the stream keeps the first, the other is a
// duplicate (mintgate_completer_events_duplicate_total).
//
// NATS down: 2 fails, the message is held (not deleted) and retried when
// NATS answers again; the marker is pending meanwhile. A marker older than
// events (value 1, written with events off) counts as done: an upload
// completed before events were turned on gets no event.
func (c *completer) complete(ctx context.Context, r events.S3EventRecord, ev uploads.Event) error {
	got, err := c.set(ctx, quota.Completion{Tenant: ev.Tenant, URLID: ev.URLID, Value: markerUnpublished, TTL: c.doneTTL, First: true})
	switch {
	case err != nil:
		return err
	case !got.Existed: // the first completion
	case got.Previous != markerUnpublished:
		return nil // its event is stored
	}
	ev.Size, ev.ETag, ev.CompletedAt = r.S3.Object.Size, r.S3.Object.ETag, completedAt(r)
	dup, err := c.events.Publish(ctx, ev)
	if err != nil {
		c.m.errors.WithLabelValues(opPublish).Inc()
		return err
	}
	if dup {
		c.m.eventsDuplicate.Inc()
	} else {
		c.m.eventsPublished.Inc()
	}
	return c.mark(ctx, ev.Tenant, ev.URLID)
}

// completedAt is the record's eventTime, or now if S3 sent none that
// parses (s3event.Parse leaves it zero).
func completedAt(r events.S3EventRecord) time.Time {
	if r.EventTime.IsZero() {
		return time.Now().UTC()
	}
	return r.EventTime.UTC()
}

// foreign says why r is not a record of our bucket from S3, or is "".
func (c *completer) foreign(r events.S3EventRecord) string {
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
