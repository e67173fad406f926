package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/signer/internal/apierr"
	"github.com/mintgate/mintgate/signer/internal/ratelimit"
)

// bytesTiers: a user may sign 10 MiB, a tenant 24 MiB, and neither refills
// during a test (the signer's clock stands still).
const bytesTiers = "anonymous=5:5/60s,user=30:0.001,tenant=600:0.001,user_bytes=10MiB:1KiB/1h,tenant_bytes=24MiB:1KiB/1h"

func sized(n int64) string { return fmt.Sprintf(`{"contentType":"image/png","contentLength":%d}`, n) }

// A sign spends its contentLength from the caller's and the tenant's
// buckets of bytes in the same decision as its token: refused for bytes,
// it spends no token; exactly what is left still fits, one byte more does
// not; the tenant's budget is shared by its users.
func TestBytesQuota(t *testing.T) {
	const mib = 1 << 20
	env := newStack(t).env(t)
	env["MINTGATE_TIERS"] = bytesTiers
	s := start(t, env)
	alice, bob, carol := s.token("acme", "alice"), s.token("acme", "bob"), s.token("acme", "carol")
	aliceTokens := keys.Bucket("acme", keys.UserSubject("alice"))

	for range 2 {
		if r := s.sign(alice, newKey(), sized(4*mib)); r.status != http.StatusCreated {
			t.Fatalf("4 MiB: %d %s", r.status, r.raw)
		}
	}
	r := s.sign(alice, newKey(), sized(4*mib))
	mustStatus(t, r, http.StatusTooManyRequests, apierr.CodeTooMany)
	if r.str("scope") != ratelimit.ScopeCallerBytes {
		t.Fatalf("third 4 MiB: scope %q, want %s", r.str("scope"), ratelimit.ScopeCallerBytes)
	}
	retryAfter(t, r)
	if got := s.tokens(aliceTokens); got != "28.000000" {
		t.Fatalf("after the refusal for bytes alice's tokens are %s, want 28 (no token spent)", got)
	}
	if got := s.tokens(keys.ByteBucket("acme", keys.UserSubject("alice"))); got != fmt.Sprintf("%d.000000", 2*mib) {
		t.Fatalf("alice's bytes %s, want %d", got, 2*mib)
	}
	mustStatus(t, s.sign(alice, newKey(), sized(2*mib+1)), http.StatusTooManyRequests, apierr.CodeTooMany)
	if r := s.sign(alice, newKey(), sized(2*mib)); r.status != http.StatusCreated {
		t.Fatalf("exactly the 2 MiB left: %d %s", r.status, r.raw)
	}

	// The tenant's 24 MiB: alice took 10, bob takes 10, carol 4; then none.
	for _, n := range []int64{4 * mib, 4 * mib, 2 * mib} {
		if r := s.sign(bob, newKey(), sized(n)); r.status != http.StatusCreated {
			t.Fatalf("bob %d: %d %s", n, r.status, r.raw)
		}
	}
	if r := s.sign(carol, newKey(), sized(4*mib)); r.status != http.StatusCreated {
		t.Fatalf("carol 4 MiB: %d %s", r.status, r.raw)
	}
	r = s.sign(carol, newKey(), sized(1))
	mustStatus(t, r, http.StatusTooManyRequests, apierr.CodeTooMany)
	if r.str("scope") != ratelimit.ScopeTenantBytes {
		t.Fatalf("past the tenant's bytes: scope %q, want %s", r.str("scope"), ratelimit.ScopeTenantBytes)
	}

	// Larger than the caller's whole quota: no refill ever fits it.
	mustStatus(t, s.sign(s.token("acme", "dave"), newKey(), sized(10*mib+1)), http.StatusRequestEntityTooLarge, apierr.CodeTooLarge)

	// GET /uploads/quota shows both buckets of bytes, in bytes.
	q := s.do(http.MethodGet, "/uploads/quota", map[string]string{"Authorization": "Bearer " + carol}, "")
	cb, _ := q.body["callerBytes"].(map[string]any)
	tb, _ := q.body["tenantBytes"].(map[string]any)
	if q.status != http.StatusOK || cb["limit"] != float64(10*mib) || cb["remaining"] != float64(6*mib) || tb["limit"] != float64(24*mib) || tb["remaining"] != float64(0) {
		t.Fatalf("quota: %d %s", q.status, q.raw)
	}
	if caller, _ := q.body["caller"].(map[string]any); caller["limit"] != float64(30) {
		t.Fatalf("quota's caller side is not the bucket of requests: %s", q.raw)
	}
	if m := s.metrics(); !strings.Contains(m, `mintgate_signer_bytes_granted_total{tenant="acme"} 2.5165824e+07`) {
		t.Errorf("bytes granted: want 24 MiB for acme in\n%s", grep(m, "bytes_granted"))
	}
}

// grep is the lines of text that hold s.
func grep(text, s string) string {
	var out []string
	for l := range strings.Lines(text) {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "")
}

// 50 signs at once against a bucket of bytes that holds exactly 30 of
// them: exactly 30 are issued, whatever the interleaving (one script
// decides each, its tokens and its bytes together).
func TestBytesQuotaExactUnderConcurrency(t *testing.T) {
	env := newStack(t).env(t)
	env["MINTGATE_TIERS"] = "anonymous=5:5/60s,user=1000:0.001,tenant=100000:0.001,user_bytes=30000:1/1h"
	s := start(t, env)
	alice := s.token("acme", "alice")
	answers := racing(50, func() int { return s.sign(alice, newKey(), sized(1000)).status })
	if answers[http.StatusCreated] != 30 || answers[http.StatusTooManyRequests] != 20 {
		t.Fatalf("50 signs of 1000 bytes on 30000: %v, want 30 × 201 and 20 × 429", answers)
	}
	if got := s.tokens(keys.Bucket("acme", keys.UserSubject("alice"))); got != "970.000000" {
		t.Fatalf("tokens %s, want 970: a sign refused for bytes spent a token", got)
	}
}

// With draft headers, the byte policies sit beside the request policy with
// qu="content-bytes"; the legacy headers keep describing the requests.
func TestBytesDraftHeaders(t *testing.T) {
	const mib = 1 << 20
	env := newStack(t).env(t)
	env["MINTGATE_TIERS"] = bytesTiers
	env["MINTGATE_RATELIMIT_HEADERS"] = "draft"
	s := start(t, env)
	r := s.sign(s.token("acme", "alice"), newKey(), sized(4*mib))
	if r.status != http.StatusCreated {
		t.Fatalf("sign: %d %s", r.status, r.raw)
	}
	policy, left := r.header.Get("RateLimit-Policy"), r.header.Get("RateLimit")
	if policy != `"user";q=30;w=30000, "user_bytes";q=10485760;qu="content-bytes";w=36864000, "tenant_bytes";q=25165824;qu="content-bytes";w=88473600` {
		t.Errorf("RateLimit-Policy: %s", policy)
	}
	if !strings.Contains(left, `"user_bytes";r=6291456;t=`) || !strings.Contains(left, `"tenant_bytes";r=20971520;t=`) {
		t.Errorf("RateLimit: %s", left)
	}
}
