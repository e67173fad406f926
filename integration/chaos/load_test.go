package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/golang-jwt/jwt/v5"

	"github.com/mintgate/mintgate/api"
	"github.com/mintgate/mintgate/shared/keys"
)

// How a client retries a sign that got no answer, a 503 or a 409: with the
// same Idempotency-Key, a bounded number of times.
const (
	maxAttempts  = 8
	firstBackoff = 100 * time.Millisecond
	maxBackoff   = 1600 * time.Millisecond
)

// user is one caller: a tenant's user and its JWT.
type user struct {
	tenant, id, token string
}

// signed is the signer's 201 body (and a replay's 200).
type signed = api.SignResponse

// received is one URL a client got.
type received struct {
	tenant, user, key, urlID string
	size                     int64 // the contentLength signed: the bytes its grant spent
	expiresAt                time.Time
	signedAt, uploadedAt     time.Time // when the answer came, when the PUT's did
	uploaded                 bool      // the PUT was stored
	putStatus                int       // the last PUT's status, 0 when not tried or no answer
	late                     bool      // a slow upload: it lands after the grant's due time (landLate)
	wrong                    bool      // its bytes are HTML, not the image/png it declared: the gate must reject them
	// encoding is the Content-Encoding its PUT added, unsigned (br or
	// gzip; "" none): the gate must reject it encoding_not_allowed.
	encoding string
	// reput is the status of a second PUT on its URL once its upload read
	// rejected (0: none tried): 200 means S3 took it, and the completer
	// must remove it from incoming/ and keep the first in quarantine/.
	reput int
}

// reputDone is the answer to one re-PUT after rejection, for its client's
// record.
type reputDone struct {
	client, url, status int
}

// lateLanding is what became of one slow upload, for its client's record.
type lateLanding struct {
	client, url int
	stored      bool
	at          time.Time
}

// flight counts one signer's requests, and the bytes they ask, so a kill
// knows how many it cut.
type flight struct {
	inFlight, started           atomic.Int64
	inFlightBytes, startedBytes atomic.Int64 // their contentLengths
}

type flightSnapshot struct{ inFlight, started, inFlightBytes, startedBytes int64 }

func (f *flight) snapshot() flightSnapshot {
	return flightSnapshot{f.inFlight.Load(), f.started.Load(), f.inFlightBytes.Load(), f.startedBytes.Load()}
}

// cutBy is how many requests a kill between two snapshots may have cut,
// and the bytes they asked: those in flight at the first, and those
// started since.
func (s flightSnapshot) cutBy(after flightSnapshot) (int, int64) {
	return int(s.inFlight + after.started - s.started), s.inFlightBytes + after.startedBytes - s.startedBytes
}

// load is the clients signing against a stack.
type load struct {
	flights []*flight // per signer
	clients []*client
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	once    sync.Once

	// downloads asks for the stored uploads' downloads (downloads_test.go).
	downloads *downloader

	mu      sync.Mutex
	landed  []lateLanding // slow uploads, as they land
	reputs  []reputDone   // re-PUTs after rejection, as they are answered
	landing sync.WaitGroup
}

// startLoad starts the plan's clients; stop ends them. Each client's
// requests (user, size, upload or not, replay or not) come from the seed.
// Each stored upload is handed to dls, which asks for its download.
func startLoad(ctx context.Context, t *testing.T, st *stack, p plan, seed uint64, dls *downloader) *load {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	ld := &load{cancel: cancel, downloads: dls}
	for range st.signers {
		ld.flights = append(ld.flights, &flight{})
	}
	users := makeUsers(t, st.jwtSecret, p)
	httpc := &http.Client{
		Timeout:   15 * time.Second, // above the signer's 10 s budget for one sign
		Transport: &http.Transport{MaxIdleConnsPerHost: p.clients * 2},
	}
	for i := range p.clients {
		c := &client{
			id: i, st: st, ld: ld, users: users, think: p.think, http: httpc,
			rng:     rand.New(rand.NewPCG(seed, uint64(st.topo.replicas)<<32|uint64(i+1))),
			keys:    map[string][]string{},
			seen:    map[string]int{},
			answers: map[string]int{},
			mp:      mpRecord{seen: map[string]int{}, answers: map[string]int{}},
		}
		ld.clients = append(ld.clients, c)
		ld.wg.Go(func() { c.run(ctx) })
	}
	return ld
}

// stop ends the load: no new request starts, those under way finish, and
// every slow upload lands.
func (ld *load) stop() {
	ld.once.Do(func() {
		ld.cancel()
		ld.wg.Wait()
		ld.landing.Wait()
	})
}

// userIDs are the plan's users, each as {tenant, user id}.
func userIDs(p plan) [][2]string {
	out := make([][2]string, p.users)
	for i := range out {
		out[i] = [2]string{tenantID(i % p.tenants), fmt.Sprintf("u%03d", i)}
	}
	return out
}

func tenantID(i int) string { return fmt.Sprintf("t%d", i) }

func makeUsers(t *testing.T, secret []byte, p plan) []user {
	t.Helper()
	users := make([]user, p.users)
	for i, id := range userIDs(p) {
		u := user{tenant: id[0], id: id[1]}
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
			"sub": u.id, "tenant_id": u.tenant, "exp": time.Now().Add(p.deadline + time.Hour).Unix(),
		}).SignedString(secret)
		if err != nil {
			t.Fatal(err)
		}
		u.token = tok
		users[i] = u
	}
	return users
}

// client signs in a loop, one request at a time.
type client struct {
	id    int
	st    *stack
	ld    *load
	users []user
	think time.Duration
	http  *http.Client
	rng   *rand.Rand

	ops       int                 // sign requests (each with its retries)
	urls      []received          // every URL received, once each
	seen      map[string]int      // urlId → index in urls
	keys      map[string][]string // Idempotency-Key → the distinct urlIds it yielded
	answers   map[string]int      // "201", "503 grant_ledger_unavailable", "transport", …
	abandoned int                 // requests that ran out of attempts without a URL
	replays   int

	mp mpRecord // multipart grants (multipart_test.go)
}

// run signs in a loop: one request in mpEvery is a multipart grant
// (multipart_test.go), the others single PUTs.
func (c *client) run(ctx context.Context) {
	for ctx.Err() == nil {
		u := c.users[c.rng.IntN(len(c.users))]
		think := time.Duration(c.rng.Int64N(int64(c.think) + 1))
		if c.rng.IntN(mpEvery) == 0 {
			c.multipart(ctx, u, c.drawMultipart())
		} else {
			c.single(ctx, u)
		}
		time.Sleep(think)
	}
}

// single signs one URL for u and, as drawn, uploads it (maybe late) and
// replays its key.
func (c *client) single(ctx context.Context, u user) {
	size := minBody + c.rng.Int64N(maxSingle-minBody+1)
	upload := c.rng.IntN(2) == 0
	replay := c.rng.IntN(10) == 0
	wrong := c.rng.IntN(wrongEvery) == 0
	encoding := ""
	if c.rng.IntN(encodedEvery) == 0 {
		encoding = [...]string{"br", "gzip"}[c.rng.IntN(2)]
	}
	reput := c.rng.IntN(reputEvery) == 0
	key := fmt.Sprintf("c%d-%d", c.id, c.ops)
	c.ops++

	slow := upload && c.rng.IntN(slowEvery) == 0
	landIn := time.Duration(c.rng.Int64N(int64(slowSpread)))
	s, ok := c.sign(ctx, u, key, size, time.Time{})
	if !ok {
		return
	}
	i := c.receive(u, key, size, s)
	switch {
	case slow && !c.urls[i].late && !c.urls[i].uploaded:
		c.urls[i].late, c.urls[i].wrong = true, wrong
		c.landLate(i, s, body(size, wrong), s.ExpiresAt.Add(c.st.p.grace+landIn))
	case upload && !c.urls[i].late:
		c.urls[i].wrong, c.urls[i].encoding = wrong, encoding
		c.urls[i].uploaded, c.urls[i].putStatus = c.put(s, body(size, wrong), encoding)
		c.urls[i].uploadedAt = time.Now()
		if c.urls[i].uploaded {
			c.ld.downloads.watch(c.urls[i])
		}
		if wrong && reput && encoding == "" && c.urls[i].uploaded {
			c.reputAfterVerdict(i, c.urls[i], s)
		}
	}
	if replay {
		// A client that lost the answer asks again with the same
		// key while the URL is valid: the same URL, no new token.
		c.replays++
		if again, ok := c.sign(ctx, u, key, size, s.ExpiresAt.Add(-time.Second)); ok {
			c.receive(u, key, size, again)
		}
	}
}

// receive records a URL the client got for key, signed for size bytes,
// and returns its index.
func (c *client) receive(u user, key string, size int64, s signed) int {
	if !contains(c.keys[key], s.URLID) {
		c.keys[key] = append(c.keys[key], s.URLID)
	}
	if i, ok := c.seen[s.URLID]; ok {
		return i
	}
	c.urls = append(c.urls, received{tenant: u.tenant, user: u.id, key: key, urlID: s.URLID, size: size, expiresAt: s.ExpiresAt, signedAt: time.Now()})
	c.seen[s.URLID] = len(c.urls) - 1
	return len(c.urls) - 1
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// sign asks for a URL, retrying with the same key on no answer, 503 and
// 409, until it gets one, runs out of attempts, the load stops or (when
// set) until passes. Attempts go to the signers in turn.
func (c *client) sign(ctx context.Context, u user, key string, size int64, until time.Time) (signed, bool) {
	body := fmt.Sprintf(`{"contentType":"image/png","contentLength":%d}`, size)
	s, ok := charge(ctx, c, "/uploads/sign", u, key, body, size, c.ops, until, func(a string) { c.answers[a]++ }, func(s signed) string { return s.URLID })
	if !ok {
		c.abandoned++
	}
	return s, ok
}

// charge is one charged request (a sign, a multipart create) with its
// retries: the same key on no answer, 503 and 409, until an answer with a
// urlId, the attempts run out, the load stops or (when set) until passes.
// Attempts go to the signers in turn from n; tally counts each answer.
// size is the contentLength body asks.
func charge[T any](ctx context.Context, c *client, path string, u user, key, body string, size int64, n int, until time.Time, tally func(string), urlID func(T) string) (T, bool) {
	var zero T
	backoff := firstBackoff
	for attempt := range maxAttempts {
		if attempt > 0 {
			if ctx.Err() != nil || (!until.IsZero() && time.Now().Add(backoff).After(until)) {
				break
			}
			time.Sleep(backoff)
			backoff = min(2*backoff, maxBackoff)
		}
		status, raw, err := c.post((c.id+n+attempt)%len(c.st.signers), path, u, key, body, size)
		if err != nil {
			tally("transport error")
			continue
		}
		switch status {
		case http.StatusCreated, http.StatusOK:
			tally(fmt.Sprint(status))
			var s T
			if err := json.Unmarshal(raw, &s); err != nil || urlID(s) == "" {
				tally(fmt.Sprintf("%d unreadable body", status))
				return zero, false
			}
			return s, true
		}
		tally(answerOf(status, raw))
		if status != http.StatusServiceUnavailable && status != http.StatusConflict {
			break
		}
	}
	return zero, false
}

// answerOf is how an answer is tallied: its status and error code.
func answerOf(status int, raw []byte) string {
	var e struct {
		Error string `json:"error"`
	}
	_ = json.Unmarshal(raw, &e)
	return strings.TrimSpace(fmt.Sprintf("%d %s", status, e.Error))
}

// post sends one charged request, of size bytes, to signer i, counted in
// its flight.
func (c *client) post(i int, path string, u user, key, body string, size int64) (int, []byte, error) {
	fl := c.ld.flights[i]
	fl.startedBytes.Add(size)
	fl.inFlightBytes.Add(size)
	fl.started.Add(1)
	fl.inFlight.Add(1)
	defer func() {
		fl.inFlight.Add(-1)
		fl.inFlightBytes.Add(-size)
	}()
	req, err := http.NewRequest(http.MethodPost, c.st.signers[i].URL+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Authorization", "Bearer "+u.token)
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, raw, err
}

// Slow uploads: one upload in slowEvery lands after its grant's due time,
// up to slowSpread after it, so that it lands before or after the
// sweeper's refund, depending on the faults.
const (
	slowEvery  = 8
	slowSpread = 3 * time.Second
)

// maxSingle is the most bytes a single PUT asks; it asks at least minBody.
const maxSingle = 256

// landLate stores s's object, b, at when, as a PUT started before s expired
// and finished then would with S3, which checks a presigned URL's expiry
// when the PUT starts. versitygw checks it once the body has arrived, so
// no slow PUT through the URL succeeds there: the object is written with
// the server's own credentials, and its ObjectCreated travels the real way
// (webhook, bridge, SQS, completer). The client goes on meanwhile.
func (c *client) landLate(i int, s signed, b []byte, when time.Time) {
	c.ld.landing.Go(func() {
		time.Sleep(time.Until(when))
		l := lateLanding{client: c.id, url: i}
		for range 3 {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := c.st.s3.Client().PutObject(ctx, &s3.PutObjectInput{
				Bucket: aws.String(c.st.s3.Bucket), Key: aws.String(s.Key), Body: bytes.NewReader(b),
				ContentType: aws.String(s.Headers.ContentType), IfNoneMatch: aws.String("*"),
			})
			cancel()
			if err == nil {
				l.stored = true
				break
			}
		}
		l.at = time.Now()
		c.ld.mu.Lock()
		c.ld.landed = append(c.ld.landed, l)
		c.ld.mu.Unlock()
	})
}

// reputAfterVerdict waits until u's upload reads rejected, then PUTs its
// URL again (If-None-Match: * passes: the quarantine emptied the key) with
// other bytes of the same size, as an uploader trying its luck would, if
// the URL is still live. Its answer goes to the client's record.
func (c *client) reputAfterVerdict(i int, u received, s signed) {
	c.ld.landing.Go(func() {
		done := keys.Done(u.tenant, u.urlID)
		for time.Now().Before(s.ExpiresAt) {
			v, _ := c.st.rdb.Get(context.Background(), done).Result()
			if strings.HasPrefix(v, "rejected:") {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if !time.Now().Before(s.ExpiresAt) {
			return // no verdict while the URL lived: nothing to try
		}
		_, status := c.put(s, reputBody(u.size), "")
		c.ld.mu.Lock()
		c.ld.reputs = append(c.ld.reputs, reputDone{client: c.id, url: i, status: status})
		c.ld.mu.Unlock()
	})
}

// put uploads b with exactly the returned headers, as a browser would,
// and a Content-Encoding header when encoding is not "" (unsigned: S3
// takes and keeps it). A 412 after a lost answer means the first try was
// stored.
func (c *client) put(s signed, b []byte, encoding string) (stored bool, status int) {
	for try := range 3 {
		req, err := http.NewRequest(s.Method, s.URL, bytes.NewReader(b))
		if err != nil {
			return false, 0
		}
		// Content-Length: net/http sends it from the body.
		req.Header.Set("Content-Type", s.Headers.ContentType)
		req.Header.Set("If-None-Match", s.Headers.IfNoneMatch)
		if encoding != "" {
			req.Header.Set("Content-Encoding", encoding)
		}
		resp, err := c.http.Do(req)
		if err != nil {
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK || (resp.StatusCode == http.StatusPreconditionFailed && try > 0), resp.StatusCode
	}
	return false, 0
}

// result is what every client saw, merged.
type result struct {
	urls                    []received
	keys                    map[string][]string
	answers                 map[string]int
	ops, abandoned, replays int
	mp                      mpRecord // every client's multipart grants
}

// result merges the clients' records; call it after stop.
func (ld *load) result() result {
	r := result{keys: map[string][]string{}, answers: map[string]int{}, mp: mpRecord{answers: map[string]int{}}}
	for _, l := range ld.landed {
		u := &ld.clients[l.client].urls[l.url]
		u.uploaded, u.uploadedAt = l.stored, l.at
	}
	for _, p := range ld.reputs {
		ld.clients[p.client].urls[p.url].reput = p.status
	}
	for _, c := range ld.clients {
		r.urls = append(r.urls, c.urls...)
		for k, v := range c.keys {
			r.keys[k] = v
		}
		for k, v := range c.answers {
			r.answers[k] += v
		}
		r.ops += c.ops
		r.abandoned += c.abandoned
		r.replays += c.replays
		r.mp.merge(c.mp)
	}
	return r
}
