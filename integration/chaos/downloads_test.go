package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/keys"
)

// Downloads (POST /uploads/{urlId}/download, issue 40). Each URL whose
// PUT was stored is watched while the load runs and until the soak has
// settled: as soon as its done marker shows, its own caller asks for its
// download, at once, and once more when the marker holds a final verdict.
// What completed gets a URL (201), and a sample of those URLs is fetched
// at once: S3 answers the exact bytes uploaded. What the gate rejected is
// 410 upload_rejected, what is still verifying 409 not_completed. A 201
// for anything whose final verdict is not completed is the row that must
// stay at 0. Without upload records the signer answers from the grant
// record, which lives 2 × (URL TTL + grace) from the sign: a 404 after
// that is not judged (docs/api.md).

// dlSample is how many of the 201s the soak fetches.
const dlSample = 25

// dlAnswer is the signer's answer to one download request, and, for a
// sampled 201, what its GET returned.
type dlAnswer struct {
	status  int
	code    string // the error code of a 4xx/5xx
	url     string // the presigned GET of a 201
	fetched bool   // the GET was made (a sampled 201)
	same    bool   // the GET answered 200 with the exact bytes uploaded
	err     string // a transport error or the GET's status
}

// dlAsk is one download request: of which URL, what its done marker read
// just before, and when.
type dlAsk struct {
	u      received
	before string // the done marker's value read just before the ask
	at     time.Time
	// noRecord: the answer was 404 and the grant record was not in Redis
	// just after it. A sign whose completing write failed (Redis killed
	// or stalled then) is issued without it, and the signer can know
	// neither the upload's caller nor its type: 404 is its documented
	// answer (docs/api.md), not a wrong one.
	noRecord bool
	dlAnswer
}

// downloader watches the stored uploads and asks for their downloads.
type downloader struct {
	st      *stack
	hc      *http.Client
	life    time.Duration // the grant record's: 2 × (URL TTL + grace)
	mu      sync.Mutex
	pending []received // stored, no final verdict asked yet
	asked   map[string]bool
	asks    []dlAsk
	sampled int
	tokens  map[[2]string]string
	cancel  context.CancelFunc
	done    chan struct{}
}

// startDownloads starts the watcher; watch hands it a stored upload, stop
// ends it and returns every ask.
func startDownloads(ctx context.Context, st *stack) *downloader {
	ctx, cancel := context.WithCancel(ctx)
	d := &downloader{st: st, hc: &http.Client{Timeout: 10 * time.Second}, life: 2 * (st.p.ttl + st.p.grace),
		asked: map[string]bool{}, tokens: map[[2]string]string{}, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(d.done)
		for ctx.Err() == nil {
			d.pass(ctx)
			time.Sleep(200 * time.Millisecond)
		}
	}()
	return d
}

// watch adds u, whose PUT was stored.
func (d *downloader) watch(u received) {
	if d == nil {
		return
	}
	d.mu.Lock()
	d.pending = append(d.pending, u)
	d.mu.Unlock()
}

// stop ends the watcher and returns its asks.
func (d *downloader) stop() []dlAsk {
	d.cancel()
	<-d.done
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.asks
}

// pass reads the pending uploads' done markers and asks for the download
// of each that has one: once while verifying, once when final. An upload
// past its grant record's life leaves the watch.
func (d *downloader) pass(ctx context.Context) {
	d.mu.Lock()
	pending := slices.Clone(d.pending)
	d.mu.Unlock()
	if len(pending) == 0 {
		return
	}
	pipe := d.st.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(pending))
	for i, u := range pending {
		cmds[i] = pipe.Get(ctx, keys.Done(u.tenant, u.urlID))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return // Redis is down or paused: next pass
	}
	keep := map[string]bool{}
	for i, u := range pending {
		v, err := cmds[i].Result()
		final := err == nil && (outcome{done: true, value: v}).final()
		switch {
		case time.Since(u.signedAt) > d.life:
		case err != nil:
			keep[u.urlID] = true
		case !final && d.asked[u.urlID]:
			keep[u.urlID] = true
		default:
			d.ask(ctx, u, v)
			if !final {
				keep[u.urlID] = true
			}
		}
	}
	d.mu.Lock()
	d.pending = slices.DeleteFunc(d.pending, func(u received) bool { return !keep[u.urlID] })
	d.mu.Unlock()
}

// ask sends u's download request as its own caller, before being what its
// done marker read, and fetches the URL of a sampled 201.
func (d *downloader) ask(ctx context.Context, u received, before string) {
	k := [2]string{u.tenant, u.user}
	tok, ok := d.tokens[k]
	if !ok {
		var err error
		tok, err = jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
			"sub": u.user, "tenant_id": u.tenant, "exp": time.Now().Add(time.Hour).Unix(),
		}).SignedString(d.st.jwtSecret)
		if err != nil {
			return
		}
		d.tokens[k] = tok
	}
	d.asked[u.urlID] = true
	at := time.Now()
	a := askDownload(ctx, d.hc, d.st.signers[0].URL, u.urlID, tok)
	if a.status == http.StatusCreated && d.sampled < dlSample {
		d.sampled++
		a.fetched = true
		a.same, a.err = fetchEquals(ctx, d.hc, a.url, body(u.size, u.wrong))
	}
	if ctx.Err() != nil {
		return // cut by stop: not an answer
	}
	noRecord := false
	if a.status == http.StatusNotFound {
		n, err := d.st.rdb.Exists(ctx, keys.Grant(u.tenant, u.urlID)).Result()
		noRecord = err == nil && n == 0
	}
	d.mu.Lock()
	d.asks = append(d.asks, dlAsk{u: u, before: before, at: at, noRecord: noRecord, dlAnswer: a})
	d.mu.Unlock()
}

// askDownload sends one POST /uploads/{urlID}/download with token.
func askDownload(ctx context.Context, hc *http.Client, base, urlID, token string) dlAnswer {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/uploads/"+urlID+"/download", nil)
	if err != nil {
		return dlAnswer{err: err.Error()}
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := hc.Do(req)
	if err != nil {
		return dlAnswer{err: err.Error()}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return dlAnswer{status: resp.StatusCode, err: err.Error()}
	}
	var ans struct {
		URL   string `json:"url"`
		Error string `json:"error"`
	}
	_ = json.Unmarshal(raw, &ans) // a body that is not JSON leaves both empty: the status says enough
	return dlAnswer{status: resp.StatusCode, code: ans.Error, url: ans.URL}
}

// fetchEquals GETs url and reports whether it answered 200 with want.
func fetchEquals(ctx context.Context, hc *http.Client, url string, want []byte) (bool, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, err.Error()
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		return false, err.Error()
	}
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Sprintf("GET %d", resp.StatusCode)
	}
	if !bytes.Equal(got, want) {
		return false, fmt.Sprintf("GET 200 with %d bytes, want %d", len(got), len(want))
	}
	return true, ""
}

// judgeDownload says whether a's answer is right for its upload, whose
// marker read a.before just before and whose final outcome is final, and
// if not, what is wrong: "leak" (a URL for what did not complete),
// "wrong" (another answer than the verdict's) or "" when it holds or is
// not judged (a 429, a 503, no answer, or a 404 once the grant record may
// be gone). life is the grant record's.
func judgeDownload(a dlAsk, final outcome, life time.Duration) (bad string, judged bool) {
	before := outcome{done: true, value: a.before}
	_, rejectedBefore := before.rejected()
	_, rejected := final.rejected()
	switch a.status {
	case http.StatusCreated:
		if !final.completed() {
			return "leak", true
		}
	case http.StatusGone:
		if !rejected {
			return "wrong", true
		}
	case http.StatusConflict:
		// A final verdict never goes back to verifying.
		if before.completed() || rejectedBefore {
			return "wrong", true
		}
	case http.StatusNotFound:
		// The record lives from the sign, which came before signedAt;
		// one never written (see dlAsk.noRecord) is not judged.
		if !a.noRecord && a.at.Before(a.u.signedAt.Add(life-2*time.Second)) {
			return "wrong", true
		}
		return "", false
	case http.StatusTooManyRequests, http.StatusServiceUnavailable, 0:
		return "", false
	default:
		return "wrong", true
	}
	return "", true
}

// checkDownloads: no URL for what did not complete; every judged answer
// as the verdict says; every sampled URL gives back the exact bytes
// uploaded.
func (r *report) checkDownloads(res result, outs []outcome, asks []dlAsk, life time.Duration) {
	finals := make(map[string]outcome, len(res.urls))
	for i, u := range res.urls {
		finals[u.urlID] = outs[i]
	}
	var granted, leaked, wrong, unjudged, fetched, differ, verifying int
	statuses := map[string]int{}
	for _, a := range asks {
		o := finals[a.u.urlID]
		statuses[strings.TrimSpace(fmt.Sprintf("%d %s", a.status, a.code))]++
		if !(outcome{done: true, value: a.before}).final() {
			verifying++
		}
		switch bad, judged := judgeDownload(a, o, life); {
		case !judged:
			unjudged++
		case bad == "leak":
			leaked++
			r.example("download URL for an upload not completed", a.u, o)
		case bad == "wrong":
			wrong++
			r.example(fmt.Sprintf("download answered %d %s %s with the marker at %q", a.status, a.code, a.err, a.before), a.u, o)
		}
		if a.status == http.StatusCreated {
			granted++
		}
		if a.fetched {
			fetched++
			if !a.same {
				differ++
				r.example("downloaded bytes differ ("+a.err+")", a.u, o)
			}
		}
	}
	r.summary = append(r.summary, fmt.Sprintf("downloads: %d asked (%d while verifying), %d granted, %d fetched, %d not judged; answers: %s",
		len(asks), verifying, granted, fetched, unjudged, answers(statuses)))
	r.add("download URL for an upload not completed (rejected, verifying)", fmt.Sprint(leaked), "0", leaked == 0)
	r.add("download answer not as its verdict (201 completed, 410 rejected, 409 verifying)", fmt.Sprint(wrong), "0", wrong == 0)
	// Not vacuous: when stored uploads completed, some download was
	// granted and fetched.
	completed := 0
	for i, u := range res.urls {
		if u.uploaded && outs[i].completed() {
			completed++
		}
	}
	r.add("downloaded bytes not the upload's (some fetched when uploads completed)",
		fmt.Sprintf("%d of %d fetched, %d stored uploads completed", differ, fetched, completed), "0", differ == 0 && (fetched > 0 || (completed == 0 && granted == 0)))
}
