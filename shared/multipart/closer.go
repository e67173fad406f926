package multipart

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/quota"
)

// closeStore is what a Closer asks of Redis (quota.Store): the abort's
// claim, and the done marker of an upload S3 reports completed.
type closeStore interface {
	ClaimAbort(ctx context.Context, tenant, urlID string) (quota.Closing, error)
	Complete(ctx context.Context, now time.Time, c quota.Completion) (quota.Completed, error)
}

// ender is what a Closer asks of S3: Uploads.End.
type ender interface {
	End(ctx context.Context, key, id string) (Ending, error)
}

// Closer ends multipart grants' uploads for whoever gives up on them: a
// DELETE, or the sweeper once a grant outlived its life. It is the one copy
// of the protocol: claim the abort (no complete runs on the upload from
// then on, and none that runs now is cut short), end the upload in S3, and
// write the done marker of one S3 reports completed. What is given back
// for an upload ended without an object is the caller's to say (a DELETE:
// its bytes; the sweeper: the whole grant), in a refund whose refunded
// marker makes it the only one.
//
// A caller SIGKILLed at any line: before the claim, nothing changed; after
// the claim, before S3's abort, the claim only stops completes (the next
// End, a DELETE's retry or the sweeper's redelivery, claims again and
// aborts); after S3's abort, End again finds the upload gone and its
// object absent (AbortedBefore) and answers Owed again; after the caller's
// refund, the claim answers Refunded.
type Closer struct {
	store   closeStore
	uploads ender
	now     func() time.Time
}

// NewCloser returns a Closer over store (quota.Store, or a caller's wrapper
// of it that adds timeouts and metrics) and uploads.
func NewCloser(store closeStore, uploads ender, now func() time.Time) *Closer {
	return &Closer{store: store, uploads: uploads, now: now}
}

// Closed is how End left a grant.
type Closed int

const (
	// Owed: its upload is aborted, now or before, and no complete can
	// succeed any more: its refund is owed.
	Owed Closed = iota
	// Finished: its upload was completed (its done marker is set, now or
	// before): nothing is owed.
	Finished
	// GivenBack: the grant was refunded before (a DELETE, an earlier
	// sweep, its create's undo): nothing to end, nothing owed.
	GivenBack
	// Busy: a complete holds the grant; End again after Close.Wait.
	Busy
)

// Close is End's answer.
type Close struct {
	Closed Closed
	// Ending is how S3 ended the upload (Owed and Finished by End's own
	// call to S3), for the callers' metrics.
	Ending Ending
	Ended  bool          // S3 was asked (Ending is set)
	Wait   time.Duration // Busy: until the complete's lease ends
}

// ErrClaim is End's error when Redis did not answer the abort's claim:
// nothing was asked of S3.
var ErrClaim = errors.New("multipart: the abort could not be claimed")

// ErrUnmarked is End's error for an upload S3 reports completed whose
// done marker could not be written: its Close still says Finished (nothing
// is owed), and the completer's ObjectCreated writes the marker.
var ErrUnmarked = errors.New("multipart: completed upload not marked done")

// End closes the upload uploadID of grant urlID of tenant for good. Its key
// is the grant's own, from its tenant and urlId: a grant can only ever end
// its own upload. An error other than ErrUnmarked leaves the grant as it
// was or claimed: End again later. ErrClaim: Redis did not answer; any
// other but ErrUnmarked: S3 did not.
func (c *Closer) End(ctx context.Context, tenant, urlID, uploadID string) (Close, error) {
	cl, err := c.store.ClaimAbort(ctx, tenant, urlID)
	switch {
	case err != nil:
		return Close{}, fmt.Errorf("%w: grant %s: %w", ErrClaim, urlID, err)
	case cl.Claim == quota.ClaimDone:
		return Close{Closed: Finished}, nil
	case cl.Claim == quota.ClaimRefunded:
		return Close{Closed: GivenBack}, nil
	case cl.Claim == quota.ClaimBusy:
		return Close{Closed: Busy, Wait: cl.Wait}, nil
	}
	ending, err := c.uploads.End(ctx, keys.Object(tenant, urlID), uploadID)
	if err != nil {
		return Close{}, fmt.Errorf("end the upload of grant %s: %w", urlID, err)
	}
	out := Close{Closed: Owed, Ending: ending, Ended: true}
	if ending != Completed {
		return out, nil
	}
	// Completed, and the completer's ObjectCreated perhaps not handled
	// yet: the done marker now, as the completer's first step writes it,
	// so that its event is still published.
	out.Closed = Finished
	_, err = c.store.Complete(ctx, c.now(), quota.Completion{
		Tenant: tenant, URLID: urlID, Value: quota.DoneUnpublished, TTL: quota.MarkerTTL, First: true,
	})
	if err != nil {
		return out, fmt.Errorf("%w: grant %s: %w", ErrUnmarked, urlID, err)
	}
	return out, nil
}
