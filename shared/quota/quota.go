// Package quota owns every Redis script that moves a grant's tokens: the
// signer's Spend, Undo, Finish and Cancel, the sweeper's batched Refund, and
// the Status read of one grant. Each script composes the bucket core
// (bucket.NewScript) with its own checks, so a decision and its bookkeeping
// are one atomic step. Each operation is one Go file beside its script
// (spend.go and spend.lua, undo.go and undo.lua, …): its KEYS/ARGV layouts,
// named once (package layout), the embedded script, the method and its
// check; callers see typed operations. quotatest.Twin is the same in Go,
// held equal to the scripts by a differential test.
// SpendBatch runs many Spends of one tenant in one script call, as if one
// after another; a Coalescer gathers concurrent Spends into such calls.
//
// Every key of one call carries the tenant's hash tag {t:<tenant>}, so each
// script is legal on Redis Cluster. The clock is the caller's (now). A Store
// imposes no timeout of its own: callers pass a ctx with a deadline.
//
// Exactly once: whoever gives a grant's token back, the signer's Undo or the
// sweeper's Refund, sets the grant's refunded marker in the same script, and
// the other finds it and credits nothing.
//
// Cancel covers what no reply tells: a Spend that timed out on the
// caller's side may still run on Redis (a stalled server runs what sits in
// its sockets when it resumes). Each request carries a nonce of its own;
// Cancel gives back what that request's Spend took, or leaves a tombstone
// that makes the Spend, if it runs later, take nothing.
package quota

import (
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/bucket"
)

// MarkerTTL is the least time every marker of how a grant ended (done,
// refunded) lives once set: far longer than any redelivery of a grant or
// retry of an undo takes. A sweeper applies no grant issued longer ago
// than MarkerTTL less an hour (the slack for clocks), so every message that
// could still carry a grant meets the marker its end left: a copy replayed
// late, or twice, moves nothing.
const MarkerTTL = 24 * time.Hour

// DoneUnpublished is the done marker's value for an upload whose object
// arrived and whose verdict and upload-completed event (docs/events.md)
// may not be stored yet: what the signer and the sweeper write when they
// learn from S3 that a multipart upload completed, so that the completer
// still verifies it and publishes its event when the ObjectCreated
// arrives. A completer from before the verification gate wrote it first
// too; ReadDone reads it as Unverified, like DoneVerifying.
const DoneUnpublished = "pending"

// RefundedTTL is how long a refunded marker lives, and what GET
// /uploads/{urlId} reports as "refunded" meanwhile.
const RefundedTTL = MarkerTTL

// CancelTTL is how long a cancelled idempotency record (a tombstone) lives:
// longer than any command can sit in a stalled Redis, a failover or a
// socket buffer before it runs, so the Spend it stops finds it. It blocks
// no one meanwhile: any other request on the key passes it.
const CancelTTL = 5 * time.Minute

// MaxCancelled is how many nonces a tombstone keeps, the newest: a client's
// retries with one key cut by one stall, with room to spare.
const MaxCancelled = 32

// maxNonce is the longest nonce: a UUID fits with room to spare.
const maxNonce = 64

// ErrUnavailable is returned when Redis could not answer: unreachable, past
// the ctx deadline, failing, or replying what no script returns. It wraps
// bucket.ErrUnavailable, so errors.Is(err, bucket.ErrUnavailable) holds too.
// Any other error is the caller's mistake (an invalid tenant, a key outside
// the tenant's hash tag, no buckets), which no retry fixes.
var ErrUnavailable = fmt.Errorf("quota: %w", bucket.ErrUnavailable)

// Ask is one sign request as the scripts see it.
type Ask struct {
	Tenant      string          // a tenant id, as keys.ValidTenant accepts
	Idem        string          // the idempotency record's key, keys.Idempotency(...), built by the caller
	Fingerprint string          // of what was asked: only the same request replays
	Nonce       string          // this request's own, fresh for each (a retry with the same key included): Cancel and Undo touch only what it did; 1 to 64 visible ASCII characters, no space (a UUID)
	Buckets     []bucket.Bucket // the caller's tier first, then the tenant's (and for anonymous callers anonymous_all's); all in the tenant's hash tag

	// Until is for Spend only: the last instant, by Redis's own clock
	// (TIME, to the millisecond), at which the Spend may still run. Later
	// it takes nothing, marks nothing and answers Late. A caller that gives
	// up on a Spend at its own deadline sets Until to that deadline on
	// Redis's clock (Clock.Until), so the Spend cannot run after the caller
	// gave up on it: a stalled Redis that resumes finds it late. Zero: no
	// limit.
	Until time.Time

	// Live bounds the caller's live grants (MINTGATE_MAX_LIVE_GRANTS),
	// for Spend only; nil: no bound.
	Live *Live
}

// asked is an Undo's or a Cancel's input: the request, its clock and, for
// an Undo, its grant.
type asked struct {
	now   time.Time
	a     Ask
	urlID string
}

// Store runs the scripts on Redis. Each operation's script is composed
// once, beside it (spendScript in spend.go, …), and shared by every Store.
type Store struct {
	rdb redis.UniversalClient
}

// New returns a Store on rdb, a *redis.Client or a *redis.ClusterClient.
func New(rdb redis.UniversalClient) *Store { return &Store{rdb: rdb} }

// charge is the bucket core's input for bs at cost: every script that
// moves tokens nests bucket.CoreKeys and bucket.Core filled from it.
func charge(now time.Time, cost float64, bs []bucket.Bucket) bucket.Charge {
	return bucket.Charge{Now: now, Cost: cost, Buckets: bs}
}

func unavailable(op string, err error) error {
	return fmt.Errorf("%w: %s: %w", ErrUnavailable, op, err)
}
