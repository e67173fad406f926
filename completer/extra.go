package main

import (
	"context"

	"github.com/mintgate/mintgate/shared/events"
)

// Outcomes of mintgate_completer_extra_objects_total.
const (
	// extraDeleted: an object written at incoming/<tenant>/<urlId> after
	// its upload's verdict was deleted from incoming/.
	extraDeleted = "deleted"
	// extraReplaced: it was replaced again before its delete (412); the
	// newer object's own record deletes that one.
	extraReplaced = "replaced"
)

// extra handles an ObjectCreated record for an upload whose rejection is
// carried out (marker rejected:<reason>): one grant, one object. The
// quarantine deleted incoming/<key>, so a URL still live can PUT again
// (If-None-Match: * refuses only while an object is there); what it wrote
// never stays in incoming/ and is never announced: it is deleted, only if
// it is still the object the HEAD saw (If-Match), counted and logged. The
// first object's quarantined copy is never touched. The status stays
// rejected, and no event is published.
//
// The record of the first object, delivered again, finds incoming/ empty
// and does nothing. An upload that completed cannot get here: its object
// stays in incoming/ and its URL's PUT answers 412 (a consumer that
// deletes a completed object while its URL lives reopens the key:
// docs/security.md).
//
// Two deliveries handled at once may both delete (S3 answers a delete of
// an object already gone with success) and both count.
//
// A completer SIGKILLed before the delete leaves the extra object in
// incoming/ and its record in the queue: the redelivery, after the
// visibility timeout, deletes it. After the delete, before the message is
// deleted: the redelivery finds nothing and does nothing.
func (c *completer) extra(ctx context.Context, ev events.Event) error {
	tag, err := c.etag(ctx, ev.Key)
	if err != nil || tag == "" {
		return err
	}
	_, err = c.removeExtra(ctx, ev, tag)
	return err
}

// removeExtra deletes the extra object of etag at ev.Key and counts it:
// deleted, or replaced when incoming/ holds another object by then (whose
// own record removes it).
func (c *completer) removeExtra(ctx context.Context, ev events.Event, etag string) (bool, error) {
	done, err := c.deleteIfMatch(ctx, ev.Key, etag)
	if err != nil {
		c.m.errors.WithLabelValues(opQuarantine).Inc()
		return false, err
	}
	outcome := extraDeleted
	if !done {
		outcome = extraReplaced
	}
	c.m.extra.WithLabelValues(ev.Tenant, outcome).Inc()
	c.log.Warn("an object written after its upload's verdict was removed from incoming/ (one grant, one object)",
		"tenant", ev.Tenant, "urlId", ev.URLID, "key", ev.Key, "etag", etag, "outcome", outcome)
	return true, nil
}
