package main

import (
	"encoding/json"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/testenv"
	"github.com/mintgate/mintgate/signer/internal/apierr"
	"github.com/mintgate/mintgate/signer/internal/identity"
	"github.com/mintgate/mintgate/signer/internal/ratelimit"
	"github.com/mintgate/mintgate/signer/internal/request"
)

// metric is the value of one series on the ops port's /metrics; the test
// fails when there is no such series.
func (s *signer) metric(series string) float64 {
	s.t.Helper()
	return testenv.Metric(s.t, s.ops+"/metrics", series)
}

// startWith starts a signer on a stack of its own with the variables
// name, value, … added to the test's defaults.
func startWith(t *testing.T, kv ...string) *signer {
	t.Helper()
	env := newStack(t).env(t)
	for i := 0; i+1 < len(kv); i += 2 {
		env[kv[i]] = kv[i+1]
	}
	return start(t, env)
}

// signN signs n times with fresh keys, each required to be a 201.
func (s *signer) signN(tok string, n int) {
	s.t.Helper()
	for i := range n {
		if r := s.sign(tok, newKey(), pngBody); r.status != http.StatusCreated {
			s.t.Fatalf("sign %d of %d: %d %s", i+1, n, r.status, r.raw)
		}
	}
}

// quota is GET /uploads/quota as caller tok.
func (s *signer) quota(tok string) reply {
	s.t.Helper()
	return s.do(http.MethodGet, "/uploads/quota", map[string]string{"Authorization": "Bearer " + tok}, "")
}

// side reads one side ("caller" or "tenant") of a quota reply.
func side(t *testing.T, r reply, which string) (limit, remaining float64) {
	t.Helper()
	m, ok := r.body[which].(map[string]any)
	if !ok {
		t.Fatalf("quota reply without %q: %s", which, r.raw)
	}
	l, _ := m["limit"].(float64)
	rem, _ := m["remaining"].(float64)
	return l, rem
}

// Shadow mode: a tenant in MINTGATE_SHADOW_TENANTS is never refused. 40
// signs against the 30-token user tier are all issued; the 10 a short
// bucket would have refused are counted, and their grants charge nothing.
func TestShadowModeIssuesAndCounts(t *testing.T) {
	s := startWith(t, "MINTGATE_SHADOW_TENANTS", "acme")
	tok := s.token("acme", "alice")
	s.signN(tok, 40)
	if got := s.metric(`mintgate_signer_shadow_denied_total{scope="caller"}`); got != 10 {
		t.Errorf("shadow denials counted: %v, want 10", got)
	}
	if got := s.tokens(keys.Bucket("acme", keys.UserSubject("alice"))); got != "0.000000" {
		t.Errorf("user bucket after 40 shadow signs: %s tokens, want 0.000000 (30 spent, 10 free)", got)
	}
	// Another tenant is limited as ever.
	other := s.token("globex", "bob")
	for range 30 {
		s.sign(other, newKey(), pngBody)
	}
	mustStatus(t, s.sign(other, newKey(), pngBody), http.StatusTooManyRequests, apierr.CodeTooMany)
}

// Shadow mode measures a limit, it is no open mint (the review got 30 of 30
// URLs from a 5-token tier, for one user and for one anonymous address):
// each caller of a shadowed tenant gets at most MINTGATE_SHADOW_CAP (2) ×
// its tier within the tier's window, every would-be refusal is counted,
// and a key that got a URL past the tier replays it like any other.
func TestShadowModeHasACeiling(t *testing.T) {
	// Its 40 refusals come from one address: the address's own limit on
	// refusals (TestRefusedSignsAreBoundedPerAddress) is not measured here.
	s := startWith(t, "MINTGATE_SHADOW_TENANTS", "acme,pub", "MINTGATE_TIERS", "anonymous=5:5/1h,user=5:5/1h,tenant=600:600/1h",
		"MINTGATE_READ_LIMIT", "off")
	signAll := func(n int, tok string, header ...string) (issued int, last reply, lastKey string) {
		t.Helper()
		for range n {
			key := newKey()
			r := s.sign(tok, key, pngBody, header...)
			switch r.status {
			case http.StatusCreated:
				issued++
				lastKey = key
			case http.StatusTooManyRequests:
				mustStatus(t, r, http.StatusTooManyRequests, apierr.CodeTooMany)
				last = r
			default:
				t.Fatalf("shadow sign: %d %s", r.status, r.raw)
			}
		}
		return issued, last, lastKey
	}
	tok := s.token("acme", "mallory")
	issued, last, key := signAll(30, tok)
	if issued != 10 {
		t.Errorf("a shadowed user with a 5-token tier got %d of 30 URLs, want 10 (2 × its capacity)", issued)
	}
	if scope, _ := last.body["scope"].(string); scope != ratelimit.ScopeCaller || retryAfter(t, last) < 1 {
		t.Errorf("the refusal past the ceiling: scope %q, Retry-After %q", scope, last.header.Get("Retry-After"))
	}
	if got := s.metric(`mintgate_signer_shadow_denied_total{scope="caller"}`); got != 25 {
		t.Errorf("would-be refusals counted: %v, want 25", got)
	}
	if r := s.sign(tok, key, pngBody); r.status != http.StatusOK || r.header.Get(request.HeaderReplayed) != "true" {
		t.Errorf("replay of a URL issued past the tier: %d %s", r.status, r.raw)
	}
	if anon, _, _ := signAll(30, "", identity.HeaderTenant, "pub"); anon != 10 {
		t.Errorf("one shadowed anonymous address got %d of 30 URLs, want 10", anon)
	}
	// Other callers are not held back by one caller's ceiling.
	if other, _, _ := signAll(5, s.token("acme", "alice")); other != 5 {
		t.Errorf("another user of the tenant got %d of 5", other)
	}
}

// Quota peek: what the caller and the tenant have left, with the RateLimit
// headers; two peeks leave the buckets exactly as they were.
func TestQuotaPeekSpendsNothing(t *testing.T) {
	s := start(t, newStack(t).env(t))
	tok := s.token("acme", "alice")
	for range 3 {
		mustStatus(t, s.sign(tok, newKey(), pngBody), http.StatusCreated, "")
	}
	user, tenant := keys.Bucket("acme", keys.UserSubject("alice")), keys.TenantBucket("acme")
	before := []map[string]string{s.bucket(user), s.bucket(tenant)}
	var r reply
	for range 2 {
		r = s.quota(tok)
		mustStatus(t, r, http.StatusOK, "")
	}
	if after := []map[string]string{s.bucket(user), s.bucket(tenant)}; !maps.Equal(after[0], before[0]) || !maps.Equal(after[1], before[1]) {
		t.Errorf("two peeks changed the buckets: %v, were %v", after, before)
	}
	if l, rem := side(t, r, "caller"); l != 30 || rem != 27 {
		t.Errorf("caller: limit %v remaining %v, want 30 and 27", l, rem)
	}
	if l, rem := side(t, r, "tenant"); l != 600 || rem != 597 {
		t.Errorf("tenant: limit %v remaining %v, want 600 and 597", l, rem)
	}
	if got := r.header.Get("RateLimit-Remaining"); got != "27" {
		t.Errorf("RateLimit-Remaining %q, want 27", got)
	}
	mustStatus(t, s.do(http.MethodGet, "/uploads/quota", nil, ""), http.StatusUnauthorized, apierr.CodeUnauthenticated)
}

// MINTGATE_TENANT_TIERS_FILE: a tighter file applies within seconds
// without a restart; a broken one changes nothing and is counted.
func TestTenantTiersFileReloads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tiers.json")
	write := func(s string) {
		t.Helper()
		// Renamed over, as a ConfigMap or an editor does.
		tmp := path + ".new"
		if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"acme":{"user":"60:1"}}`)
	env := newStack(t).env(t)
	env["MINTGATE_TENANT_TIERS_FILE"] = path
	// The test polls the quota every 20 ms for the reload, faster than one
	// address may read (TestReadFloodsAreBoundedPerAddress tests that limit).
	env["MINTGATE_READ_LIMIT"] = "off"
	s := start(t, env)
	tok := s.token("acme", "alice")
	if l, _ := side(t, s.quota(tok), "caller"); l != 60 {
		t.Fatalf("caller limit %v at start, want the file's 60", l)
	}

	write("acme:\n  user: \"5:0.1\"\n") // YAML too
	waitUntil(t, 10*time.Second, "the tighter file applied", func() bool {
		l, _ := side(t, s.quota(tok), "caller")
		return l == 5
	})
	for range 5 {
		mustStatus(t, s.sign(tok, newKey(), pngBody), http.StatusCreated, "")
	}
	mustStatus(t, s.sign(tok, newKey(), pngBody), http.StatusTooManyRequests, apierr.CodeTooMany)

	write(`{"acme":{"user":"lots"}}`)
	waitUntil(t, 10*time.Second, "the broken file counted", func() bool {
		return s.metric("mintgate_config_reload_errors_total") == 1
	})
	if l, _ := side(t, s.quota(tok), "caller"); l != 5 {
		t.Errorf("caller limit %v after a broken file, want the last good 5", l)
	}
	if !strings.Contains(s.log.String(), "tenant tiers file not applied") {
		t.Error("the broken file was not logged")
	}
}

// The admin API: only on the ops port, only with the token; it shows
// buckets, refills one and reads a grant.
func TestAdminAPI(t *testing.T) {
	const admin = "an-admin-token-of-at-least-32-bytes!"
	s := startWith(t, "MINTGATE_ADMIN_TOKEN", admin)
	tok := s.token("acme", "alice")
	var urlID string
	for range 30 {
		r := s.sign(tok, newKey(), pngBody)
		mustStatus(t, r, http.StatusCreated, "")
		urlID = r.str("urlId")
	}
	mustStatus(t, s.sign(tok, newKey(), pngBody), http.StatusTooManyRequests, apierr.CodeTooMany)

	ops := &signer{t: t, base: s.ops, clock: s.clock}
	bearer := map[string]string{"Authorization": "Bearer " + admin}
	path := "/admin/tenants/acme/buckets?subject=u:alice"
	mustStatus(t, ops.do(http.MethodGet, path, nil, ""), http.StatusUnauthorized, apierr.CodeUnauthenticated)
	mustStatus(t, ops.do(http.MethodGet, path, map[string]string{"Authorization": "Bearer wrong"}, ""), http.StatusUnauthorized, apierr.CodeUnauthenticated)
	if r := s.do(http.MethodGet, path, bearer, ""); r.status != http.StatusNotFound {
		t.Errorf("admin on the public port: %d, want 404", r.status)
	}

	r := ops.do(http.MethodGet, path, bearer, "")
	mustStatus(t, r, http.StatusOK, "")
	var got adminBuckets
	if err := json.Unmarshal(r.raw, &got); err != nil || len(got.Buckets) != 1 || got.Buckets[0].Remaining != 0 || got.Buckets[0].Capacity != 30 {
		t.Errorf("alice's bucket: %s %v", r.raw, err)
	}

	mustStatus(t, ops.do(http.MethodPost, "/admin/tenants/acme/reset", bearer, `{"subject":"u:alice"}`), http.StatusOK, "")
	if l, rem := side(t, s.quota(tok), "caller"); l != 30 || rem != 30 {
		t.Errorf("after the reset: limit %v remaining %v, want 30 and 30", l, rem)
	}
	mustStatus(t, s.sign(tok, newKey(), pngBody), http.StatusCreated, "")
	mustStatus(t, ops.do(http.MethodPost, "/admin/tenants/acme/reset", bearer, `{"subject":"x"}`), http.StatusBadRequest, apierr.CodeInvalidRequest)

	r = ops.do(http.MethodGet, "/admin/grants/"+urlID+"?tenant=acme", bearer, "")
	mustStatus(t, r, http.StatusOK, "")
	if r.body["found"] != true || r.str("subject") != "u:alice" || r.body["done"] != false || r.body["refunded"] != false {
		t.Errorf("grant: %s", r.raw)
	}
}
