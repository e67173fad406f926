package ledger_test

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/ledger"
)

// TestCreditsRoundTrip: what the signer writes of a sign's buckets, the
// sweeper reads back into the same buckets, for every role; and a grant
// can name no bucket outside its own tenant and subject, nor one twice.
func TestCreditsRoundTrip(t *testing.T) {
	l := bucket.Limit{Capacity: 30, Rate: 0.5, TTL: time.Minute}
	user, anon := keys.UserSubject("ann"), keys.AnonSubject("h1")
	for _, c := range []struct {
		subject   string
		anonymous bool
		bs        []bucket.Bucket
	}{
		{user, false, []bucket.Bucket{
			{Key: keys.Bucket("acme", user), Limit: l},
			{Key: keys.TenantBucket("acme"), Limit: l},
			{Key: keys.ShadowBucket("acme", user), Limit: l},
			{Key: keys.ByteBucket("acme", user), Limit: l, Units: 1024},
			{Key: keys.TenantByteBucket("acme"), Limit: l, Units: 1024},
		}},
		{anon, true, []bucket.Bucket{
			{Key: keys.Bucket("acme", anon), Limit: l},
			{Key: keys.TenantBucket("acme"), Limit: l},
			{Key: keys.AnonBucket("acme"), Limit: l},
		}},
	} {
		cs := ledger.CreditsOf("acme", c.subject, c.bs)
		got, err := ledger.Buckets("acme", c.subject, c.anonymous, cs)
		if err != nil || !reflect.DeepEqual(got, c.bs) {
			t.Errorf("%s: %+v (%v), want %+v", c.subject, got, err, c.bs)
		}
	}
	for name, cs := range map[string][]ledger.Credit{
		"anonymous_all of a user's grant": {{Bucket: ledger.BucketAnonymousAll, Capacity: 30, Refill: 1}},
		"a role no grant has":             {{Bucket: "other", Capacity: 30, Refill: 1}},
		"a bucket twice":                  {{Bucket: ledger.BucketCaller, Capacity: 30, Refill: 1}, {Bucket: ledger.BucketCaller, Capacity: 30, Refill: 1}},
		"units on a bucket of requests":   {{Bucket: ledger.BucketCaller, Capacity: 30, Refill: 1, Units: 5}},
		"no units on a bucket of bytes":   {{Bucket: ledger.BucketCallerBytes, Capacity: 30, Refill: 1}},
		"an impossible shape":             {{Bucket: ledger.BucketCaller, Capacity: 0, Refill: 1}},
	} {
		if _, err := ledger.Buckets("acme", user, false, cs); !errors.Is(err, ledger.ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}
