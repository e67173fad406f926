package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/ledger"
	"github.com/mintgate/mintgate/shared/proc"
	"github.com/mintgate/mintgate/shared/quota"
)

// Secrets of the bench signers; nothing outside the bench ever sees them.
const (
	jwtSecret   = "bench-jwt-secret-of-at-least-32-bytes-0123"
	grantSecret = "bench-grant-secret-of-at-least-32-bytes-012"
)

// hugeTiers never refuse: saturation runs measure issuing, not 429s.
const hugeTiers = "anonymous=1e9:1e9,user=1e9:1e9,tenant=1e9:1e9,download=1e9:1e9,download_tenant=1e9:1e9"

// mixTiers let the mix's light users sign freely and drain its heavy
// users after mixUserCapacity signs (refill: one token every 100 s).
const (
	mixUserCapacity = 20
	mixTiers        = "anonymous=5:5/60s,user=20:0.01,tenant=1e9:1e9"
)

// urlTTL is the bench signers' MINTGATE_URL_TTL: long enough that no grant
// falls due while the bench runs, so the server's schedule firing (a
// separate write per grant, after the fact) never lands inside another
// measurement. Presigning costs the same for any expiry.
const urlTTL = "15m"

// signer is a signer binary the bench started.
type signer struct {
	name string
	base string // http://host:port of the API
	ops  string // MINTGATE_OPS_ADDR (v2 serves /metrics there)
	prof string // MINTGATE_PPROF_ADDR
}

// startSigner runs the built signer against redis and one nats-server.
// MINTGATE_GRANT_SECRET and MINTGATE_OPS_ADDR are for ledger v2 binaries
// (today's ignore them); every port is a free loopback one.
func (f *fleet) startSigner(ctx context.Context, bin, name, redisAddr, natsURL, tiers string) (*signer, error) {
	var addrs [3]string
	for i := range addrs {
		a, err := proc.FreeAddr()
		if err != nil {
			return nil, err
		}
		addrs[i] = a
	}
	s := &signer{name: name, base: "http://" + addrs[0], ops: addrs[1], prof: addrs[2]}
	env := append(baseEnv(),
		"MINTGATE_HTTP_ADDR="+addrs[0],
		"MINTGATE_OPS_ADDR="+addrs[1],
		"MINTGATE_PPROF_ADDR="+addrs[2],
		"MINTGATE_REDIS_URL=redis://"+redisAddr+"/0",
		"MINTGATE_NATS_URL="+natsURL,
		"MINTGATE_S3_BUCKET=uploads",
		"MINTGATE_S3_REGION=us-east-1",
		"MINTGATE_S3_ENDPOINT=http://127.0.0.1:9",
		"MINTGATE_S3_PATH_STYLE=true",
		"AWS_ACCESS_KEY_ID=AKIDMINTGATEBENCH",
		"AWS_SECRET_ACCESS_KEY=mintgate-bench-secret-key",
		"MINTGATE_JWT_HS256_SECRET="+jwtSecret,
		"MINTGATE_GRANT_SECRET="+grantSecret,
		"MINTGATE_TIERS="+tiers,
		"MINTGATE_URL_TTL="+urlTTL,
		// All load comes from one loopback address: its per-address limit
		// would answer the mix's replays and 429s itself, before Redis.
		"MINTGATE_READ_LIMIT=off",
	)
	p, err := f.start(name, bin, env)
	if err != nil {
		return nil, err
	}
	return s, p.WaitHTTP(ctx, serverWait, s.base+"/readyz")
}

// baseEnv is what every child needs from the bench's environment and no
// more: a developer's MINTGATE_* or AWS_PROFILE must not leak in.
func baseEnv() []string {
	var env []string
	for _, k := range []string{"PATH", "HOME", "TMPDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// metric reads one counter from the signer's /metrics: on the ops port
// when the binary serves one there (v2), else on the API port.
func (s *signer) metric(ctx context.Context, client *http.Client, name string) (float64, error) {
	var last error
	for _, base := range []string{"http://" + s.ops, s.base} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
		res, err := client.Do(req)
		if err != nil {
			last = err
			continue
		}
		v, found, err := scanMetric(res.Body, name)
		res.Body.Close()
		if err == nil && found {
			return v, nil
		}
		last = fmt.Errorf("%s: no %s in /metrics (%d)", base, name, res.StatusCode)
	}
	return 0, last
}

func scanMetric(r io.Reader, name string) (float64, bool, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f, err == nil, err
		}
	}
	return 0, false, sc.Err()
}

// redisGet is a plain GET of one small key: the floor of any Redis call.
func redisGet(rdb *redis.Client) op {
	return func(ctx context.Context, _ int) (string, error) {
		if err := rdb.Get(ctx, "bench:get").Err(); err != nil {
			return "", err
		}
		return "ok", nil
	}
}

// allow is go-redis/redis_rate's Allow on one key, or on a key drawn from
// many, with a limit so high nothing is refused.
func allow(rdb *redis.Client, manyKeys int) op {
	lim := redis_rate.NewLimiter(rdb)
	limit := redis_rate.PerSecond(rateLimit)
	names := make([]string, max(manyKeys, 1))
	for i := range names {
		names[i] = "k" + strconv.Itoa(i)
	}
	return func(ctx context.Context, _ int) (string, error) {
		res, err := lim.Allow(ctx, names[rand.IntN(len(names))], limit)
		if err != nil {
			return "", err
		}
		if res.Allowed == 0 {
			return "denied", nil
		}
		return "allowed", nil
	}
}

// rateLimit is redis_rate's limit in the bench: a million a second refuses
// nothing at the rates one box reaches (a burst of a million, each Allow
// moves the key's time on by 1 µs), and the script writes its key on every
// call, as in production. A billion a second would not: redis_rate counts in
// float seconds since 1970, where 1 ns is below the precision, so the key's
// time never moves, and the script only reads (TIME and GET, no SET), a
// cheaper anchor than the real thing.
const rateLimit = 1_000_000

// decision is mintgate's whole decision for one sign, the signer's own
// call: quota.Store.Spend checks the idempotency record, spends from the
// caller's and the tenant's bucket and marks the key in flight, in one
// script (redis_rate's Allow does only the bucket, on one key). Coalesced,
// the Spends go through a quota.Coalescer, as the signer sends them: those
// of one tenant in flight at once share a script call.
func decision(rdb *redis.Client, users, tenants int, coalesced bool) op {
	store := quota.New(rdb)
	spend := store.Spend
	if coalesced {
		spend = quota.NewCoalescer(store, 0, 0).Spend
	}
	huge := bucket.Limit{Capacity: 1e12, Rate: 1e9}
	asks := make([]quota.Ask, users)
	for u := range asks {
		t := "t" + strconv.Itoa(u%tenants)
		subject := keys.UserSubject("u" + strconv.Itoa(u))
		asks[u] = quota.Ask{Tenant: t, Idem: keys.Idempotency(t, subject, "k"), Fingerprint: "fp", Buckets: []bucket.Bucket{
			{Key: keys.Bucket(t, subject), Limit: huge},
			{Key: keys.TenantBucket(t), Limit: huge},
		}}
	}
	var n atomic.Int64
	return func(ctx context.Context, _ int) (string, error) {
		// The signer's own call: idempotency check, both buckets and the
		// in-flight mark in one script; a fresh key each time.
		a := asks[rand.IntN(len(asks))]
		i := strconv.FormatInt(n.Add(1), 10)
		a.Idem += i
		a.Nonce = "n" + i
		d, err := spend(ctx, time.Now(), a, time.Second)
		if err != nil {
			return "", err
		}
		return d.Outcome.String(), nil
	}
}

// dialLedger is the signer's own ledger client on natsURL. Ledger v2 keeps
// Record's signature; if Dial comes to need the grant secret, it goes here.
func dialLedger(ctx context.Context, natsURL string) (*ledger.Client, error) {
	return ledger.Dial(ctx, natsURL, ledger.Config{Grace: 30 * time.Second, Secret: []byte(grantSecret)})
}

// record is ledger.Client.Record of one fresh grant, due long after the
// bench ends (see urlTTL).
func record(led *ledger.Client) op {
	return func(ctx context.Context, _ int) (string, error) {
		id := uuid.NewString()
		now := time.Now().UTC()
		g := ledger.Grant{URLID: id, Tenant: "bench", Tier: "user", Subject: "u:bench",
			Key: "incoming/bench/" + id, IssuedAt: now, ExpiresAt: now.Add(15 * time.Minute)}
		if err := led.Record(ctx, g); err != nil {
			return "", err
		}
		return "ok", nil
	}
}

// signBody is the request every sign sends.
const signBody = `{"contentType":"image/png","contentLength":1024}`

// signBodySum is the same sign bound to its bytes' SHA-256 (issue 30): the
// URL then signs x-amz-checksum-sha256 too. No PUT follows, so any valid
// checksum does.
const signBodySum = `{"contentType":"image/png","contentLength":1024,"checksumSHA256":"LPJNul+wow4m6DsqxbninhsWHlwfp0JecwQzYpOLmCQ="}`

// signKeys makes every Idempotency-Key of the run distinct.
var signKeys atomic.Int64

func newKey() string { return "bench-" + strconv.FormatInt(signKeys.Add(1), 10) }

// token is an HS256 token for user of tenant, valid for two hours.
func token(tenant, user string) string {
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": user, "tenant_id": tenant, "exp": time.Now().Add(2 * time.Hour).Unix(),
	}).SignedString([]byte(jwtSecret))
	if err != nil {
		panic(err) // HS256 with a fixed key cannot fail
	}
	return s
}

// tokens for n users spread over tenants tenants.
func tokens(prefix string, n, tenants int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = token("t"+strconv.Itoa(i%tenants), prefix+strconv.Itoa(i))
	}
	return out
}

// post sends one sign (or the echo handler's look-alike) and returns its
// label: the status code, with the error code of a 5xx ("503
// limiter_unavailable"), so the status split says what failed. The body
// is read to the end so the connection is kept alive.
func post(ctx context.Context, client *http.Client, url, tok, key string) (string, error) {
	return postBody(ctx, client, url, signBody, tok, key)
}

// postBody is post with body as the sign request.
func postBody(ctx context.Context, client *http.Client, url, body, tok, key string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Idempotency-Key", key)
	res, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	label := strconv.Itoa(res.StatusCode)
	if res.StatusCode < 500 {
		_, err = io.Copy(io.Discard, res.Body)
		return label, err
	}
	var e struct {
		Error string `json:"error"`
	}
	if err := json.NewDecoder(res.Body).Decode(&e); err == nil && e.Error != "" {
		label += " " + e.Error
	}
	_, err = io.Copy(io.Discard, res.Body)
	return label, err
}

// sign is POST /uploads/sign with a fresh Idempotency-Key, as user i of
// toks (modulo).
func sign(client *http.Client, base string, toks []string) op {
	url := base + "/uploads/sign"
	return func(ctx context.Context, i int) (string, error) {
		return post(ctx, client, url, toks[i%len(toks)], newKey())
	}
}

// signSum is sign with checksumSHA256 in every request.
func signSum(client *http.Client, base string, toks []string) op {
	url := base + "/uploads/sign"
	return func(ctx context.Context, i int) (string, error) {
		return postBody(ctx, client, url, signBodySum, toks[i%len(toks)], newKey())
	}
}

// mix is the realistic load: many users of a few tenants signing with
// fresh keys, ~5 % replays of a key that already got its 201, and ~10 %
// from heavy users who are over their tier (429).
type mix struct {
	client *http.Client
	url    string
	light  []string
	heavy  []string

	mu   sync.Mutex
	done []issued // recent 201s, replayed by later requests
	next int
}

type issued struct{ tok, key string }

// Shares of the mix.
const (
	mixReplay = 0.05
	mixHeavy  = 0.10
	mixRing   = 1024 // recent 201s kept for replays
)

func newMix(client *http.Client, base string, lightUsers, heavyUsers, tenants int) *mix {
	return &mix{
		client: client, url: base + "/uploads/sign",
		light: tokens("light-", lightUsers, tenants),
		heavy: tokens("heavy-", heavyUsers, tenants),
	}
}

// drain spends every heavy user's tier, so the mix's 429 share is what it
// sends them and not their first few grants.
func (m *mix) drain(ctx context.Context) error {
	for _, tok := range m.heavy {
		for range mixUserCapacity + 2 {
			if _, err := post(ctx, m.client, m.url, tok, newKey()); err != nil {
				return fmt.Errorf("draining heavy users: %w", err)
			}
		}
	}
	return nil
}

func (m *mix) op(ctx context.Context, _ int) (string, error) {
	p := rand.Float64()
	if p < mixReplay {
		if it, ok := m.replayable(); ok {
			return post(ctx, m.client, m.url, it.tok, it.key)
		}
	}
	if p < mixReplay+mixHeavy {
		return post(ctx, m.client, m.url, m.heavy[rand.IntN(len(m.heavy))], newKey())
	}
	it := issued{tok: m.light[rand.IntN(len(m.light))], key: newKey()}
	label, err := post(ctx, m.client, m.url, it.tok, it.key)
	if label == "201" {
		m.remember(it)
	}
	return label, err
}

func (m *mix) replayable() (issued, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.done) == 0 {
		return issued{}, false
	}
	return m.done[rand.IntN(len(m.done))], true
}

func (m *mix) remember(it issued) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.done) < mixRing {
		m.done = append(m.done, it)
		return
	}
	m.done[m.next] = it
	m.next = (m.next + 1) % mixRing
}
