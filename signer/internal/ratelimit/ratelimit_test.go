package ratelimit_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/signer/internal/apierr"
	"github.com/mintgate/mintgate/signer/internal/identity"
	"github.com/mintgate/mintgate/signer/internal/ratelimit"
)

// A 429 names the bucket that was short, so a caller knows whether a
// retry from another account of its tenant could help, and says so in
// its message; Retry-After is at least a second.
func TestTooManyNamesTheShortBucket(t *testing.T) {
	who := identity.Caller{Tenant: "acme", Subject: "u:alice", Tier: "user"}
	bs := []bucket.Bucket{
		{Key: keys.Bucket(who.Tenant, who.Subject)},
		{Key: keys.TenantBucket(who.Tenant)},
		{Key: keys.ByteBucket(who.Tenant, who.Subject)},
		{Key: keys.TenantByteBucket(who.Tenant)},
		{Key: keys.ShadowBucket(who.Tenant, who.Subject)},
		{Key: keys.AnonBucket(who.Tenant)},
	}
	cases := []struct {
		name    string
		blocked int
		retry   time.Duration
		scope   string
		message string
		after   int64
	}{
		{"the caller's bucket", 0, 3 * time.Second, ratelimit.ScopeCaller, "you have asked for too many upload URLs; retry later", 3},
		{"the tenant's bucket", 1, 2 * time.Second, ratelimit.ScopeTenant, "your organisation has asked for too many upload URLs; retry later", 2},
		{"the caller's bytes", 2, time.Second, ratelimit.ScopeCallerBytes, "you have asked to upload too many bytes; retry later", 1},
		{"the tenant's bytes", 3, time.Second, ratelimit.ScopeTenantBytes, "your organisation has asked to upload too many bytes; retry later", 1},
		{"the caller's shadow ceiling", 4, 0, ratelimit.ScopeCaller, "you have asked for too many upload URLs; retry later", 1},
		{"anonymous_all, shared by the tenant", 5, time.Second, ratelimit.ScopeTenant, "your organisation has asked for too many upload URLs; retry later", 1},
		{"no bucket named", -1, time.Second, ratelimit.ScopeCaller, "you have asked for too many upload URLs; retry later", 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := ratelimit.TooMany(who, bs, bucket.Result{Blocked: tc.blocked, RetryAfter: tc.retry})
			if e.Status != http.StatusTooManyRequests || e.Code != apierr.CodeTooMany {
				t.Errorf("%d %s, want 429 %s", e.Status, e.Code, apierr.CodeTooMany)
			}
			if e.Scope != tc.scope || e.Message != tc.message || e.RetryAfter != tc.after {
				t.Errorf("scope %q message %q retryAfter %d, want %q %q %d", e.Scope, e.Message, e.RetryAfter, tc.scope, tc.message, tc.after)
			}
		})
	}
}
