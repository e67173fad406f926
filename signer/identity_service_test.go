package main

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/tiers"
	"github.com/mintgate/mintgate/signer/internal/apierr"
	"github.com/mintgate/mintgate/signer/internal/identity"
	"github.com/mintgate/mintgate/signer/internal/ratelimit"
)

// An anonymous caller gets the anonymous tier, in a bucket named by a hash:
// no Redis key holds the address.
func TestAnonymousBucketIsKeyedByHashedIP(t *testing.T) {
	s := start(t, newStack(t).env(t))
	for i := range 5 {
		if r := s.sign("", newKey(), pngBody, identity.HeaderTenant, "pub"); r.status != http.StatusCreated {
			t.Fatalf("anonymous sign %d: %d %s", i, r.status, r.raw)
		}
	}
	r := s.sign("", newKey(), pngBody, identity.HeaderTenant, "pub")
	mustStatus(t, r, http.StatusTooManyRequests, apierr.CodeTooMany)
	if r.header.Get("RateLimit-Policy") != "5;w=60" || r.header.Get("RateLimit-Limit") != "5" || retryAfter(t, r) != 12 {
		t.Errorf("anonymous 429 headers %v", r.header)
	}
	all, err := s.rdb.Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	bucketRE := regexp.MustCompile(`^rl:\{t:pub\}:sign:a:[0-9a-f]{32}$`)
	var buckets int
	for _, k := range all {
		if strings.Contains(k, "127.0.0.1") || strings.Contains(k, "::1") {
			t.Errorf("key %q holds the client address", k)
		}
		if bucketRE.MatchString(k) {
			buckets++
		}
	}
	if buckets != 1 {
		t.Errorf("%d anonymous bucket keys in %q, want 1", buckets, all)
	}
	if got := s.tokens(keys.TenantBucket("pub")); got != "595.000000" {
		t.Errorf("tenant bucket %q, want 595.000000", got)
	}
	if got := s.tokens(keys.AnonBucket("pub")); got != "145.000000" {
		t.Errorf("anonymous_all bucket %q, want 145.000000", got)
	}
}

// One client rotating CF-Connecting-IP from one socket (issue 10, finding
// 2: 25 × 201 at capacity 5): the header is believed only from the edge's
// ranges, so from any other peer every sign spends the socket address's
// bucket, and without ranges the signer does not start at all.
func TestRotatingCFConnectingIPBuysNoBuckets(t *testing.T) {
	env := newStack(t).env(t)
	env["MINTGATE_IP_SOURCE"] = "cf-connecting-ip"
	if _, err := loadConfig(mapEnv(env)); err == nil || !strings.Contains(err.Error(), "MINTGATE_TRUSTED_PROXIES") {
		t.Fatalf("cf-connecting-ip without trusted proxies: %v; want a refusal naming MINTGATE_TRUSTED_PROXIES", err)
	}
	env["MINTGATE_TRUSTED_PROXIES"] = "173.245.48.0/20,2400:cb00::/32" // an edge; the test's socket is not in it
	s := start(t, env)
	created := 0
	for i := range 25 {
		r := s.sign("", newKey(), pngBody, identity.HeaderTenant, "pub", identity.HeaderCFConnectingIP, fmt.Sprintf("198.51.100.%d", i+1))
		switch r.status {
		case http.StatusCreated:
			created++
		case http.StatusTooManyRequests:
		default:
			t.Fatalf("sign %d: %d %s", i, r.status, r.raw)
		}
	}
	if created != 5 {
		t.Errorf("%d × 201 from one socket with 25 CF-Connecting-IP values, want 5 (one anonymous bucket)", created)
	}
}

// One subscriber with a home /56 has 256 /64s, so 256 anonymous buckets
// (issue 10, finding 1: 130 /64s inside one /56 took 600 × 201, and then a
// signed-in user of the tenant got 429 scope tenant). Every anonymous sign
// also spends from the tenant's anonymous_all bucket, a quarter of the
// tenant tier by default: the /56 gets 150 URLs, and the tenant's users
// keep the rest. A denial by it is tenant-wide, and the headers name it.
func TestAnonymousCallersCannotDrainATenant(t *testing.T) {
	env := newStack(t).env(t)
	env["MINTGATE_IP_SOURCE"] = "xff"
	env["MINTGATE_TRUSTED_PROXIES"] = "127.0.0.1/32,::1/128" // the test's socket: X-Forwarded-For names the client
	s := start(t, env)

	created := 0
	var denied reply
	for i := range 130 {
		ip := fmt.Sprintf("2001:db8:0:ab%02x::1", i) // the i-th /64 of 2001:db8:0:ab00::/56
		for range 5 {
			r := s.sign("", newKey(), pngBody, identity.HeaderTenant, "pub", identity.HeaderForwardedFor, ip)
			switch r.status {
			case http.StatusCreated:
				created++
			case http.StatusTooManyRequests:
				denied = r
			default:
				t.Fatalf("sign from %s: %d %s", ip, r.status, r.raw)
			}
		}
	}
	if created != 150 {
		t.Errorf("%d × 201 for 130 /64s of one /56, want 150 (the anonymous_all capacity)", created)
	}
	if denied.str("scope") != ratelimit.ScopeTenant || denied.header.Get("RateLimit-Limit") != "150" || denied.header.Get("RateLimit-Policy") != "150;w=60" {
		t.Errorf("anonymous_all 429: %s %v; want scope tenant and its headers", denied.raw, denied.header)
	}
	if got := s.tokens(keys.AnonBucket("pub")); got != "0.000000" {
		t.Errorf("anonymous_all bucket %q, want 0.000000", got)
	}

	r := s.sign(s.token("pub", "alice"), newKey(), pngBody)
	if r.status != http.StatusCreated {
		t.Fatalf("a signed-in user of the tenant after the /56: %d %s", r.status, r.raw)
	}
	if got := s.tokens(keys.TenantBucket("pub")); got != "449.000000" {
		t.Errorf("tenant bucket %q, want 449.000000 (150 anonymous, 1 alice)", got)
	}
	if got := s.tokens(keys.AnonBucket("pub")); got != "0.000000" {
		t.Errorf("a user's sign touched anonymous_all: %q", got)
	}
}

// anonymous_all set in MINTGATE_TIERS shapes the bucket, the draft headers
// call it by its name, and a sign undone (the ledger down) gives its token
// back to it as to the others.
func TestAnonymousAllTierIsConfigurable(t *testing.T) {
	st := newStack(t)
	env := st.env(t)
	env["MINTGATE_TIERS"] = tiers.Default + ",anonymous_all=3:3/60s"
	env["MINTGATE_RATELIMIT_HEADERS"] = "draft"
	env["MINTGATE_IP_SOURCE"] = "xff"
	env["MINTGATE_TRUSTED_PROXIES"] = "127.0.0.1/32,::1/128"
	s := start(t, env)
	from := func(i int) []string {
		return []string{identity.HeaderTenant, "pub", identity.HeaderForwardedFor, fmt.Sprintf("198.51.100.%d", i)}
	}

	for i := range 2 {
		if r := s.sign("", newKey(), pngBody, from(i)...); r.status != http.StatusCreated {
			t.Fatalf("anonymous sign %d: %d %s", i, r.status, r.raw)
		}
	}
	st.nats.Stop()
	mustStatus(t, s.sign("", newKey(), pngBody, from(2)...), http.StatusServiceUnavailable, apierr.CodeLedgerDown)
	if got := s.tokens(keys.AnonBucket("pub")); got != "1.000000" {
		t.Errorf("anonymous_all after the undone sign: %q, want 1.000000", got)
	}
	st.nats.Start()
	deadline := time.Now().Add(15 * time.Second)
	for r := s.sign("", newKey(), pngBody, from(2)...); r.status != http.StatusCreated; r = s.sign("", newKey(), pngBody, from(2)...) {
		if r.code() != apierr.CodeLedgerDown || time.Now().After(deadline) {
			t.Fatalf("third anonymous sign once the ledger is back: %d %s", r.status, r.raw)
		}
		time.Sleep(100 * time.Millisecond)
	}
	r := s.sign("", newKey(), pngBody, from(3)...)
	mustStatus(t, r, http.StatusTooManyRequests, apierr.CodeTooMany)
	if r.str("scope") != ratelimit.ScopeTenant || r.header.Get("RateLimit-Policy") != `"anonymous_all";q=3;w=60` || retryAfter(t, r) != 20 {
		t.Errorf("429 by anonymous_all: %s %v", r.raw, r.header)
	}
	if r := s.sign(s.token("pub", "alice"), newKey(), pngBody); r.status != http.StatusCreated {
		t.Errorf("a signed-in user: %d %s", r.status, r.raw)
	}
}
