package ledger_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/ledger"
	"github.com/mintgate/mintgate/shared/tiers"
)

// TestCreditsRoundTrip: what the signer writes of a sign's buckets, as
// shared/tiers tags them, the sweeper reads back into the same buckets,
// for every role (so a role's tag and the key the converter derives from
// it agree); and a grant can name no bucket outside its own tenant and
// subject, nor one twice.
func TestCreditsRoundTrip(t *testing.T) {
	l := bucket.Limit{Capacity: 30, Rate: 0.5, TTL: time.Minute}
	set, err := tiers.Parse(tiers.Default + ",anonymous_bytes=1MiB:1,user_bytes=2MiB:1,tenant_bytes=4MiB:1")
	if err != nil {
		t.Fatal(err)
	}
	tiered := func(subject, tier string, size int64) []tiers.RoleBucket {
		bs, ok := tiers.Set{Default: set}.SignBuckets("acme", subject, tier)
		if !ok {
			t.Fatalf("tier %s not configured", tier)
		}
		return append(bs, tiers.Set{Default: set}.ByteBuckets("acme", subject, tier, size)...)
	}
	user, anon := keys.UserSubject("ann"), keys.AnonSubject("h1")
	shadow := tiers.RoleBucket{Role: tiers.RoleShadow, Bucket: bucket.Bucket{Key: keys.ShadowBucket("acme", user), Limit: l}}
	for _, c := range []struct {
		subject   string
		anonymous bool
		bs        []tiers.RoleBucket
	}{
		{user, false, append(tiered(user, tiers.User, 1024), shadow)},
		{anon, true, tiered(anon, tiers.Anonymous, 512)},
		{anon, true, []tiers.RoleBucket{{Role: tiers.RoleAnonymousAll, Bucket: bucket.Bucket{Key: keys.AnonBucket("acme"), Limit: l}}}},
	} {
		cs := ledger.CreditsOf(c.bs)
		got, err := ledger.Buckets("acme", c.subject, c.anonymous, cs)
		if want := tiers.Plain(c.bs); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %+v (%v), want %+v", c.subject, got, err, want)
		}
	}
	// The sealed form: each credit names its bucket by the role's name.
	b, err := json.Marshal(ledger.CreditsOf(tiered(user, tiers.User, 1024)))
	const want = `[{"bucket":"caller","capacity":30,"refill":0.5,"ttlMs":0},{"bucket":"tenant","capacity":600,"refill":10,"ttlMs":0},` +
		`{"bucket":"caller_bytes","capacity":2097152,"refill":1,"ttlMs":0,"units":1024},{"bucket":"tenant_bytes","capacity":4194304,"refill":1,"ttlMs":0,"units":1024}]`
	if err != nil || string(b) != want {
		t.Errorf("credits of a user's sign:\n%s (%v)\nwant\n%s", b, err, want)
	}
	if n := len(tiered(anon, tiers.Anonymous, 1)); n != 5 {
		t.Errorf("an anonymous sign with every tier of bytes spends from %d buckets, want 5", n)
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
