// Package ledger is the grant ledger on NATS JetStream: what the signer
// hands out (a Grant, one presigned upload URL) and the stream that
// remembers each grant until it is due for a refund check. A Client
// records grants (Dial, Client.Record) and consumes them when due
// (Client.Consume); the operator's EnsureStream makes the stream.
//
// Grants are group-committed: the grants of concurrent signs travel in one
// ledger message, a Batch, sealed with an HMAC so that nobody without the
// secret can make the sweepers refund anything.
package ledger

import (
	"errors"
	"fmt"
	"time"

	"github.com/mintgate/mintgate/shared/tiers"
)

// Grant is one issued URL: what the sweeper needs to refund its token if the
// upload never happened.
type Grant struct {
	URLID   string `json:"urlId"`
	Tenant  string `json:"tenant"`
	Tier    string `json:"tier"`    // the tier the caller's token came from: "user" or "anonymous"
	Subject string `json:"subject"` // the caller's bucket subject: "u:<user>" or "a:<ip hash>"
	Key     string `json:"key"`     // the object key, incoming/<tenant>/<urlId>
	// UploadID marks a multipart grant: the S3 upload the signer created
	// for Key. A sweeper aborts it before it refunds the grant, and never
	// refunds one that was completed. Empty for a single PUT. Roll
	// sweepers out before signers that set it: an older sweeper would
	// refund the grant without aborting its upload.
	UploadID  string    `json:"uploadId,omitempty"`
	IssuedAt  time.Time `json:"issuedAt"`
	ExpiresAt time.Time `json:"expiresAt"`
	// DueAt is the earliest time the grant may be refunded: its expiry
	// plus the signer's grace. It is sealed with the grant, so no copy of
	// the message, whenever it is delivered, can be applied sooner. Zero in
	// grants of older signers (ExpiresAt + the sweeper's grace then).
	DueAt time.Time `json:"dueAt,omitzero"`
	// Credits are every bucket the grant's sign spent from, each with its
	// shape at issue: a refund gives back exactly this, whatever tiers the
	// sweeper runs with. Empty in grants of older signers (the sweeper's
	// tiers then).
	Credits []Credit `json:"credits,omitempty"`
	// Degraded marks a grant issued from in-process buckets while Redis was
	// unavailable: it never charged Redis, so no sweeper ever credits Redis
	// for it.
	Degraded bool `json:"degraded,omitempty"`
	// Shadow marks a grant issued in shadow mode (MINTGATE_SHADOW_TENANTS)
	// although a bucket was short: it charged nothing, so no sweeper ever
	// credits anything for it. Roll sweepers out before signers that set
	// it: an older sweeper would refund it.
	Shadow bool `json:"shadow,omitempty"`
	// What the caller asked for, kept for the upload records
	// (shared/records): the declared type and length, the SHA-256 the URL
	// is bound to (base64, empty for none and for multipart) and the
	// caller's filename (empty when none was given). No sweeper reads them.
	ContentType    string `json:"contentType,omitempty"`
	ContentLength  int64  `json:"contentLength,omitempty"`
	ChecksumSHA256 string `json:"checksumSHA256,omitempty"`
	Filename       string `json:"filename,omitempty"`
	// Trace is the W3C traceparent of the sign's span, empty when the
	// signer does not trace: the sweeper's refund or abort of the grant
	// joins the upload's trace. Older sweepers ignore it.
	Trace string `json:"trace,omitempty"`
}

// Credit is one bucket a grant's sign spent from, as it was then.
type Credit struct {
	Bucket   tiers.Role `json:"bucket"`   // which of the grant's buckets: BucketCaller, BucketTenant, BucketAnonymousAll or BucketShadow
	Capacity float64    `json:"capacity"` // the tier's capacity at issue, the refund's cap
	Refill   float64    `json:"refill"`   // tokens per second at issue
	TTL      int64      `json:"ttlMs"`    // the bucket key's idle expiry at issue, in ms
	// Units is, for a bucket of bytes (BucketCallerBytes,
	// BucketTenantBytes), what the sign spent there: its contentLength.
	// Absent for a bucket of requests, which a refund gives one token.
	Units float64 `json:"units,omitempty"`
}

// The buckets a Credit names: the roles of shared/tiers, where they are
// named once (tiers.Role). Each names one key of the grant's tenant and
// subject (keys.Bucket, TenantBucket, AnonBucket, ShadowBucket), so a grant
// can only ever credit its own caller's and its own tenant's buckets.
const (
	BucketCaller       = tiers.RoleCaller       // the caller's tier bucket (user or anonymous)
	BucketTenant       = tiers.RoleTenant       // the tenant's shared bucket
	BucketAnonymousAll = tiers.RoleAnonymousAll // every anonymous caller's bucket of the tenant
	BucketShadow       = tiers.RoleShadow       // the caller's ceiling in shadow mode
	BucketCallerBytes  = tiers.RoleCallerBytes  // the caller's bucket of bytes (anonymous_bytes or user_bytes)
	BucketTenantBytes  = tiers.RoleTenantBytes  // the tenant's bucket of bytes
)

// Due is when g may be refunded at the earliest: its sealed DueAt, and
// never before its expiry plus grace (the sweeper's own), whichever is
// later.
func (g Grant) Due(grace time.Duration) time.Time {
	floor := g.ExpiresAt.Add(grace)
	if g.DueAt.After(floor) {
		return g.DueAt
	}
	return floor
}

// ErrNotDue marks a batch that holds a grant not due yet (NotDue): a copy
// delivered early, or a sweeper whose clock runs behind the server's. The
// consume loop delivers it again at its due time instead of after a
// backoff; it is never applied before.
var ErrNotDue = errors.New("ledger: not due yet")

// NotDueError is ErrNotDue with the time it falls due.
type NotDueError struct{ Until time.Time }

func (e *NotDueError) Error() string {
	return fmt.Sprintf("%v: due at %s", ErrNotDue, e.Until.UTC().Format(time.RFC3339Nano))
}

// Is makes errors.Is(err, ErrNotDue) hold.
func (e *NotDueError) Is(target error) bool { return target == ErrNotDue }

// NotDue is the error a handler returns for a batch that falls due at until.
func NotDue(until time.Time) error { return &NotDueError{Until: until} }

// Batch is one ledger message: the grants of signs that were committed
// together, due at once when the latest of them is due.
type Batch struct {
	ID     string  `json:"id"`
	Grants []Grant `json:"grants"`
}

// DueAt is when the batch may be swept: the latest due time among its
// grants (Grant.Due). No grant of the batch is ever due after it; none is
// due before it by more than the spread of expiries in the batch (the
// commit window).
func (b Batch) DueAt(grace time.Duration) time.Time {
	var latest time.Time
	for _, g := range b.Grants {
		if d := g.Due(grace); d.After(latest) {
			latest = d
		}
	}
	return latest
}
