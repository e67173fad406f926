package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/mintgate/mintgate/shared/events"
	"github.com/mintgate/mintgate/shared/quota"
)

// verify runs the gate on ev's object and moves the marker from prev (an
// unverified value) to the verdict: verified (done with events off) or
// rejecting:<reason>, then carries the verdict on. It returns the value
// another delivery moved the marker to first, if one did.
func (c *completer) verify(ctx context.Context, ev events.Event, prev string) (string, error) {
	shape, err := c.store.Shape(ctx, ev.Tenant, ev.URLID)
	if err != nil {
		return "", err
	}
	reason, size, err := c.gate.check(ctx, ev.Key, ev.Size, shape)
	switch {
	case errors.Is(err, errGone):
		return c.gone(ctx, ev, prev)
	case err != nil:
		c.m.errors.WithLabelValues(opVerify).Inc()
		return "", err
	}
	ev.Size = size // what S3 holds: the events and the log say it
	ev.ChecksumSHA256 = shape.ChecksumSHA256
	to := markerUnpublished
	switch {
	case reason != "":
		to = quota.Rejecting(reason)
	case c.events == nil:
		to = markerDone
	}
	held, moved, err := c.store.Settle(ctx, ev.Tenant, ev.URLID, prev, to)
	switch {
	case err != nil:
		return "", err
	case !moved:
		return held, nil
	case reason != "":
		c.log.WarnContext(ctx, "upload rejected by the verification gate", "tenant", ev.Tenant, "urlId", ev.URLID, "reason", reason, "size", ev.Size)
		return c.reject(ctx, ev, reason)
	case c.events == nil:
		return "", nil
	}
	return c.publishCompleted(ctx, ev)
}

// gone handles an object that is not in incoming/ when its verification
// reads it. Either another delivery rejected it meanwhile (the marker says
// so: follow it), or someone else deleted it (an operator, the bucket's
// lifecycle rule after a very long outage): there is nothing to verify, so
// the upload stays verifying, is never refunded (the marker exists), and
// the record is dropped, counted as ignored object_gone and logged.
func (c *completer) gone(ctx context.Context, ev events.Event, prev string) (string, error) {
	// Settle from prev to prev moves nothing: it reads the value.
	held, same, err := c.store.Settle(ctx, ev.Tenant, ev.URLID, prev, prev)
	switch {
	case err != nil:
		return "", err
	case !same:
		return held, nil
	}
	c.m.ignored.WithLabelValues(ignoredGone).Inc()
	c.log.Warn("the object of an upload is gone before its verdict; it stays verifying", "tenant", ev.Tenant, "urlId", ev.URLID, "key", ev.Key)
	return "", nil
}

// reject carries out a rejection whose intent (marker rejecting:<reason>)
// is written:
//
//  1. Copy incoming/<tenant>/<urlId> to quarantine/<tenant>/<urlId> in the
//     same bucket, then delete incoming/… (quarantine).
//  2. Publish the rejected event (Nats-Msg-Id urlId) when events are on.
//  3. Marker rejected:<reason> (only from the intent), counted once in
//     mintgate_completer_rejected_total.
//
// The grant's tokens and bytes stay spent: the marker exists throughout,
// so no refund ever happens. A completer SIGKILLed at each point leaves
// the intent, and the redelivery resumes here, never verifying again:
//   - during 1, before the copy: the object in incoming/; it is copied.
//   - after the copy, before the delete: in both; copied again (the same
//     bytes) and deleted.
//   - after the delete: only in quarantine/; the copy finds no source,
//     sees the quarantined object and goes on.
//   - after 2 reached the stream: published again, dropped as a duplicate
//     within the stream's window.
//   - after 3: rejected; the redelivery does nothing.
func (c *completer) reject(ctx context.Context, ev events.Event, reason string) (string, error) {
	if err := c.quarantine(ctx, ev); err != nil {
		c.m.errors.WithLabelValues(opQuarantine).Inc()
		return "", err
	}
	if c.events != nil {
		err := c.counted(c.events.PublishRejected(ctx, events.Rejected{
			URLID: ev.URLID, Tenant: ev.Tenant, Key: ev.Key, Size: ev.Size, Reason: reason, RejectedAt: time.Now().UTC(),
			ChecksumSHA256: ev.ChecksumSHA256,
		}))
		if err != nil {
			return "", err
		}
	}
	_, moved, err := c.store.Settle(ctx, ev.Tenant, ev.URLID, quota.Rejecting(reason), quota.Rejected(reason))
	if err != nil {
		return "", err
	}
	if moved {
		c.m.rejected.WithLabelValues(ev.Tenant, reason).Inc()
	}
	return "", nil
}

// quarantine moves the object from incoming/ to quarantine/, with the
// services' own S3 client. Safe to repeat at any point.
func (c *completer) quarantine(ctx context.Context, ev events.Event) error {
	dst := events.QuarantineKey(ev.Tenant, ev.URLID)
	_, err := c.gate.s3.CopyObject(ctx, &s3.CopyObjectInput{
		Bucket: aws.String(c.bucket), Key: aws.String(dst),
		CopySource: aws.String(c.bucket + "/" + ev.Key), // the signer's keys: no character to escape
	})
	if isCode(err, "NoSuchKey", "NotFound") {
		// Moved by an earlier delivery that died before its marker: the
		// quarantined copy is there. Or gone altogether: nothing to move.
		_, herr := c.gate.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(c.bucket), Key: aws.String(dst)})
		switch {
		case isCode(herr, "NoSuchKey", "NotFound"):
			c.log.Warn("a rejected upload's object is gone; nothing to quarantine", "tenant", ev.Tenant, "urlId", ev.URLID)
			return nil
		case herr != nil:
			return fmt.Errorf("head %s: %w", dst, herr)
		}
		err = nil
	}
	if err != nil {
		return fmt.Errorf("copy %s to %s: %w", ev.Key, dst, err)
	}
	if _, err := c.gate.s3.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(c.bucket), Key: aws.String(ev.Key)}); err != nil {
		return fmt.Errorf("delete %s: %w", ev.Key, err)
	}
	return nil
}
