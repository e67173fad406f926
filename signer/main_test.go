package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/ledger"
	"github.com/mintgate/mintgate/shared/streamstest"
	"github.com/mintgate/mintgate/shared/testenv"
	"github.com/mintgate/mintgate/signer/internal/apierr"
	"github.com/mintgate/mintgate/signer/internal/request"
)

// testSecret is the HS256 key of the test signers.
const testSecret = "test-secret-of-at-least-32-bytes-0123456789"

// The issuer and audience every test token carries; checked only where a
// test configures them.
const (
	testIssuer   = "https://idp.mintgate.test"
	testAudience = "mintgate-signer"
)

// clock is a settable clock, so bucket arithmetic in tests is exact.
type clock = testenv.Clock

func newClock() *clock { return testenv.NewClock(time.Now().Truncate(time.Second)) }

func withClock(c *clock) option { return func(d *deps) { d.now = c.Now } }

func withRecorder(r recorder) option { return func(d *deps) { d.ledger = r } }

// withMetrics has the signer count on m, registered on reg, so that a test
// reads its series with prometheus/testutil.
func withMetrics(reg *prometheus.Registry, m *metrics) option {
	return func(d *deps) { d.reg, d.metrics = reg, m }
}

// withoutRedisClock keeps the signer from reading Redis's clock: its
// Spends carry no deadline, as before a first read succeeds.
func withoutRedisClock(d *deps) { d.noRedisClock = true }

// stack is the real servers a signer talks to.
type stack struct {
	redis *testenv.Redis
	nats  *testenv.NATS
}

func newStack(t testing.TB) stack {
	t.Helper()
	s := stack{redis: testenv.StartRedis(t), nats: testenv.StartNATS(t)}
	streamstest.Ensure(t, s.nats.URL()) // the operator step
	return s
}

// env is a complete signer environment on the stack; S3 is never called
// (presigning is local), so its endpoint needs no server.
func (s stack) env(t testing.TB) map[string]string {
	t.Helper()
	return map[string]string{
		"MINTGATE_REDIS_URL": s.redis.URL(),
		// Generous on a shared two-core machine under -race; the tests of
		// the fail-closed bound set the production 150ms themselves.
		"MINTGATE_REDIS_TIMEOUT":    "1s",
		"MINTGATE_NATS_URL":         s.nats.URL(),
		"MINTGATE_HTTP_ADDR":        fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)),
		"MINTGATE_OPS_ADDR":         fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)),
		"MINTGATE_S3_BUCKET":        "uploads",
		"MINTGATE_S3_REGION":        "us-east-1",
		"MINTGATE_S3_ENDPOINT":      "http://127.0.0.1:9",
		"MINTGATE_S3_PATH_STYLE":    "true",
		"AWS_ACCESS_KEY_ID":         "AKIDMINTGATETEST",
		"AWS_SECRET_ACCESS_KEY":     "mintgate-test-secret-key",
		"MINTGATE_JWT_HS256_SECRET": testSecret,
		"MINTGATE_ANON_TENANTS":     "pub",
		"MINTGATE_IP_HASH_SECRET":   "ip-hash-secret-for-tests",
		"MINTGATE_GRANT_SECRET":     testenv.GrantSecret,
	}
}

// signer is a signer running in-process through run's code path.
type signer struct {
	t     testing.TB
	base  string
	ops   string // MINTGATE_OPS_ADDR: /metrics (and /healthz, /readyz)
	log   *testenv.Buffer
	clock *clock
	rdb   redis.UniversalClient
}

// start runs the signer with env until the test ends and waits for /healthz.
// Unless opts set one, the clock is a fixed one the test moves by hand.
func start(t testing.TB, env map[string]string, opts ...option) *signer {
	t.Helper()
	s := &signer{t: t, base: "http://" + env["MINTGATE_HTTP_ADDR"], ops: "http://" + env["MINTGATE_OPS_ADDR"], log: &testenv.Buffer{}, clock: newClock()}
	opts = append([]option{withClock(s.clock)}, opts...)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- runWith(ctx, mapEnv(env), s.log, opts...) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-errc:
			if err != nil {
				t.Errorf("signer: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("signer did not shut down")
		}
	})
	waitHealthy(t, s.base, errc, s.log)

	if addrs := env["MINTGATE_REDIS_CLUSTER_ADDRS"]; addrs != "" {
		s.rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(addrs, ",")})
	} else {
		opt, err := redis.ParseURL(env["MINTGATE_REDIS_URL"])
		if err != nil {
			t.Fatal(err)
		}
		s.rdb = redis.NewClient(opt)
	}
	t.Cleanup(func() { s.rdb.Close() })
	return s
}

func mapEnv(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func waitHealthy(t testing.TB, base string, errc chan error, log *testenv.Buffer) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-errc:
			t.Fatalf("signer exited: %v\n%s", err, log)
		default:
		}
		r, err := http.Get(base + "/healthz")
		if err == nil {
			r.Body.Close()
			if r.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("signer not healthy:\n%s", log)
}

// reply is an HTTP answer with its JSON body decoded.
type reply struct {
	status int
	header http.Header
	raw    []byte
	body   map[string]any
}

func (r reply) str(field string) string {
	s, _ := r.body[field].(string)
	return s
}

func (r reply) code() string { return r.str("error") }

func (s *signer) do(method, path string, header map[string]string, body string) reply {
	s.t.Helper()
	req, err := http.NewRequest(method, s.base+path, strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	r := reply{status: res.StatusCode, header: res.Header, raw: raw}
	isJSON := strings.HasPrefix(res.Header.Get("Content-Type"), "application/json")
	if isJSON || res.StatusCode >= 400 {
		if err := json.Unmarshal(raw, &r.body); err != nil || !isJSON {
			s.t.Fatalf("%s %s: %d with a body that is not a JSON object: %q", method, path, res.StatusCode, raw)
		}
	}
	if r.status >= 500 && r.status != http.StatusServiceUnavailable {
		s.t.Errorf("%s %s: %d %s", method, path, r.status, raw)
	}
	return r
}

// metrics is the text of /metrics, served on the ops port only.
func (s *signer) metrics() string {
	s.t.Helper()
	res, err := http.Get(s.ops + "/metrics")
	if err != nil {
		s.t.Fatalf("metrics: %v", err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		s.t.Fatalf("metrics: %d %v", res.StatusCode, err)
	}
	return string(raw)
}

// sign posts a sign request with the given bearer token ("" for none) and key.
func (s *signer) sign(token, key, body string, header ...string) reply {
	s.t.Helper()
	h := map[string]string{"Content-Type": "application/json"}
	if token != "" {
		h["Authorization"] = "Bearer " + token
	}
	if key != "" {
		h[request.HeaderIdempotencyKey] = key
	}
	for i := 0; i+1 < len(header); i += 2 {
		h[header[i]] = header[i+1]
	}
	return s.do(http.MethodPost, "/uploads/sign", h, body)
}

const pngBody = `{"contentType":"image/png","contentLength":1024}`

// token is an HS256 token for user of tenant, valid for an hour from now.
func (s *signer) token(tenant, user string) string {
	return hs256(s.t, jwt.MapClaims{
		"sub": user, "tenant_id": tenant, "exp": s.clock.Now().Add(time.Hour).Unix(),
		"iss": testIssuer, "aud": testAudience,
	})
}

func hs256(t testing.TB, claims jwt.MapClaims) string {
	t.Helper()
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(testSecret))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// tokens reads a bucket's stored token count ("" when the key is absent).
func (s *signer) tokens(key string) string {
	s.t.Helper()
	v, err := s.rdb.HGet(context.Background(), key, "t").Result()
	if err == redis.Nil {
		return ""
	}
	if err != nil {
		s.t.Fatalf("hget %s: %v", key, err)
	}
	return v
}

func newKey() string { return uuid.NewString() }

func mustStatus(t *testing.T, r reply, status int, code string) {
	t.Helper()
	if r.status != status || r.code() != code {
		t.Fatalf("got %d %q (%s), want %d %q", r.status, r.code(), r.raw, status, code)
	}
}

func retryAfter(t *testing.T, r reply) int {
	t.Helper()
	n, err := strconv.Atoi(r.header.Get("Retry-After"))
	if err != nil || n < 1 {
		t.Fatalf("Retry-After %q: want an integer ≥ 1", r.header.Get("Retry-After"))
	}
	return n
}

func TestRunRejectsBadConfig(t *testing.T) {
	base := func() map[string]string {
		return map[string]string{
			"MINTGATE_S3_BUCKET":        "uploads",
			"MINTGATE_S3_REGION":        "us-east-1",
			"MINTGATE_JWT_HS256_SECRET": testSecret,
		}
	}
	cases := []struct {
		name, variable string
		set            map[string]string
	}{
		{"no bucket", "MINTGATE_S3_BUCKET", map[string]string{"MINTGATE_S3_BUCKET": ""}},
		{"bad ttl", "MINTGATE_URL_TTL", map[string]string{"MINTGATE_URL_TTL": "soon"}},
		{"ttl beyond sigv4", "MINTGATE_URL_TTL", map[string]string{"MINTGATE_URL_TTL": "200h"}},
		{"bad max", "MINTGATE_MAX_OBJECT_BYTES", map[string]string{"MINTGATE_MAX_OBJECT_BYTES": "0"}},
		{"bad tiers", "MINTGATE_TIERS", map[string]string{"MINTGATE_TIERS": "user=30:0.5"}},
		{"bad tenant tiers", "MINTGATE_TENANT_TIERS", map[string]string{"MINTGATE_TENANT_TIERS": "acme:gold=60:1"}},
		{"bad ip source", "MINTGATE_IP_SOURCE", map[string]string{"MINTGATE_IP_SOURCE": "x-real-ip"}},
		{"xff without proxies", "MINTGATE_TRUSTED_PROXIES", map[string]string{"MINTGATE_IP_SOURCE": "xff"}},
		{"cf-connecting-ip without proxies", "MINTGATE_TRUSTED_PROXIES", map[string]string{"MINTGATE_IP_SOURCE": "cf-connecting-ip"}},
		{"bad proxy", "MINTGATE_TRUSTED_PROXIES", map[string]string{"MINTGATE_TRUSTED_PROXIES": "10.0.0.0/99"}},
		{"anon without hash secret", "MINTGATE_IP_HASH_SECRET", map[string]string{"MINTGATE_ANON_TENANTS": "pub"}},
		{"bad anon tenant", "MINTGATE_ANON_TENANTS", map[string]string{"MINTGATE_ANON_TENANTS": "a:b", "MINTGATE_IP_HASH_SECRET": "0123456789abcdef"}},
		{"short jwt secret", "MINTGATE_JWT_HS256_SECRET", map[string]string{"MINTGATE_JWT_HS256_SECRET": "short"}},
		{"two verifiers", "MINTGATE_JWT_HS256_SECRET", map[string]string{"MINTGATE_JWT_JWKS_URL": "https://idp.example/jwks"}},
		{"no way in", "MINTGATE_JWT_HS256_SECRET", map[string]string{"MINTGATE_JWT_HS256_SECRET": ""}},
		{"bad nats url", "MINTGATE_NATS_URL", map[string]string{"MINTGATE_NATS_URL": "nats://a:4222,http://b"}},
		{"short grant secret", "MINTGATE_GRANT_SECRET", map[string]string{"MINTGATE_GRANT_SECRET": "too-short"}},
		{"no grant secret", "MINTGATE_GRANT_SECRET", map[string]string{"MINTGATE_GRANT_SECRET": ""}},
		{"bad degraded", "MINTGATE_DEGRADED_MODE", map[string]string{"MINTGATE_DEGRADED_MODE": "on"}},
		{"no degraded share", "MINTGATE_DEGRADED_SHARE", map[string]string{"MINTGATE_DEGRADED_SHARE": "0"}},
		{"degraded share above all", "MINTGATE_DEGRADED_SHARE", map[string]string{"MINTGATE_DEGRADED_SHARE": "1.5"}},
		{"negative degraded share", "MINTGATE_DEGRADED_SHARE", map[string]string{"MINTGATE_DEGRADED_SHARE": "-0.05"}},
		{"degraded share not a number", "MINTGATE_DEGRADED_SHARE", map[string]string{"MINTGATE_DEGRADED_SHARE": "5%"}},
		{"degraded share NaN", "MINTGATE_DEGRADED_SHARE", map[string]string{"MINTGATE_DEGRADED_SHARE": "NaN"}},
		{"bad grace", "MINTGATE_SWEEP_GRACE", map[string]string{"MINTGATE_SWEEP_GRACE": "-1s"}},
		{"bad redis timeout", "MINTGATE_REDIS_TIMEOUT", map[string]string{"MINTGATE_REDIS_TIMEOUT": "fast"}},
		{"bad content type", "MINTGATE_CONTENT_TYPES", map[string]string{"MINTGATE_CONTENT_TYPES": "image/png; q=1"}},
		{"bad headers form", "MINTGATE_RATELIMIT_HEADERS", map[string]string{"MINTGATE_RATELIMIT_HEADERS": "rfc"}},
		{"pprof on every interface", "MINTGATE_PPROF_ADDR", map[string]string{"MINTGATE_PPROF_ADDR": ":6060"}},
		{"pprof on a public address", "MINTGATE_PPROF_ADDR", map[string]string{"MINTGATE_PPROF_ADDR": "10.0.0.5:6060"}},
		{"metrics on the public port", "MINTGATE_OPS_ADDR", map[string]string{"MINTGATE_OPS_ADDR": ":8080"}},
		{"no status waits per address", "MINTGATE_STATUS_WAITERS_PER_ADDRESS", map[string]string{"MINTGATE_STATUS_WAITERS_PER_ADDRESS": "0"}},
		{"status waits not a number", "MINTGATE_STATUS_WAITERS", map[string]string{"MINTGATE_STATUS_WAITERS": "many"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := base()
			for k, v := range tc.set {
				env[k] = v
			}
			err := run(context.Background(), []string{"signer"}, mapEnv(env), io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.variable) {
				t.Fatalf("run: %v; want an error naming %s", err, tc.variable)
			}
		})
	}
}

// The real run(), with the real JetStream ledger: it starts, warns about the
// anonymous-tenant IP trap, serves, and stops cleanly when its context ends.
func TestRunServesAndShutsDown(t *testing.T) {
	st := newStack(t)
	env := st.env(t)
	log := &testenv.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- run(ctx, []string{"signer"}, mapEnv(env), log) }()
	base := "http://" + env["MINTGATE_HTTP_ADDR"]
	waitHealthy(t, base, errc, log)

	if !strings.Contains(log.String(), `"level":"WARN"`) || !strings.Contains(log.String(), "MINTGATE_IP_SOURCE=remote") {
		t.Errorf("no loud warning about anonymous tenants behind MINTGATE_IP_SOURCE=remote:\n%s", log)
	}
	s := &signer{t: t, base: base, clock: newClock()}
	if r := s.do(http.MethodGet, "/readyz", nil, ""); r.status != http.StatusOK {
		t.Errorf("readyz: %d %s", r.status, r.raw)
	}
	if r := s.sign(s.token("acme", "alice"), newKey(), pngBody); r.status != http.StatusCreated {
		t.Errorf("sign: %d %s", r.status, r.raw)
	}

	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("run did not return after its context ended")
	}
	if res, err := http.Get(base + "/healthz"); err == nil {
		res.Body.Close()
		t.Error("still serving after shutdown")
	}
}

// holdRecorder is a ledger that holds every Record until released: a
// stand-in for a slow JetStream ack.
type holdRecorder struct {
	entered chan struct{}
	release chan struct{}
}

func (h *holdRecorder) Record(ctx context.Context, _ ledger.Grant) error {
	h.entered <- struct{}{}
	select {
	case <-h.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// SIGTERM (the context ending) stops new connections but lets a sign that
// is waiting for its ledger ack finish with its URL; meanwhile the same key
// is in flight (409).
func TestShutdownFinishesInFlightSigns(t *testing.T) {
	st := newStack(t)
	env := st.env(t)
	hold := &holdRecorder{entered: make(chan struct{}), release: make(chan struct{})}
	log := &testenv.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- runWith(ctx, mapEnv(env), log, withRecorder(hold)) }()
	base := "http://" + env["MINTGATE_HTTP_ADDR"]
	waitHealthy(t, base, errc, log)
	s := &signer{t: t, base: base, clock: newClock()}
	tok, key := s.token("acme", "alice"), newKey()

	got := make(chan reply, 1)
	go func() { got <- s.sign(tok, key, pngBody) }()
	<-hold.entered
	mustStatus(t, s.sign(tok, key, pngBody), http.StatusConflict, apierr.CodeInProgress)

	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for {
		res, err := http.Get(base + "/healthz")
		if err != nil {
			break // the listener is closed
		}
		res.Body.Close()
		if time.Now().After(deadline) {
			t.Fatal("still accepting connections after shutdown began")
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(hold.release)
	if r := <-got; r.status != http.StatusCreated || r.str("url") == "" {
		t.Fatalf("in-flight sign: %d %s", r.status, r.raw)
	}
	if err := <-errc; err != nil {
		t.Fatalf("run: %v", err)
	}
}

// /metrics lists tenant names and lives only on MINTGATE_OPS_ADDR;
// /healthz and /readyz answer on both ports, and /readyz names what fails
// and nothing more (issue 10, finding 4: the public port served /metrics
// with tenant="secret-customer-bigbank", and /readyz printed `dial tcp
// 127.0.0.1:45259: connect: connection refused`).
func TestOpsPortServesMetricsAndReadiness(t *testing.T) {
	st := newStack(t)
	s := start(t, st.env(t))
	tok := s.token("secret-customer-bigbank", "alice")
	for r := s.sign(tok, newKey(), pngBody); r.status != http.StatusTooManyRequests; r = s.sign(tok, newKey(), pngBody) {
		if r.status != http.StatusCreated {
			t.Fatalf("sign: %d %s", r.status, r.raw)
		}
	}
	get := func(base, path string) (int, string) {
		t.Helper()
		res, err := http.Get(base + path)
		if err != nil {
			t.Fatalf("GET %s%s: %v", base, path, err)
		}
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(raw)
	}

	if code, body := get(s.base, "/metrics"); code != http.StatusNotFound || strings.Contains(body, "mintgate_") {
		t.Errorf("public /metrics: %d %.200s; want 404", code, body)
	}
	if !strings.Contains(s.metrics(), `tenant="secret-customer-bigbank"`) {
		t.Error("ops /metrics lacks the signer's series")
	}
	if code, _ := get(s.ops, "/uploads/sign"); code != http.StatusNotFound && code != http.StatusMethodNotAllowed {
		t.Errorf("the ops port serves the API: %d", code)
	}
	for _, base := range []string{s.base, s.ops} {
		for _, path := range []string{"/healthz", "/readyz"} {
			if code, body := get(base, path); code != http.StatusOK {
				t.Errorf("%s%s: %d %s", base, path, code, body)
			}
		}
	}

	st.redis.Stop()
	for _, base := range []string{s.base, s.ops} {
		code, body := get(base, "/readyz")
		if code != http.StatusServiceUnavailable || !strings.Contains(body, `"redis"`) {
			t.Errorf("%s/readyz with Redis down: %d %s; want 503 naming redis", base, code, body)
		}
		for _, leak := range []string{"127.0.0.1", "connect", "refused", "dial"} {
			if strings.Contains(body, leak) {
				t.Errorf("%s/readyz tells %q: %s", base, leak, body)
			}
		}
		if code, _ := get(base, "/healthz"); code != http.StatusOK {
			t.Errorf("%s/healthz with Redis down: %d", base, code)
		}
	}
}

// TestMissingStreamKeepsTheSignerUnready: a signer started before the
// operator step serves, but /readyz names nats and a sign answers 503
// grant_ledger_unavailable; it never creates the stream. Once the
// operator has made it, the signer opens it and issues URLs.
func TestMissingStreamKeepsTheSignerUnready(t *testing.T) {
	st := stack{redis: testenv.StartRedis(t), nats: testenv.StartNATS(t)} // no operator step
	s := start(t, st.env(t))
	if r := s.do(http.MethodGet, "/readyz", nil, ""); r.status != http.StatusServiceUnavailable || !strings.Contains(string(r.raw), "nats") {
		t.Errorf("readyz without the stream: %d %s, want 503 naming nats", r.status, r.raw)
	}
	mustStatus(t, s.sign(s.token("acme", "alice"), newKey(), pngBody), http.StatusServiceUnavailable, apierr.CodeLedgerDown)
	if !strings.Contains(s.log.String(), "does not exist") {
		t.Errorf("the signer's log does not say the stream is missing:\n%s", s.log)
	}
	_, js := testenv.JetStream(t, st.nats.URL())
	if _, err := js.Stream(context.Background(), ledger.DefaultStream); err == nil {
		t.Fatal("the signer created the stream")
	}

	streamstest.Ensure(t, st.nats.URL())
	deadline := time.Now().Add(20 * time.Second)
	for s.do(http.MethodGet, "/readyz", nil, "").status != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatal("the signer never became ready after the operator step")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if r := s.sign(s.token("acme", "alice"), newKey(), pngBody); r.status != http.StatusCreated {
		t.Errorf("sign after the operator step: %d %s", r.status, r.raw)
	}
}
