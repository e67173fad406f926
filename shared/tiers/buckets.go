package tiers

import (
	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/keys"
)

// Role is what a bucket is to a sign: which of its caller's and its
// tenant's buckets it is. Its value is the name a grant's credits give the
// bucket (ledger.Credit.Bucket, a sealed format): the roles are named here
// once, and the ledger's converter (ledger.CreditsOf, ledger.Buckets)
// reads them, so a grant's credits never recover a role from a key.
type Role string

// The roles of the buckets a sign may spend from. Each is one key of the
// sign's tenant and subject (keys.Bucket, TenantBucket, AnonBucket,
// ShadowBucket, ByteBucket, TenantByteBucket).
const (
	RoleCaller       Role = "caller"        // the caller's tier bucket (user or anonymous)
	RoleTenant       Role = "tenant"        // the tenant's shared bucket
	RoleAnonymousAll Role = "anonymous_all" // every anonymous caller's bucket of the tenant
	RoleShadow       Role = "shadow"        // the caller's ceiling in shadow mode (the signer's, not a tier's)
	RoleCallerBytes  Role = "caller_bytes"  // the caller's bucket of bytes (anonymous_bytes or user_bytes)
	RoleTenantBytes  Role = "tenant_bytes"  // the tenant's bucket of bytes
)

// RoleBucket is one bucket a sign spends from, tagged with its role.
type RoleBucket struct {
	Role Role
	bucket.Bucket
}

// Plain are the buckets of rbs, in their order, without their roles: what
// the scripts take (quota.Ask.Buckets, quota.Due.Buckets).
func Plain(rbs []RoleBucket) []bucket.Bucket {
	out := make([]bucket.Bucket, len(rbs))
	for i, rb := range rbs {
		out[i] = rb.Bucket
	}
	return out
}

// SignBuckets are the buckets one sign spends from, all or none, and an
// expired grant is refunded into: the caller's tier, the tenant's, and for
// an anonymous caller the tenant's anonymous_all, each with this tenant's
// shape of its tier (a refund is capped by it) and tagged with its role.
// ok is false when tier is not a configured tier.
func (s Set) SignBuckets(tenant, subject, tier string) (bs []RoleBucket, ok bool) {
	add := func(role Role, key, tier string) bool {
		l, ok := s.For(tenant, tier)
		bs = append(bs, RoleBucket{Role: role, Bucket: bucket.Bucket{Key: key, Limit: l}})
		return ok
	}
	ok = add(RoleCaller, keys.Bucket(tenant, subject), tier)
	ok = add(RoleTenant, keys.TenantBucket(tenant), Tenant) && ok
	if tier == Anonymous {
		// Every anonymous sign also spends from one bucket per tenant: an
		// IPv6 caller has a fresh /64, and so a fresh anonymous bucket, for
		// each of the 256 in a home /56 (65 536 in a tunnel broker's /48).
		ok = add(RoleAnonymousAll, keys.AnonBucket(tenant), AnonymousAll) && ok
	}
	return bs, ok
}

// ByteBuckets are the buckets of bytes a sign of size bytes spends from
// besides SignBuckets, in the same decision: the caller's tier of bytes
// and the tenant's, each only when configured (for this tenant or by
// default), each with Units size and tagged with its role. None when no
// tier of bytes is set.
func (s Set) ByteBuckets(tenant, subject, tier string, size int64) []RoleBucket {
	var bs []RoleBucket
	if l, ok := s.For(tenant, BytesTierOf(tier)); ok {
		bs = append(bs, RoleBucket{Role: RoleCallerBytes, Bucket: bucket.Bucket{Key: keys.ByteBucket(tenant, subject), Limit: l, Units: float64(size)}})
	}
	if l, ok := s.For(tenant, TenantBytes); ok {
		bs = append(bs, RoleBucket{Role: RoleTenantBytes, Bucket: bucket.Bucket{Key: keys.TenantByteBucket(tenant), Limit: l, Units: float64(size)}})
	}
	return bs
}
