// Package ratelimit says how a sign decision's buckets look to the caller:
// the RateLimit headers of the scarcest bucket (SetHeaders, in the form
// MINTGATE_RATELIMIT_HEADERS names), the scope of a denial (Scope) and its
// 429 (TooMany). It reads bucket.Results; it never talks to Redis.
package ratelimit

import (
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/tiers"
	"github.com/mintgate/mintgate/signer/internal/apierr"
	"github.com/mintgate/mintgate/signer/internal/identity"
)

// Rate-limit header forms of MINTGATE_RATELIMIT_HEADERS.
const (
	FormLegacy = "legacy" // RateLimit-Limit, -Remaining, -Reset, -Policy: 30;w=60
	FormDraft  = "draft"  // RateLimit-Policy: "user";q=30;w=60 and RateLimit: "user";r=0;t=2
)

// Scopes of a 429: which bucket was short.
const (
	ScopeCaller      = "caller"
	ScopeTenant      = "tenant"
	ScopeCallerBytes = "caller_bytes" // the caller's bucket of bytes
	ScopeTenantBytes = "tenant_bytes" // the tenant's bucket of bytes
	ScopeLiveGrants  = "live_grants"  // MINTGATE_MAX_LIVE_GRANTS: the caller holds that many live grants
)

// Scope names the bucket of bs that denied res. The caller's own bucket,
// and in shadow mode its ceiling, are the caller's; every other one, the
// tenant's and anonymous_all, is shared by the tenant's callers, so a
// denial by it is "tenant"-wide: no retry from a fresh address or account
// of the tenant helps.
func Scope(who identity.Caller, bs []bucket.Bucket, res bucket.Result) string {
	if res.Blocked < 0 || res.Blocked >= len(bs) {
		return ScopeCaller
	}
	switch bs[res.Blocked].Key {
	case keys.Bucket(who.Tenant, who.Subject), keys.ShadowBucket(who.Tenant, who.Subject),
		keys.DownloadBucket(who.Tenant, who.Subject), keys.DownloadShadowBucket(who.Tenant, who.Subject):
		return ScopeCaller
	case keys.ByteBucket(who.Tenant, who.Subject), keys.DownloadByteBucket(who.Tenant, who.Subject):
		return ScopeCallerBytes
	case keys.TenantByteBucket(who.Tenant):
		return ScopeTenantBytes
	}
	return ScopeTenant
}

// TierOf names the tier of one of who's buckets, by its key.
func TierOf(who identity.Caller, b bucket.Bucket) string {
	switch b.Key {
	case keys.TenantBucket(who.Tenant):
		return tiers.Tenant
	case keys.AnonBucket(who.Tenant):
		return tiers.AnonymousAll
	case keys.ByteBucket(who.Tenant, who.Subject):
		return tiers.BytesTierOf(who.Tier)
	case keys.TenantByteBucket(who.Tenant):
		return tiers.TenantBytes
	case keys.DownloadBucket(who.Tenant, who.Subject), keys.DownloadShadowBucket(who.Tenant, who.Subject):
		return tiers.Download
	case keys.DownloadTenantBucket(who.Tenant):
		return tiers.DownloadTenant
	case keys.DownloadByteBucket(who.Tenant, who.Subject):
		return tiers.DownloadBytes
	}
	return who.Tier
}

// The rate-limit headers as http.Header keeps them: set straight into the
// map, so that Header.Set's canonicalisation (an allocation for each of
// these mixed-case names) does not run per response. The bytes on the
// wire are what Set would write.
var (
	hdrRateLimit          = http.CanonicalHeaderKey("RateLimit")
	hdrRateLimitLimit     = http.CanonicalHeaderKey("RateLimit-Limit")
	hdrRateLimitRemaining = http.CanonicalHeaderKey("RateLimit-Remaining")
	hdrRateLimitReset     = http.CanonicalHeaderKey("RateLimit-Reset")
	hdrRateLimitPolicy    = http.CanonicalHeaderKey("RateLimit-Policy")
)

// SetHeaders describes the scarcest bucket of a decision, named by its
// tier, in the form MINTGATE_RATELIMIT_HEADERS asks for:
//
//	legacy: RateLimit-Limit: 30, RateLimit-Remaining: 0, RateLimit-Reset: 2, RateLimit-Policy: 30;w=60
//	draft:  RateLimit-Policy: "user";q=30;w=60, RateLimit: "user";r=0;t=2
func SetHeaders(h http.Header, form string, who identity.Caller, res bucket.Result, buckets []bucket.Bucket) {
	i := res.Scarcest
	if i < 0 || i >= len(buckets) {
		i = 0
	}
	lim, name := buckets[i].Limit, TierOf(who, buckets[i])
	reset := int64(res.Reset / time.Second)
	limit := strconv.FormatInt(res.Limit, 10)
	window := strconv.FormatInt(lim.Window(), 10)
	if form == FormDraft {
		name = strconv.Quote(name)
		v := [...]string{
			name + ";q=" + limit + ";w=" + window,
			name + ";r=" + strconv.FormatInt(res.Remaining, 10) + ";t=" + strconv.FormatInt(reset, 10),
		}
		appendBytePolicies(&v, who, res, buckets)
		h[hdrRateLimitPolicy], h[hdrRateLimit] = v[0:1:1], v[1:2:2]
		return
	}
	v := [...]string{
		limit,
		strconv.FormatInt(res.Remaining, 10),
		strconv.FormatInt(reset, 10),
		limit + ";w=" + window,
	}
	h[hdrRateLimitLimit], h[hdrRateLimitRemaining], h[hdrRateLimitReset], h[hdrRateLimitPolicy] = v[0:1:1], v[1:2:2], v[2:3:3], v[3:4:4]
}

// appendBytePolicies adds to the draft headers v (RateLimit-Policy,
// RateLimit) one item per bucket of bytes of the decision, its quota unit
// content-bytes:
//
//	RateLimit-Policy: "user";q=30;w=60, "user_bytes";q=2147483648;qu="content-bytes";w=86400
//	RateLimit: "user";r=29;t=2, "user_bytes";r=2143289344;t=2
func appendBytePolicies(v *[2]string, who identity.Caller, res bucket.Result, buckets []bucket.Bucket) {
	j := 0
	for _, b := range buckets {
		if b.Units <= 0 || j >= bucket.MaxByteBuckets {
			continue
		}
		left := res.BytesLeft[j]
		j++
		name := strconv.Quote(TierOf(who, b))
		reset := int64(math.Ceil((b.Limit.Capacity - float64(left)) / b.Limit.Rate))
		v[0] += ", " + name + ";q=" + strconv.FormatInt(int64(b.Limit.Capacity), 10) + `;qu="content-bytes";w=` + strconv.FormatInt(b.Limit.Window(), 10)
		v[1] += ", " + name + ";r=" + strconv.FormatInt(left, 10) + ";t=" + strconv.FormatInt(max(reset, 0), 10)
	}
}

// TooMany is the 429 of a denied decision.
func TooMany(who identity.Caller, bs []bucket.Bucket, res bucket.Result) *apierr.Error {
	s := Scope(who, bs, res)
	msg := "you have asked for too many upload URLs; retry later"
	switch s {
	case ScopeTenant:
		msg = "your organisation has asked for too many upload URLs; retry later"
	case ScopeCallerBytes:
		msg = "you have asked to upload too many bytes; retry later"
	case ScopeTenantBytes:
		msg = "your organisation has asked to upload too many bytes; retry later"
	}
	retry := max(res.RetryAfter, time.Second)
	return &apierr.Error{
		Status:     http.StatusTooManyRequests,
		Code:       apierr.CodeTooMany,
		Message:    msg,
		Scope:      s,
		RetryAfter: apierr.RetrySeconds(retry),
		Retry:      retry,
	}
}
