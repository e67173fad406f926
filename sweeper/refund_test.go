package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/ledger"
	"github.com/mintgate/mintgate/shared/quota"
	"github.com/mintgate/mintgate/shared/testenv"
	"github.com/mintgate/mintgate/shared/tiers"
)

func newRefunder(t *testing.T) (*refunder, *redis.Client) {
	t.Helper()
	srv := testenv.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	table, err := tiers.Parse(testTiers)
	if err != nil {
		t.Fatal(err)
	}
	return &refunder{store: quota.New(rdb), tiers: tiers.Set{Default: table}, now: time.Now}, rdb
}

func TestRefundScript(t *testing.T) {
	r, rdb := newRefunder(t)
	s := &stack{t: t, rdb: rdb}
	ctx := context.Background()
	g := newGrant("u1", tiers.User, "u:alice", time.Now())
	user, ten := keys.Bucket(tenant, "u:alice"), keys.TenantBucket(tenant)
	s.setTokens(user, 0)
	s.setTokens(ten, 10)

	before := time.Now().UnixMilli()
	if out, err := r.refund(ctx, g); err != nil || out != outcomeRefunded {
		t.Fatalf("first refund: %q, %v", out, err)
	}
	if floor(s.tokens(user)) != 1 || floor(s.tokens(ten)) != 11 {
		t.Errorf("after refund: user %v, tenant %v; want 1 and 11", s.tokens(user), s.tokens(ten))
	}
	v, err := rdb.Get(ctx, keys.Refunded(tenant, "u1")).Result()
	if at, ok := quota.RefundedAt(v); err != nil || !ok || at.UnixMilli() < before {
		t.Errorf("refunded marker = %q, %v; want the refund time ≥ %d", v, err, before)
	}
	if ttl := rdb.PTTL(ctx, keys.Refunded(tenant, "u1")).Val(); ttl < refundedTTL-time.Minute {
		t.Errorf("refunded marker TTL %v", ttl)
	}

	if out, err := r.refund(ctx, g); err != nil || out != outcomeAlready {
		t.Errorf("second refund: %q, %v; want already", out, err)
	}
	if floor(s.tokens(user)) != 1 {
		t.Errorf("a second delivery changed the bucket: %v", s.tokens(user))
	}

	up := newGrant("u2", tiers.User, "u:alice", time.Now())
	rdb.Set(ctx, keys.Done(tenant, "u2"), "1", time.Minute)
	if out, err := r.refund(ctx, up); err != nil || out != outcomeDone {
		t.Errorf("uploaded grant: %q, %v; want done", out, err)
	}
	if floor(s.tokens(user)) != 1 || rdb.Exists(ctx, keys.Refunded(tenant, "u2")).Val() != 0 {
		t.Error("an uploaded grant was refunded")
	}
}

func TestRefundIsCappedByTheIssuingTier(t *testing.T) {
	r, rdb := newRefunder(t)
	s := &stack{t: t, rdb: rdb}
	ctx := context.Background()
	anon := keys.Bucket(tenant, "a:ffee")
	s.setTokens(anon, 4.5)
	for _, id := range []string{"a1", "a2", "a3"} {
		if out, err := r.refund(ctx, newGrant(id, tiers.Anonymous, "a:ffee", time.Now())); err != nil || out != outcomeRefunded {
			t.Fatalf("%s: %q, %v", id, out, err)
		}
		// The user tier holds 1000: the anonymous bucket must stop at its own 5.
		if got := s.tokens(anon); got > 5 {
			t.Fatalf("anonymous bucket at %v after refund %s, above its capacity 5", got, id)
		}
	}
	if got := s.tokens(anon); got != 5 {
		t.Errorf("anonymous bucket %v, want 5", got)
	}
}

// MINTGATE_TENANT_TIERS: a refund for an overridden tenant stops at that
// tenant's capacities; another tenant's stops at the defaults.
func TestRefundIsCappedByTheTenantOverride(t *testing.T) {
	r, rdb := newRefunder(t)
	vars := map[string]string{
		"MINTGATE_TIERS":        testTiers,
		"MINTGATE_TENANT_TIERS": tenant + ":user=3:0.001,tenant=7:0.001",
		"MINTGATE_GRANT_SECRET": testenv.GrantSecret,
		"MINTGATE_S3_BUCKET":    testenv.VersityBucket,
	}
	cfg, err := loadSettings(func(k string) string { return vars[k] })
	if err != nil {
		t.Fatal(err)
	}
	r.tiers = cfg.Tiers
	s := &stack{t: t, rdb: rdb}
	ctx := context.Background()
	for _, tc := range []struct {
		tenant               string
		wantUser, wantTenant float64
	}{
		{tenant, 3, 7},       // the override's capacities
		{"globex", 4.5, 8.5}, // the defaults (1000 and 100000): not capped
	} {
		user, ten := keys.Bucket(tc.tenant, "u:alice"), keys.TenantBucket(tc.tenant)
		s.setTokens(user, 2.5)
		s.setTokens(ten, 6.5)
		for _, id := range []string{"o1", "o2"} {
			g := newGrant(id, tiers.User, "u:alice", time.Now())
			g.Tenant = tc.tenant
			if out, err := r.refund(ctx, g); err != nil || out != outcomeRefunded {
				t.Fatalf("%s %s: %q, %v", tc.tenant, id, out, err)
			}
		}
		if u, tn := s.tokens(user), s.tokens(ten); u < tc.wantUser || u > tc.wantUser+0.01 || tn < tc.wantTenant || tn > tc.wantTenant+0.01 {
			t.Errorf("%s: user %v, tenant %v after two refunds; want %v and %v", tc.tenant, u, tn, tc.wantUser, tc.wantTenant)
		}
	}
}

func TestRefundRefusesWhatCanNeverApply(t *testing.T) {
	r, _ := newRefunder(t)
	for name, g := range map[string]ledger.Grant{
		"tenant tier":  newGrant("x1", tiers.Tenant, "u:alice", time.Now()),
		"unknown tier": newGrant("x2", "gold", "u:alice", time.Now()),
		"no subject":   newGrant("x3", tiers.User, "", time.Now()),
		"bad tenant":   {URLID: "x4", Tenant: "a{b}", Tier: tiers.User, Subject: "u:a", ExpiresAt: time.Now()},
	} {
		if _, err := r.refund(context.Background(), g); !errors.Is(err, ledger.ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}

func TestConcurrentDeliveriesRefundOnce(t *testing.T) {
	r, rdb := newRefunder(t)
	s := &stack{t: t, rdb: rdb}
	user := keys.Bucket(tenant, "u:bob")
	s.setTokens(user, 0)
	g := newGrant("c1", tiers.User, "u:bob", time.Now())
	var wg sync.WaitGroup
	var mu sync.Mutex
	outs := map[string]int{}
	for range 20 {
		wg.Go(func() {
			out, err := r.refund(context.Background(), g)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			outs[out]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if outs[outcomeRefunded] != 1 || outs[outcomeAlready] != 19 || floor(s.tokens(user)) != 1 {
		t.Errorf("outcomes %v, tokens %v; want one refund", outs, s.tokens(user))
	}
}

func TestRefundOnRedisCluster(t *testing.T) {
	addrs := testenv.StartRedisCluster(t)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { rdb.Close() })
	table, _ := tiers.Parse(testTiers)
	r := &refunder{store: quota.New(rdb), tiers: tiers.Set{Default: table}, now: time.Now}
	for _, tn := range []string{"acme", "globex", "initech"} { // different slots
		g := newGrant("cl-"+tn, tiers.User, "u:zed", time.Now())
		g.Tenant = tn
		for _, want := range []string{outcomeRefunded, outcomeAlready} {
			if out, err := r.refund(context.Background(), g); err != nil || out != want {
				t.Fatalf("tenant %s: %q, %v; want %q (all four keys share the tenant's hash tag)", tn, out, err, want)
			}
		}
	}
}

// refund applies one grant, as a batch of one would.
func (r *refunder) refund(ctx context.Context, g ledger.Grant) (string, error) {
	out := make([]string, 1)
	if err := r.refundAll(ctx, []ledger.Grant{g}, out); err != nil {
		return "", err
	}
	if out[0] == outcomeMalformed {
		return "", fmt.Errorf("%w: grant %s", ledger.ErrMalformed, g.URLID)
	}
	return out[0], nil
}

// A grant that spent bytes gives them back with its token: exactly its
// contentLength, capped by the byte tier it was issued under, once; a
// credit of bytes on a bucket of requests is malformed.
func TestRefundGivesTheBytesBack(t *testing.T) {
	r, rdb := newRefunder(t)
	s := &stack{t: t, rdb: rdb}
	ctx := context.Background()
	const mib = 1 << 20
	callerBytes, tenantBytes := keys.ByteBucket(tenant, "u:alice"), keys.TenantByteBucket(tenant)
	s.setTokens(callerBytes, 2*mib)
	s.setTokens(tenantBytes, 23*mib)
	g := newGrant("b1", tiers.User, "u:alice", time.Now())
	g.Credits = []ledger.Credit{
		{Bucket: ledger.BucketCaller, Capacity: 1000, Refill: 0.001},
		{Bucket: ledger.BucketCallerBytes, Capacity: 10 * mib, Refill: 1, Units: 4 * mib},
		{Bucket: ledger.BucketTenantBytes, Capacity: 24 * mib, Refill: 1, Units: 4 * mib},
	}
	for range 2 {
		if _, err := r.refund(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	if got := floor(s.tokens(callerBytes)); got != 6*mib {
		t.Errorf("caller's bytes %v, want 6 MiB (4 MiB back, once)", got)
	}
	if got := floor(s.tokens(tenantBytes)); got != 24*mib {
		t.Errorf("tenant's bytes %v, want 24 MiB (capped)", got)
	}
	bad := newGrant("b2", tiers.User, "u:alice", time.Now())
	bad.Credits = []ledger.Credit{{Bucket: ledger.BucketCaller, Capacity: 1000, Refill: 0.001, Units: 4 * mib}}
	if _, err := r.refund(ctx, bad); !errors.Is(err, ledger.ErrMalformed) {
		t.Errorf("bytes credited to a bucket of requests: %v, want malformed", err)
	}
}
