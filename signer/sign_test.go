package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mintgate/mintgate/api"
	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/ops"
	"github.com/mintgate/mintgate/shared/testenv"
	"github.com/mintgate/mintgate/shared/tiers"
	"github.com/mintgate/mintgate/signer/internal/apierr"
	"github.com/mintgate/mintgate/signer/internal/gate"
	"github.com/mintgate/mintgate/signer/internal/identity"
	"github.com/mintgate/mintgate/signer/internal/ratelimit"
	"github.com/mintgate/mintgate/signer/internal/request"
)

func TestSequentialSignsStopAtTheUserLimit(t *testing.T) {
	s := start(t, newStack(t).env(t))
	tok := s.token("acme", "alice")
	var created, limited []reply
	for range 34 {
		r := s.sign(tok, newKey(), pngBody)
		switch r.status {
		case http.StatusCreated:
			created = append(created, r)
		case http.StatusTooManyRequests:
			limited = append(limited, r)
		default:
			t.Fatalf("sign: %d %s", r.status, r.raw)
		}
	}
	if len(created) != 30 || len(limited) != 4 {
		t.Fatalf("%d created, %d limited; want 30 and 4", len(created), len(limited))
	}
	if got := created[0].header.Get("RateLimit-Remaining"); got != "29" {
		t.Errorf("first 201 RateLimit-Remaining %q, want 29", got)
	}
	r := limited[0]
	for h, want := range map[string]string{
		"RateLimit-Limit":     "30",
		"RateLimit-Remaining": "0",
		"RateLimit-Policy":    "30;w=60",
		"RateLimit-Reset":     "60",
		"Retry-After":         "2", // one token at 0.5/s
	} {
		if got := r.header.Get(h); got != want {
			t.Errorf("429 %s: %q, want %q", h, got, want)
		}
	}
	retryAfter(t, r)
	mustStatus(t, r, http.StatusTooManyRequests, apierr.CodeTooMany)
	if r.str("scope") != ratelimit.ScopeCaller || r.body["retryAfter"] != float64(2) || r.str("message") == "" {
		t.Errorf("429 body %s", r.raw)
	}
	if _, ok := r.body["url"]; ok {
		t.Error("a 429 carries a url")
	}

	// Two seconds later exactly one more token has dripped in.
	s.clock.Add(2 * time.Second)
	if r := s.sign(tok, newKey(), pngBody); r.status != http.StatusCreated {
		t.Fatalf("after refill: %d %s", r.status, r.raw)
	}
	mustStatus(t, s.sign(tok, newKey(), pngBody), http.StatusTooManyRequests, apierr.CodeTooMany)
}

func TestConcurrentSignsSpendExactlyTheBucket(t *testing.T) {
	s := start(t, newStack(t).env(t))
	tok := s.token("acme", "alice")
	var mu sync.Mutex
	count := map[int]int{}
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			r := s.sign(tok, newKey(), pngBody)
			mu.Lock()
			count[r.status]++
			mu.Unlock()
			if r.status != http.StatusCreated && r.status != http.StatusTooManyRequests {
				t.Logf("%d %s", r.status, r.raw)
			}
		})
	}
	wg.Wait()
	if count[http.StatusCreated] != 30 || count[http.StatusTooManyRequests] != 20 {
		t.Fatalf("statuses %v; want 30 × 201 and 20 × 429\n%s", count, s.log)
	}
}

func TestReplayReturnsTheSameBodyAndSpendsNothing(t *testing.T) {
	s := start(t, newStack(t).env(t))
	tok := s.token("acme", "alice")
	userBucket := keys.Bucket("acme", keys.UserSubject("alice"))
	key := newKey()

	first := s.sign(tok, key, pngBody)
	if first.status != http.StatusCreated || first.header.Get(request.HeaderReplayed) != "" {
		t.Fatalf("first: %d %v %s", first.status, first.header, first.raw)
	}
	before := s.tokens(userBucket)
	s.clock.Add(10 * time.Second) // a refill would show if the bucket were touched
	again := s.sign(tok, key, pngBody)
	if again.status != http.StatusOK || again.header.Get(request.HeaderReplayed) != "true" {
		t.Fatalf("replay: %d replayed=%q %s", again.status, again.header.Get(request.HeaderReplayed), again.raw)
	}
	if string(again.raw) != string(first.raw) {
		t.Errorf("replay body differs:\n%s\n%s", again.raw, first.raw)
	}
	if after := s.tokens(userBucket); after != before || before != "29.000000" {
		t.Errorf("bucket t %q → %q; want 29.000000 unchanged", before, after)
	}

	other := `{"contentType":"image/png","contentLength":2048}`
	mustStatus(t, s.sign(tok, key, other), http.StatusUnprocessableEntity, apierr.CodeKeyReused)
	// The same key of another user is another record.
	if r := s.sign(s.token("acme", "bob"), key, other); r.status != http.StatusCreated {
		t.Errorf("bob with alice's key: %d %s", r.status, r.raw)
	}
}

// Concurrent signs of one tenant share their completing writes
// (quota.FinishCoalescer); each replay still answers its own 201 body.
func TestConcurrentSignsReplayTheirOwnBodies(t *testing.T) {
	env := newStack(t).env(t)
	// 40 replays at once from one address: past the address's limit on
	// replays (TestSignReplaysAreBoundedPerAddress), not measured here.
	env["MINTGATE_READ_LIMIT"] = "off"
	s := start(t, env)
	type signed struct{ tok, key, body string }
	var (
		mu     sync.Mutex
		firsts []signed
		wg     sync.WaitGroup
	)
	for i := range 40 {
		wg.Go(func() {
			tok := s.token("acme", fmt.Sprintf("u%d", i%4))
			key := newKey()
			r := s.sign(tok, key, pngBody)
			if r.status != http.StatusCreated {
				t.Errorf("sign: %d %s", r.status, r.raw)
				return
			}
			mu.Lock()
			firsts = append(firsts, signed{tok, key, string(r.raw)})
			mu.Unlock()
		})
	}
	wg.Wait()
	for _, f := range firsts {
		wg.Go(func() {
			again := s.sign(f.tok, f.key, pngBody)
			if again.status != http.StatusOK || string(again.raw) != f.body {
				t.Errorf("replay of %s: %d %s, want %s", f.key, again.status, again.raw, f.body)
			}
		})
	}
	wg.Wait()
}

// A replay carries the RateLimit headers of what the buckets hold now,
// read without spending: after two signs, a replay of the first says 28.
func TestReplayCarriesTheRateLimitHeaders(t *testing.T) {
	s := start(t, newStack(t).env(t))
	tok := s.token("acme", "alice")
	key := newKey()
	if r := s.sign(tok, key, pngBody); r.status != http.StatusCreated {
		t.Fatalf("first: %d %s", r.status, r.raw)
	}
	if r := s.sign(tok, newKey(), pngBody); r.status != http.StatusCreated {
		t.Fatalf("second: %d %s", r.status, r.raw)
	}
	again := s.sign(tok, key, pngBody)
	if again.status != http.StatusOK || again.header.Get(request.HeaderReplayed) != "true" {
		t.Fatalf("replay: %d replayed=%q %s", again.status, again.header.Get(request.HeaderReplayed), again.raw)
	}
	for h, want := range map[string]string{
		"RateLimit-Limit":     "30",
		"RateLimit-Remaining": "28",
		"RateLimit-Policy":    "30;w=60",
	} {
		if got := again.header.Get(h); got != want {
			t.Errorf("replay %s %q, want %q", h, got, want)
		}
	}
	if got := s.tokens(keys.Bucket("acme", keys.UserSubject("alice"))); got != "28.000000" {
		t.Errorf("bucket t %q after the replay, want 28.000000", got)
	}
}

// Two users whose ids and keys cut the same way (issue 10, finding 5):
// "alice:x" with key "y" and "alice" with key "x:y" are two requests, two
// records, two URLs; neither replays nor blocks the other.
func TestIdempotencyKeysOfDifferentUsersNeverCollide(t *testing.T) {
	s := start(t, newStack(t).env(t))
	first := s.sign(s.token("acme", "alice:x"), "y", pngBody)
	if first.status != http.StatusCreated {
		t.Fatalf("alice:x with key y: %d %s", first.status, first.raw)
	}
	second := s.sign(s.token("acme", "alice"), "x:y", `{"contentType":"image/png","contentLength":2048}`)
	if second.status != http.StatusCreated || second.str("urlId") == first.str("urlId") {
		t.Fatalf("alice with key x:y: %d %s; want her own 201", second.status, second.raw)
	}
	third := s.sign(s.token("acme", "alice"), "x:y", pngBody) // same body as the first: still not its replay
	mustStatus(t, third, http.StatusUnprocessableEntity, apierr.CodeKeyReused)
	if r := s.sign(s.token("acme", "alice:x"), "y", pngBody); r.status != http.StatusOK || string(r.raw) != string(first.raw) {
		t.Errorf("alice:x's replay: %d %s", r.status, r.raw)
	}
}

// holdInFlight makes key of user look held by a first request of pngBody:
// its in-flight mark, as the sign script leaves it between the decision
// and the ledger's ack.
func (s *signer) holdInFlight(tenant, user, key string) attempt {
	s.t.Helper()
	req := request.Sign{Key: key, ContentType: "image/png", ContentLength: 1024}
	a := newAttempt(identity.Caller{Tenant: tenant, Subject: keys.UserSubject(user), Tier: tiers.User}, req, tiers.Set{}, 0)
	ctx := context.Background()
	if err := s.rdb.HSet(ctx, a.ask.Idem, "state", "pending", "fp", a.ask.Fingerprint).Err(); err != nil {
		s.t.Fatal(err)
	}
	s.rdb.PExpire(ctx, a.ask.Idem, gate.InFlightTTL)
	return a
}

func TestKeyInFlightConflicts(t *testing.T) {
	s := start(t, newStack(t).env(t))
	tok := s.token("acme", "alice")
	key := newKey()
	a := s.holdInFlight("acme", "alice", key)
	ctx := context.Background()

	mustStatus(t, s.sign(tok, key, pngBody), http.StatusConflict, apierr.CodeInProgress)
	mustStatus(t, s.sign(tok, key, `{"contentType":"image/png","contentLength":1}`), http.StatusUnprocessableEntity, apierr.CodeKeyReused)
	if got := s.tokens(keys.Bucket("acme", keys.UserSubject("alice"))); got != "" {
		t.Errorf("a conflicting request touched the bucket: t=%q", got)
	}
	if ttl := s.rdb.PTTL(ctx, a.ask.Idem).Val(); ttl <= 0 || ttl > gate.InFlightTTL {
		t.Errorf("in-flight mark TTL %v", ttl)
	}
}

func TestTenantLimitLeavesTheUserBucketAlone(t *testing.T) {
	env := newStack(t).env(t)
	env["MINTGATE_TIERS"] = "anonymous=5:5/60s,user=30:0.5,tenant=3:0.1"
	s := start(t, env)
	alice := s.token("acme", "alice")
	for _, tok := range []string{alice, s.token("acme", "bob"), s.token("acme", "carol")} {
		if r := s.sign(tok, newKey(), pngBody); r.status != http.StatusCreated {
			t.Fatalf("sign: %d %s", r.status, r.raw)
		}
	}
	aliceBucket := keys.Bucket("acme", keys.UserSubject("alice"))
	before := s.tokens(aliceBucket)
	r := s.sign(alice, newKey(), pngBody)
	mustStatus(t, r, http.StatusTooManyRequests, apierr.CodeTooMany)
	if r.str("scope") != ratelimit.ScopeTenant {
		t.Errorf("scope %q, want tenant", r.str("scope"))
	}
	if r.header.Get("RateLimit-Limit") != "3" || r.header.Get("RateLimit-Policy") != "3;w=30" || retryAfter(t, r) != 10 {
		t.Errorf("headers describe the wrong bucket: %v", r.header)
	}
	if after := s.tokens(aliceBucket); after != before || before != "29.000000" {
		t.Errorf("alice's bucket %q → %q; a tenant-level 429 must not charge her", before, after)
	}
	m := s.metrics()
	if !strings.Contains(m, `mintgate_signer_rate_limited_total{scope="tenant",tenant="acme"} 1`) {
		t.Error("the tenant-level 429 is not counted by tenant and scope")
	}
	// Another tenant is not affected.
	if r := s.sign(s.token("other", "alice"), newKey(), pngBody); r.status != http.StatusCreated {
		t.Errorf("other tenant: %d %s", r.status, r.raw)
	}
}

// MINTGATE_TENANT_TIERS: a tenant's override shapes its callers' buckets
// and headers; every other tenant keeps the defaults.
func TestTenantTierOverride(t *testing.T) {
	s := startWith(t, "MINTGATE_TENANT_TIERS", "small:user=2:0.1")
	small := s.token("small", "alice")
	s.signN(small, 2)
	r := s.sign(small, newKey(), pngBody)
	mustStatus(t, r, http.StatusTooManyRequests, apierr.CodeTooMany)
	if r.str("scope") != ratelimit.ScopeCaller || r.header.Get("RateLimit-Limit") != "2" || r.header.Get("RateLimit-Policy") != "2;w=20" || retryAfter(t, r) != 10 {
		t.Errorf("429 does not describe the overridden user bucket: %s %v", r.raw, r.header)
	}

	other := s.token("acme", "alice")
	for i := range 3 {
		r := s.sign(other, newKey(), pngBody)
		if r.status != http.StatusCreated {
			t.Fatalf("other tenant sign %d: %d %s", i+1, r.status, r.raw)
		}
		if i == 0 && (r.header.Get("RateLimit-Limit") != "30" || r.header.Get("RateLimit-Policy") != "30;w=60") {
			t.Errorf("other tenant headers %v; want the default user tier", r.header)
		}
	}
}

func TestRedisDownFailsClosedAndRecovers(t *testing.T) {
	st := newStack(t)
	env := st.env(t)
	env["MINTGATE_REDIS_TIMEOUT"] = "150ms" // the documented default: the bound under test
	s := start(t, env)
	tok := s.token("acme", "alice")
	if r := s.sign(tok, newKey(), pngBody); r.status != http.StatusCreated {
		t.Fatalf("sign: %d %s", r.status, r.raw)
	}

	st.redis.Stop()
	began := time.Now()
	r := s.sign(tok, newKey(), pngBody)
	took := time.Since(began)
	mustStatus(t, r, http.StatusServiceUnavailable, apierr.CodeLimiterDown)
	retryAfter(t, r)
	if took >= 300*time.Millisecond {
		t.Errorf("503 took %v; the bound is 300ms", took)
	}
	t.Logf("503 limiter_unavailable after %v", took)
	if _, ok := r.body["url"]; ok || strings.Contains(string(r.raw), "X-Amz") {
		t.Errorf("a URL left while Redis was down: %s", r.raw)
	}
	if r := s.do(http.MethodGet, "/readyz", nil, ""); r.status != http.StatusServiceUnavailable || !strings.Contains(string(r.raw), "redis") {
		t.Errorf("readyz with Redis down: %d %s", r.status, r.raw)
	}

	st.redis.Start()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := s.sign(tok, newKey(), pngBody)
		if r.status == http.StatusCreated {
			break
		}
		if r.status != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("after Redis came back: %d %s", r.status, r.raw)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestScriptFlushIsInvisible(t *testing.T) {
	s := start(t, newStack(t).env(t))
	tok := s.token("acme", "alice")
	ctx := context.Background()
	key := newKey()
	first := s.sign(tok, key, pngBody)
	if first.status != http.StatusCreated {
		t.Fatalf("sign: %d %s", first.status, first.raw)
	}
	for i := range 3 {
		if err := s.rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if r := s.sign(tok, newKey(), pngBody); r.status != http.StatusCreated {
			t.Fatalf("sign %d after SCRIPT FLUSH: %d %s", i, r.status, r.raw)
		}
		if err := s.rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if r := s.sign(tok, key, pngBody); r.status != http.StatusOK {
			t.Fatalf("replay %d after SCRIPT FLUSH: %d %s", i, r.status, r.raw)
		}
	}
}

func TestClusterSignsReplaysAndLimits(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-master cluster")
	}
	env := newStack(t).env(t)
	env["MINTGATE_REDIS_CLUSTER_ADDRS"] = strings.Join(testenv.StartRedisCluster(t), ",")
	s := start(t, env)

	for _, tenant := range []string{"acme", "globex", "initech"} { // spread over slots
		tok := s.token(tenant, "alice")
		key := newKey()
		first := s.sign(tok, key, pngBody)
		if first.status != http.StatusCreated {
			t.Fatalf("%s: %d %s", tenant, first.status, first.raw)
		}
		if r := s.sign(tok, key, pngBody); r.status != http.StatusOK || string(r.raw) != string(first.raw) {
			t.Fatalf("%s replay: %d %s", tenant, r.status, r.raw)
		}
		for range 29 {
			if r := s.sign(tok, newKey(), pngBody); r.status != http.StatusCreated {
				t.Fatalf("%s: %d %s", tenant, r.status, r.raw)
			}
		}
		r := s.sign(tok, newKey(), pngBody)
		mustStatus(t, r, http.StatusTooManyRequests, apierr.CodeTooMany)
		if got := s.tokens(keys.Bucket(tenant, keys.UserSubject("alice"))); got != "0.000000" {
			t.Errorf("%s: user bucket t=%q", tenant, got)
		}
		if st := s.do(http.MethodGet, "/uploads/"+first.str("urlId"), map[string]string{"Authorization": "Bearer " + tok}, ""); st.str("status") != statusPending {
			t.Errorf("%s status: %d %s", tenant, st.status, st.raw)
		}
	}
	if strings.Contains(s.log.String(), "CROSSSLOT") {
		t.Errorf("CROSSSLOT in the log:\n%s", s.log)
	}
}

func TestLedgerDownRefundsAndFreesTheKey(t *testing.T) {
	st := newStack(t)
	s := start(t, st.env(t))
	tok := s.token("acme", "alice")
	ctx := context.Background()
	if r := s.sign(tok, newKey(), pngBody); r.status != http.StatusCreated {
		t.Fatalf("sign: %d %s", r.status, r.raw)
	}
	userBucket := keys.Bucket("acme", keys.UserSubject("alice"))
	tenantBucket := keys.TenantBucket("acme")
	userBefore, tenantBefore := s.tokens(userBucket), s.tokens(tenantBucket)

	st.nats.Stop()
	key := newKey()
	r := s.sign(tok, key, pngBody)
	mustStatus(t, r, http.StatusServiceUnavailable, apierr.CodeLedgerDown)
	retryAfter(t, r)
	if _, ok := r.body["url"]; ok {
		t.Errorf("a URL left without its ledger record: %s", r.raw)
	}
	if u, tn := s.tokens(userBucket), s.tokens(tenantBucket); u != userBefore || tn != tenantBefore {
		t.Errorf("buckets after the refund: user %q → %q, tenant %q → %q", userBefore, u, tenantBefore, tn)
	}
	if n := s.rdb.Exists(ctx, keys.Idempotency("acme", keys.UserSubject("alice"), key)).Val(); n != 0 {
		t.Error("the idempotency key is still held after the refund")
	}

	if r := s.do(http.MethodGet, "/readyz", nil, ""); r.status != http.StatusServiceUnavailable || !strings.Contains(string(r.raw), "nats") {
		t.Errorf("readyz with NATS down: %d %s", r.status, r.raw)
	}

	// The ledger logs through the signer's logger, to run's stdout.
	if logs := s.log.String(); !strings.Contains(logs, `"msg":"nats disconnected","service":"signer","component":"grant-ledger"`) {
		t.Errorf("no ledger line about the disconnect in the signer's log:\n%s", logs)
	}

	st.nats.Start()
	deadline := time.Now().Add(15 * time.Second)
	for {
		r := s.sign(tok, key, pngBody)
		if r.status == http.StatusCreated {
			break
		}
		if r.code() != apierr.CodeLedgerDown || time.Now().After(deadline) {
			t.Fatalf("retry with the same key once the ledger is back: %d %s", r.status, r.raw)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := s.tokens(userBucket); got != "28.000000" {
		t.Errorf("user bucket %q after two issued URLs, want 28.000000", got)
	}
}

// While Redis is down each pod grants MINTGATE_DEGRADED_SHARE of every
// limit on its own (issue 10, finding 10: a fixed quarter was safe up to
// four pods, and the HPA runs up to twenty): by default 5 %, so twenty
// pods together stay within the tenant's limit.
func TestDegradedModeGrantsALocalShare(t *testing.T) {
	cases := []struct {
		share string
		limit string // RateLimit-Limit of the degraded user bucket
		want  int    // URLs issued of 10 asked
	}{
		{"", "1", 1},     // 5 % of 30 is 1.5 tokens: one whole URL
		{"0.25", "7", 7}, // a quarter of 30 is 7.5 tokens: seven
	}
	for _, tc := range cases {
		t.Run("share="+tc.share, func(t *testing.T) {
			st := newStack(t)
			env := st.env(t)
			env["MINTGATE_DEGRADED_MODE"] = "local"
			env["MINTGATE_REDIS_TIMEOUT"] = "150ms"
			if tc.share != "" {
				env["MINTGATE_DEGRADED_SHARE"] = tc.share
			}
			s := start(t, env)
			tok := s.token("acme", "alice")
			st.redis.Stop()

			var created int
			for range 10 {
				r := s.sign(tok, newKey(), pngBody)
				switch r.status {
				case http.StatusCreated:
					created++
				case http.StatusTooManyRequests:
					if r.header.Get("RateLimit-Limit") != tc.limit {
						t.Errorf("degraded 429 RateLimit-Limit %q, want %s", r.header.Get("RateLimit-Limit"), tc.limit)
					}
				default:
					t.Fatalf("degraded sign: %d %s", r.status, r.raw)
				}
			}
			if created != tc.want {
				t.Errorf("%d URLs issued without Redis, want %d", created, tc.want)
			}
			if !strings.Contains(s.metrics(), "mintgate_signer_degraded_decisions_total 10") {
				t.Errorf("degraded decisions not counted")
			}
		})
	}
}

func TestRateLimitDraftHeaders(t *testing.T) {
	env := newStack(t).env(t)
	env["MINTGATE_RATELIMIT_HEADERS"] = "draft"
	s := start(t, env)
	tok := s.token("acme", "alice")
	r := s.sign(tok, newKey(), pngBody)
	if got := r.header.Get("RateLimit-Policy"); got != `"user";q=30;w=60` {
		t.Errorf("RateLimit-Policy %q", got)
	}
	if got := r.header.Get("RateLimit"); got != `"user";r=29;t=2` {
		t.Errorf("RateLimit %q", got)
	}
	if r.header.Get("RateLimit-Limit") != "" {
		t.Error("draft form also sends RateLimit-Limit")
	}
}

func TestSignResponseAndMetrics(t *testing.T) {
	s := start(t, newStack(t).env(t))
	key := newKey()
	r := s.sign(s.token("acme", "alice"), key, pngBody)
	if r.status != http.StatusCreated {
		t.Fatalf("sign: %d %s", r.status, r.raw)
	}
	var body struct {
		api.SignResponse
		Headers map[string]string `json:"headers"` // every header, not only those we know
	}
	if err := json.Unmarshal(r.raw, &body); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"If-None-Match": "*", "Content-Type": "image/png", "Content-Length": "1024"}
	for k, v := range want {
		if body.Headers[k] != v {
			t.Errorf("headers[%s] = %q, want %q", k, body.Headers[k], v)
		}
	}
	if len(body.Headers) != len(want) || body.Method != http.MethodPut || body.ExpiresIn != 120 {
		t.Errorf("body %s", r.raw)
	}
	if want := s.clock.Now().Add(120 * time.Second).UTC(); !body.ExpiresAt.Equal(want) {
		t.Errorf("expiresAt %v, want %v", body.ExpiresAt, want)
	}
	if body.Key != "incoming/acme/"+body.URLID {
		t.Errorf("key %q for urlId %q", body.Key, body.URLID)
	}
	// The completed record lives as long as the URL; the grant record
	// outlives the sweeper's check by an hour.
	ctx := context.Background()
	idem := keys.Idempotency("acme", keys.UserSubject("alice"), key)
	if state := s.rdb.HGet(ctx, idem, "state").Val(); state != "done" {
		t.Errorf("idempotency state %q, want done", state)
	}
	if ttl := s.rdb.PTTL(ctx, idem).Val(); ttl <= 110*time.Second || ttl > 120*time.Second {
		t.Errorf("idempotency record TTL %v, want the URL's 120s", ttl)
	}
	grantKey := keys.Grant("acme", body.URLID)
	// 2 × (120 s + 30 s grace): past the sweeper's check, and never past
	// the done marker (MINTGATE_DONE_TTL ≥ 2 × (TTL + grace) from the upload).
	if ttl := s.rdb.PTTL(ctx, grantKey).Val(); ttl <= 290*time.Second || ttl > 300*time.Second {
		t.Errorf("grant record TTL %v, want 2 × (120s + 30s grace)", ttl)
	}
	if sub := s.rdb.HGet(ctx, grantKey, "subject").Val(); sub != "u:alice" {
		t.Errorf("grant record subject %q", sub)
	}
	m := s.metrics()
	for _, series := range []string{
		`mintgate_signer_signs_total{outcome="issued"} 1`,
		`mintgate_signer_redis_script_seconds_count{script="sign"} 1`,
		`mintgate_signer_redis_script_seconds_count{script="complete"} 1`,
		`mintgate_signer_ledger_seconds_count{result="ok"} 1`,
	} {
		if !strings.Contains(m, series) {
			t.Errorf("metrics lack %s", series)
		}
	}
}

// stallTiers leave room for every sign of a stall test, with a refill too
// slow to show in six decimals (the tests' clock stands still besides).
const stallTiers = "anonymous=5:5/60s,user=1000:1/1h,tenant=10000:1/1h"

// bucket is a bucket's stored hash.
func (s *signer) bucket(key string) map[string]string {
	s.t.Helper()
	h, err := s.rdb.HGetAll(context.Background(), key).Result()
	if err != nil {
		s.t.Fatalf("hgetall %s: %v", key, err)
	}
	return h
}

// stallSigner starts a signer on st with env, and signs n times at once
// for alice so that its Redis pool holds open connections: the signs a
// stall then cuts write their EVALSHA into Redis's socket, as in
// production (on a new connection the handshake would time out first,
// sending nothing). The buckets' hashes are read after.
func stallSigner(t *testing.T, st stack, env map[string]string, n int, opts ...option) (s *signer, m *metrics, tok string, user, tenant map[string]string) {
	t.Helper()
	env["MINTGATE_TIERS"] = stallTiers
	reg := ops.NewRegistry()
	m = newMetrics(reg)
	s = start(t, env, append([]option{withMetrics(reg, m)}, opts...)...)
	tok = s.token("acme", "alice")
	s.signAtOnce(tok, newKeys(n), http.StatusCreated, "")
	return s, m, tok, s.bucket(keys.Bucket("acme", keys.UserSubject("alice"))), s.bucket(keys.TenantBucket("acme"))
}

func newKeys(n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = newKey()
	}
	return ks
}

// signAtOnce sends one sign per key, all at once, and requires each to
// answer status with the error code (none: "").
func (s *signer) signAtOnce(tok string, ks []string, status int, code string) {
	var wg sync.WaitGroup
	for _, k := range ks {
		wg.Go(func() {
			if r := s.sign(tok, k, pngBody); r.status != status || r.code() != code {
				s.t.Errorf("sign %s: %d %s, want %d %s", k, r.status, r.raw, status, code)
			}
		})
	}
	wg.Wait()
}

// cancels is what m counted, by result.
func cancels(m *metrics) map[string]float64 {
	out := map[string]float64{}
	for _, r := range []string{gate.CancelRefunded, gate.CancelTombstone, gate.CancelGaveUp} {
		out[r] = testutil.ToFloat64(m.Cancels.WithLabelValues(r))
	}
	return out
}

func waitUntil(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pause stalls Redis with SIGSTOP and waits until the kernel has stopped
// it, so that no sign sent next slips through.
func pause(t *testing.T, r *testenv.Redis) {
	t.Helper()
	r.Pause()
	t.Cleanup(r.Resume) // a stopped server would not stop at the end
	stat := fmt.Sprintf("/proc/%d/stat", r.PID())
	waitUntil(t, 5*time.Second, "redis-server stopped", func() bool {
		b, err := os.ReadFile(stat)
		if err != nil {
			t.Fatal(err)
		}
		// pid (comm) state …: the state follows the last ')'.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		return len(f) > 0 && f[0] == "T"
	})
}

// settled waits until the signer has settled want cancels, and requires
// none given up or dropped.
func settled(t *testing.T, s *signer, m *metrics, want float64) map[string]float64 {
	t.Helper()
	var c map[string]float64
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c = cancels(m)
		if c[gate.CancelRefunded]+c[gate.CancelTombstone]+c[gate.CancelGaveUp] >= want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cancels %v, %v dropped, %v signs limiter_unavailable; want %v settled\n%s", c, testutil.ToFloat64(m.CancelDropped),
				testutil.ToFloat64(m.signs.WithLabelValues("limiter_unavailable")), want, s.log)
		}
	}
	if c[gate.CancelGaveUp] != 0 || testutil.ToFloat64(m.CancelDropped) != 0 {
		t.Errorf("cancels %v, %v dropped; want none given up or dropped\n%s", c, testutil.ToFloat64(m.CancelDropped), s.log)
	}
	return c
}

// A Redis stall (SIGSTOP here; a slow fork or a failover in production)
// cuts signs short: each answers 503 limiter_unavailable after the
// timeout, but its EVALSHA sits in Redis's socket and runs when Redis
// resumes. With Redis's clock read, each such Spend finds itself past its
// deadline and takes nothing; without (before a first read succeeds) the
// canceller gives every token back. Either way the user's and the
// tenant's buckets end exactly where they were, and a retry with the same
// Idempotency-Key is a 201, not a 409.
func TestRedisStallLosesNoToken(t *testing.T) {
	for _, clocked := range []bool{true, false} {
		name := map[bool]string{true: "deadline", false: "canceller alone"}[clocked]
		t.Run(name, func(t *testing.T) { redisStall(t, clocked) })
	}
}

func redisStall(t *testing.T, clocked bool) {
	const n = 12
	st := newStack(t)
	env := st.env(t)
	var opts []option
	if !clocked {
		opts = append(opts, withoutRedisClock)
	}
	s, m, tok, user, tenant := stallSigner(t, st, env, n, opts...)
	if clocked {
		waitUntil(t, 5*time.Second, "the signer read Redis's clock", func() bool { return strings.Contains(s.log.String(), "read redis's clock") })
	}
	userBucket, tenantBucket := keys.Bucket("acme", keys.UserSubject("alice")), keys.TenantBucket("acme")

	pause(t, st.redis)
	// A client that retries its key while the stall lasts: two requests,
	// one key, both cut; and n others at once.
	retried, cut := newKey(), newKeys(n)
	var wg sync.WaitGroup
	wg.Go(func() {
		for range 2 {
			s.signAtOnce(tok, []string{retried}, http.StatusServiceUnavailable, apierr.CodeLimiterDown)
		}
	})
	s.signAtOnce(tok, cut, http.StatusServiceUnavailable, apierr.CodeLimiterDown)
	wg.Wait()
	st.redis.Resume()

	c := settled(t, s, m, n+2)
	t.Logf("cancels after the stall: %v", c)
	switch {
	case clocked && c[gate.CancelRefunded] != 0:
		t.Errorf("%v cut spends took tokens when Redis resumed, past their deadlines", c[gate.CancelRefunded])
	case !clocked && c[gate.CancelRefunded] == 0:
		t.Error("no cut spend ran when Redis resumed: the test did not reproduce the stall")
	}
	if got := testutil.ToFloat64(m.signs.WithLabelValues("limiter_unavailable")); got != n+2 {
		t.Errorf("%v signs answered limiter_unavailable, want %d", got, n+2)
	}
	if got := s.bucket(userBucket); !maps.Equal(got, user) {
		t.Errorf("user bucket %v after the stall, want %v as before it", got, user)
	}
	if got := s.bucket(tenantBucket); !maps.Equal(got, tenant) {
		t.Errorf("tenant bucket %v after the stall, want %v as before it", got, tenant)
	}

	keysCut := append(cut, retried)
	ctx := context.Background()
	for _, k := range keysCut {
		idem := keys.Idempotency("acme", keys.UserSubject("alice"), k)
		if state := s.rdb.HGet(ctx, idem, "state").Val(); state != "cancelled" {
			t.Errorf("key %s: state %q, want cancelled", k, state)
		}
	}
	for _, k := range keysCut {
		if r := s.sign(tok, k, pngBody); r.status != http.StatusCreated {
			t.Errorf("retry of a cut key once the cancels ran: %d %s", r.status, r.raw)
		}
	}
	before, _ := strconv.ParseFloat(user["t"], 64)
	if got, want := s.tokens(userBucket), fmt.Sprintf("%.6f", before-float64(len(keysCut))); got != want {
		t.Errorf("user bucket t=%s after the retries, want %s", got, want)
	}
}

// In degraded mode the in-process buckets decide while Redis stalls, and
// the Redis attempt each sign made first is still cancelled: Redis is not
// charged for URLs the local buckets paid for.
func TestDegradedStallChargesRedisNothing(t *testing.T) {
	const n = 3
	st := newStack(t)
	env := st.env(t)
	env["MINTGATE_DEGRADED_MODE"] = "local"
	s, m, tok, user, tenant := stallSigner(t, st, env, n)

	pause(t, st.redis)
	s.signAtOnce(tok, newKeys(n), http.StatusCreated, "")
	st.redis.Resume()

	t.Logf("cancels after the stall: %v", settled(t, s, m, n))
	if got := s.bucket(keys.Bucket("acme", keys.UserSubject("alice"))); !maps.Equal(got, user) {
		t.Errorf("user bucket %v after the stall, want %v as before it", got, user)
	}
	if got := s.bucket(keys.TenantBucket("acme")); !maps.Equal(got, tenant) {
		t.Errorf("tenant bucket %v after the stall, want %v as before it", got, tenant)
	}
}

// The 201 body is byte for byte what json.Marshal made of it before it
// was written by hand: a replay stored by an older signer, and every
// client's parser, sees the same JSON.
func FuzzSignResponseJSONIsEncodingJSONs(f *testing.F) {
	f.Add("https://uploads.s3.us-east-1.amazonaws.com/incoming/acme/0f8fad5b?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Date=20261130T065215Z",
		"image/png", "1024", "incoming/acme/0f8fad5b", int64(1796083199), int64(0), int64(120))
	f.Add(`a"b\c<d>e&f`, "x/y+z", "*", "\u2028\x00\x7f\xff", int64(0), int64(999_999_999), int64(-1))
	f.Add("é", "", "", "", int64(253402300799), int64(1), int64(1<<62))
	f.Fuzz(func(t *testing.T, url, contentType, length, key string, unix, nanos, expiresIn int64) {
		if unix < -62135596800 || unix > 253402300799 || nanos < 0 || nanos > 999_999_999 {
			t.Skip() // outside the years json.Marshal encodes
		}
		r := api.SignResponse{
			URL: url, Method: http.MethodPut,
			Headers: api.UploadHeaders{ContentLength: length, ContentType: contentType, IfNoneMatch: "*"},
			URLID:   key, Key: key, ExpiresAt: time.Unix(unix, nanos).UTC(), ExpiresIn: expiresIn,
		}
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendSignResponse(nil, r); string(got) != string(want) {
			t.Fatalf("appendSignResponse\n got  %s\n want %s", got, want)
		}
	})
}
