package ledger

import (
	"fmt"
	"time"

	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/tiers"
)

// The one converter between what a grant was charged as the ledger keeps
// it (Credits, by role) and as Redis does (bucket.Bucket, by key): the
// signer writes a grant's credits from the buckets its sign spent from,
// each tagged with its role by shared/tiers (CreditsOf), the sweeper reads
// them back into the buckets its refund credits (Buckets). One table,
// roles, says what each role's key is and what it may hold.

// role is one bucket a grant may name: its key, from the grant's own
// tenant and subject, and whether it is a bucket of bytes.
type role struct {
	name  tiers.Role
	key   func(tenant, subject string) string
	bytes bool
	// anonymous: only an anonymous grant may name it.
	anonymous bool
}

// roles are the buckets a grant may credit.
var roles = []role{
	{name: BucketCaller, key: keys.Bucket},
	{name: BucketTenant, key: func(tenant, _ string) string { return keys.TenantBucket(tenant) }},
	{name: BucketAnonymousAll, key: func(tenant, _ string) string { return keys.AnonBucket(tenant) }, anonymous: true},
	{name: BucketShadow, key: keys.ShadowBucket},
	{name: BucketCallerBytes, key: keys.ByteBucket, bytes: true},
	{name: BucketTenantBytes, key: func(tenant, _ string) string { return keys.TenantByteBucket(tenant) }, bytes: true},
}

// CreditsOf is what a sign that spent from bs was charged, as a grant's
// Credits: each bucket by the role its tag names, with its shape and units
// at issue.
func CreditsOf(bs []tiers.RoleBucket) []Credit {
	out := make([]Credit, len(bs))
	for i, b := range bs {
		out[i] = Credit{Bucket: b.Role, Capacity: b.Limit.Capacity, Refill: b.Limit.Rate, TTL: b.Limit.TTL.Milliseconds(), Units: b.Units}
	}
	return out
}

// Buckets are the buckets credits name for a grant of tenant and subject
// (anonymous: issued under the anonymous tier), each with its shape at
// issue. A credit names a bucket by its role and the key follows from the
// grant's own tenant and subject, so a grant can only ever credit its own
// caller and its own tenant; the anonymous_all bucket only for an
// anonymous grant, each bucket once, units only for a bucket of bytes.
// Anything else is ErrMalformed.
func Buckets(tenant, subject string, anonymous bool, credits []Credit) ([]bucket.Bucket, error) {
	out := make([]bucket.Bucket, 0, len(credits))
	seen := make(map[string]bool, len(credits))
	for _, c := range credits {
		r, ok := roleNamed(c.Bucket)
		if !ok || (r.anonymous && !anonymous) {
			return nil, fmt.Errorf("%w: credits bucket %q", ErrMalformed, c.Bucket)
		}
		if r.bytes != (c.Units > 0) {
			return nil, fmt.Errorf("%w: credits bucket %q with %v units", ErrMalformed, c.Bucket, c.Units)
		}
		key := r.key(tenant, subject)
		if seen[key] {
			return nil, fmt.Errorf("%w: credits bucket %q twice", ErrMalformed, c.Bucket)
		}
		seen[key] = true
		l := bucket.Limit{Capacity: c.Capacity, Rate: c.Refill, TTL: time.Duration(c.TTL) * time.Millisecond}
		if err := l.Validate(); err != nil {
			return nil, fmt.Errorf("%w: bucket %q: %w", ErrMalformed, c.Bucket, err)
		}
		out = append(out, bucket.Bucket{Key: key, Limit: l, Units: c.Units})
	}
	return out, nil
}

func roleNamed(name tiers.Role) (role, bool) {
	for _, r := range roles {
		if r.name == name {
			return r, true
		}
	}
	return role{}, false
}
