// Package keys holds every Redis key format mintgate uses. They are a public
// interface (operators' scripts read them) and all keys of one tenant share
// the hash tag {t:<tenant>}, so every script stays legal on Redis Cluster.
package keys

import (
	"regexp"
	"strconv"
	"strings"
)

var tenantRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidTenant reports whether id may name a tenant: a brace or a colon
// would break the key scheme.
func ValidTenant(id string) bool { return tenantRE.MatchString(id) }

// MaxUserID is the longest user id accepted, in bytes.
const MaxUserID = 256

// ValidUser reports whether id may name a user: any non-empty string up to MaxUserID bytes.
func ValidUser(id string) bool { return id != "" && len(id) <= MaxUserID }

// UserSubject is the bucket subject of an authenticated user.
func UserSubject(userID string) string { return "u:" + userID }

// AnonSubject is the bucket subject of an anonymous caller, by IP hash.
func AnonSubject(ipHash string) string { return "a:" + ipHash }

func tag(tenant string) string { return "{t:" + tenant + "}" }

// Bucket is the key of a caller's bucket in a tenant.
func Bucket(tenant, subject string) string { return "rl:" + tag(tenant) + ":sign:" + subject }

// TenantBucket is the key of the bucket every caller of a tenant shares.
func TenantBucket(tenant string) string { return "rl:" + tag(tenant) + ":sign:tenant" }

// AnonBucket is the key of the bucket every anonymous caller of a tenant
// also spends from (tier anonymous_all). No subject collides with it:
// subjects start with "u:" or "a:".
func AnonBucket(tenant string) string { return "rl:" + tag(tenant) + ":sign:anon" }

// ByteBucket is the key of a caller's bucket of bytes in a tenant (tiers
// anonymous_bytes and user_bytes): a sign spends its contentLength there.
func ByteBucket(tenant, subject string) string { return "rl:" + tag(tenant) + ":bytes:" + subject }

// TenantByteBucket is the key of the bucket of bytes every caller of a
// tenant shares (tier tenant_bytes).
func TenantByteBucket(tenant string) string { return "rl:" + tag(tenant) + ":bytes:tenant" }

// LiveGrants is the key of a caller's live grants (MINTGATE_MAX_LIVE_GRANTS):
// a sorted set of urlIds, each scored by its grant's end of life (unix ms).
func LiveGrants(tenant, subject string) string { return "rl:" + tag(tenant) + ":live:" + subject }

// TagOf is the tenant of a key made here, read from its hash tag.
func TagOf(key string) (tenant string, ok bool) {
	_, rest, ok := strings.Cut(key, "{t:")
	if !ok {
		return "", false
	}
	tenant, _, ok = strings.Cut(rest, "}")
	return tenant, ok
}

// ShadowBucket is the key of a caller's ceiling in shadow mode
// (MINTGATE_SHADOW_TENANTS): MINTGATE_SHADOW_CAP times its tier, spent by
// every sign of a shadowed tenant's caller and never let through, so that
// shadow mode is no open mint.
func ShadowBucket(tenant, subject string) string { return "rl:" + tag(tenant) + ":shadow:" + subject }

// Idempotency is the key of an idempotency record:
// sign:idem:{t:<tenant>}:<len(subject)>:<subject>:<key>. The subject's
// length in bytes comes first because a user id and an Idempotency-Key may
// both hold colons: without it, user "alice:x" with key "y" and user
// "alice" with key "x:y" would share one record.
//
// Records of the older format without the length (docs/production.md,
// "Upgrading across a key format change") are simply not read.
func Idempotency(tenant, subject, key string) string {
	return "sign:idem:" + tag(tenant) + ":" + strconv.Itoa(len(subject)) + ":" + subject + ":" + key
}

// Done is the marker the completer sets when a grant's object was created.
func Done(tenant, urlID string) string { return "sign:done:" + tag(tenant) + ":" + urlID }

// Refunded is the marker the sweeper sets when it refunded a grant.
func Refunded(tenant, urlID string) string { return "sign:refunded:" + tag(tenant) + ":" + urlID }

// Closing is a multipart grant's closing record: the claims that keep its
// complete (the signer's) and its abort (a DELETE's, the sweeper's) from
// ever running at once (quota.Store.Close).
func Closing(tenant, urlID string) string { return "sign:closing:" + tag(tenant) + ":" + urlID }

// Grant is the signer's record of an issued grant, read by GET /uploads/{urlId}.
func Grant(tenant, urlID string) string { return "sign:grant:" + tag(tenant) + ":" + urlID }

// ObjectPrefix is where every upload lands in the bucket: the prefix the
// bucket's ObjectCreated notification and lifecycle rule are set on.
const ObjectPrefix = "incoming/"

// Object is the S3 key of grant urlID's upload: incoming/<tenant>/<urlId>.
// The signer signs it; the completer reads the grant back from it.
func Object(tenant, urlID string) string { return ObjectPrefix + tenant + "/" + urlID }

// ParseObject splits an object key made by Object. ok is false for a key
// outside ObjectPrefix (outside); tenant or urlID may still be invalid, for
// the caller to check.
func ParseObject(key string) (tenant, urlID string, inside, ok bool) {
	rest, inside := strings.CutPrefix(key, ObjectPrefix)
	if !inside {
		return "", "", false, false
	}
	tenant, urlID, ok = strings.Cut(rest, "/")
	return tenant, urlID, true, ok
}

// DownloadBucket is the key of a caller's bucket of download grants in a
// tenant (tier download): POST /uploads/{urlId}/download spends one there.
func DownloadBucket(tenant, subject string) string {
	return "rl:" + tag(tenant) + ":download:" + subject
}

// DownloadTenantBucket is the key of the bucket of download grants every
// caller of a tenant shares (tier download_tenant). No subject collides
// with it: subjects start with "u:" or "a:".
func DownloadTenantBucket(tenant string) string { return "rl:" + tag(tenant) + ":download:tenant" }

// DownloadByteBucket is the key of a caller's bucket of downloaded bytes
// (tier download_bytes): a download grant spends its object's size there.
func DownloadByteBucket(tenant, subject string) string {
	return "rl:" + tag(tenant) + ":download_bytes:" + subject
}

// DownloadShadowBucket is a caller's ceiling of download grants in shadow
// mode (MINTGATE_SHADOW_TENANTS), as ShadowBucket is of its signs.
func DownloadShadowBucket(tenant, subject string) string {
	return "rl:" + tag(tenant) + ":download_shadow:" + subject
}

// DownloadIdempotency is the key of a download grant's idempotency record,
// laid out as Idempotency's, in a namespace of its own: a download and a
// sign with one Idempotency-Key are two requests.
func DownloadIdempotency(tenant, subject, key string) string {
	return "download:idem:" + tag(tenant) + ":" + strconv.Itoa(len(subject)) + ":" + subject + ":" + key
}

// DownloadOnce is the in-flight record of a download grant asked without
// an Idempotency-Key, named by the request's own nonce: no later request
// names it, and it expires with its in-flight mark.
func DownloadOnce(tenant, nonce string) string { return "download:once:" + tag(tenant) + ":" + nonce }
