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
//   - after the copy, before the delete: in both, the same ETag; only
//     the delete is left (never a second copy).
//   - after the delete: only in quarantine/, and the URL, if still live,
//     may PUT again: whatever incoming/ holds then is an extra object,
//     deleted (If-Match its ETag), never copied over the quarantined one
//     (quarantine).
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
// services' own S3 client, and never lets a later object overwrite the
// first one's quarantined copy (the evidence of the verdict). Safe to
// repeat at any point.
//
// Once incoming/<key> is deleted its URL, if still live, can PUT again
// (If-None-Match: * no longer refuses): an extra object (extra.go). So
// every step is conditional on the object it looked at:
//
//  1. HEAD incoming/… (its ETag), then HEAD quarantine/… — in this order.
//  2. Quarantine absent: copy, only if the source is still the object of
//     1 (x-amz-copy-source-if-match). The source is the verdict's object:
//     incoming/ can hold another only after a delete, and we delete only
//     after the copy exists. Two deliveries at once: the one that saw
//     quarantine absent before the other's copy, delete and a re-PUT
//     copies only if the source is still its ETag, so never the re-PUT.
//  3. Delete incoming/…, only if it is still the object of 1 (If-Match).
//     Quarantine present at 1 and its ETag other than incoming's: what
//     incoming/ holds is an extra object (a re-PUT after an earlier
//     delivery's delete), deleted and counted as such.
//
// A precondition that fails (412: the object changed between 1 and the
// step) starts over, three times at most, then holds the message. A
// SIGKILL between the steps leaves the intent (rejecting) and the
// redelivery starts at 1: after the copy, both exist with the same ETag
// and only the delete is left; after the delete, incoming/ is empty (or
// holds an extra object, deleted without touching the quarantined copy).
func (c *completer) quarantine(ctx context.Context, ev events.Event) error {
	for range 3 {
		done, err := c.quarantineOnce(ctx, ev)
		if err != nil || done {
			return err
		}
	}
	return fmt.Errorf("quarantine %s: the object kept changing", ev.Key)
}

// quarantineOnce is one pass of quarantine; done false means a
// precondition failed and the pass is to be made again.
func (c *completer) quarantineOnce(ctx context.Context, ev events.Event) (done bool, err error) {
	dst := events.QuarantineKey(ev.Tenant, ev.URLID)
	src, err := c.etag(ctx, ev.Key)
	if err != nil {
		return false, err
	}
	held, err := c.etag(ctx, dst)
	if err != nil {
		return false, err
	}
	switch {
	case src == "" && held == "":
		c.log.Warn("a rejected upload's object is gone; nothing to quarantine", "tenant", ev.Tenant, "urlId", ev.URLID)
		return true, nil
	case src == "":
		return true, nil // moved by an earlier delivery
	case held == "":
		_, err := c.gate.s3.CopyObject(ctx, &s3.CopyObjectInput{
			Bucket: aws.String(c.bucket), Key: aws.String(dst),
			CopySource:        aws.String(c.bucket + "/" + ev.Key), // the signer's keys: no character to escape
			CopySourceIfMatch: aws.String(src),
		})
		switch {
		case isCode(err, "PreconditionFailed", "NoSuchKey", "NotFound"):
			return false, nil // moved by another delivery meanwhile: look again
		case err != nil:
			return false, fmt.Errorf("copy %s to %s: %w", ev.Key, dst, err)
		}
	case held != src:
		// Quarantined before, and incoming/ holds another object.
		return c.removeExtra(ctx, ev, src)
	}
	return c.deleteIfMatch(ctx, ev.Key, src)
}

// etag is the ETag of key as S3 holds it, "" when there is no such object.
func (c *completer) etag(ctx context.Context, key string) (string, error) {
	out, err := c.gate.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(c.bucket), Key: aws.String(key)})
	switch {
	case isCode(err, "NoSuchKey", "NotFound"):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("head %s: %w", key, err)
	}
	if e := aws.ToString(out.ETag); e != "" {
		return e, nil
	}
	return `""`, nil // an S3 that names no ETag: present all the same
}

// deleteIfMatch deletes key if S3 still holds the object of etag; done
// false when it holds another one (412). It is only ever called once the
// quarantine holds the verdict's object, so deleting whatever incoming/
// holds is always right: the condition keeps the count and the log exact
// (what was deleted is what was looked at), not the evidence. So an S3
// without conditional deletes (AWS before 2025-09, LocalStack: 501
// NotImplemented) gets a plain delete, after the HEAD that compared the
// ETags; a re-PUT landing between that HEAD and the delete is deleted
// too, uncounted, and its own record then finds nothing.
func (c *completer) deleteIfMatch(ctx context.Context, key, etag string) (done bool, err error) {
	in := &s3.DeleteObjectInput{Bucket: aws.String(c.bucket), Key: aws.String(key), IfMatch: aws.String(etag)}
	_, err = c.gate.s3.DeleteObject(ctx, in)
	if isCode(err, "NotImplemented") {
		in.IfMatch = nil
		_, err = c.gate.s3.DeleteObject(ctx, in)
	}
	switch {
	case isCode(err, "PreconditionFailed"):
		return false, nil
	case isCode(err, "NoSuchKey", "NotFound"):
		return true, nil // AWS: If-Match on an object gone answers 404: deleted by another delivery
	case err != nil:
		return false, fmt.Errorf("delete %s: %w", key, err)
	}
	return true, nil
}
