package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/quota"
	"github.com/mintgate/mintgate/shared/testenv"
	"github.com/mintgate/mintgate/signer/internal/apierr"
)

// waitReply is one long poll's answer and when it came.
type waitReply struct {
	status int
	body   map[string]any
	took   time.Duration
	err    error
}

// getWait asks GET /uploads/{id}?wait=... with header h, on its own (safe
// from any goroutine).
func getWait(base, id, wait string, h map[string]string) waitReply {
	req, _ := http.NewRequest(http.MethodGet, base+"/uploads/"+id+"?wait="+wait, nil)
	for k, v := range h {
		req.Header.Set(k, v)
	}
	t0 := time.Now()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return waitReply{err: err, took: time.Since(t0)}
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	r := waitReply{status: res.StatusCode, took: time.Since(t0), err: err}
	if err == nil {
		r.err = json.Unmarshal(raw, &r.body)
	}
	return r
}

// TestStatusWaitAnswersAtTheVerdict: a wait answers at the completer's
// event within a second (here in milliseconds), at a verdict that comes
// without an event by its periodic read, and at its end with the status
// then; a bad wait is 400.
func TestStatusWaitAnswersAtTheVerdict(t *testing.T) {
	st := newStack(t)
	s := start(t, st.env(t))
	ctx := context.Background()
	tok := s.token("acme", "alice")
	auth := map[string]string{"Authorization": "Bearer " + tok}
	issue := func() string {
		r := s.sign(tok, newKey(), pngBody)
		if r.status != http.StatusCreated {
			t.Fatalf("sign: %d %s", r.status, r.raw)
		}
		return r.str("urlId")
	}
	id := issue()
	for _, bad := range []string{"31", "-1", "abc", "", "1.5", "999999999999999999999"} {
		mustStatus(t, s.do(http.MethodGet, "/uploads/"+id+"?wait="+bad, auth, ""), http.StatusBadRequest, apierr.CodeInvalidRequest)
	}

	nc, err := nats.Connect(st.nats.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for _, tc := range []struct{ marker, subject, status string }{
		{quota.DoneVerified, "mintgate.uploads.completed.acme", statusCompleted},
		{quota.Rejecting("type_mismatch"), "mintgate.uploads.rejected.acme", statusRejected},
	} {
		id := issue()
		s.rdb.Set(ctx, keys.Done("acme", id), quota.DoneVerifying, time.Minute)
		got := make(chan waitReply, 1)
		go func() { got <- getWait(s.base, id, "30", auth) }()
		time.Sleep(500 * time.Millisecond) // the wait is parked
		s.rdb.Set(ctx, keys.Done("acme", id), tc.marker, time.Minute)
		msg := nats.NewMsg(tc.subject)
		msg.Header.Set(nats.MsgIdHdr, id)
		msg.Data = []byte(`{"urlId":"` + id + `"}`)
		published := time.Now()
		if err := nc.PublishMsg(msg); err != nil {
			t.Fatal(err)
		}
		r := <-got
		if r.err != nil || r.status != http.StatusOK || r.body["status"] != tc.status {
			t.Fatalf("%s: %d %v %v", tc.status, r.status, r.body, r.err)
		}
		if after := time.Since(published); after > time.Second {
			t.Errorf("%s: answered %v after the event, want within 1 s", tc.status, after)
		} else {
			t.Logf("%s: answered %v after the event", tc.status, after)
		}
	}

	// No event (NATS lost it): the periodic read finds the verdict.
	quiet := issue()
	go func() {
		time.Sleep(300 * time.Millisecond)
		s.rdb.Set(ctx, keys.Done("acme", quiet), quota.DoneVerified, time.Minute)
	}()
	if r := getWait(s.base, quiet, "30", auth); r.status != http.StatusOK || r.body["status"] != statusCompleted || r.took > statusRecheck+time.Second {
		t.Errorf("without an event: %d %v after %v", r.status, r.body, r.took)
	}
	// The wait ends with the status then; a decided upload answers at once.
	if r := getWait(s.base, issue(), "1", auth); r.status != http.StatusOK || r.body["status"] != statusPending || r.took < time.Second || r.took > 3*time.Second {
		t.Errorf("wait=1 on a pending grant: %d %v after %v", r.status, r.body, r.took)
	}
	if r := getWait(s.base, quiet, "30", auth); r.body["status"] != statusCompleted || r.took > time.Second {
		t.Errorf("wait on a completed upload: %v after %v", r.body, r.took)
	}
	// A wait longer than the server's read timeout (15 s) still answers,
	// at its end.
	if r := getWait(s.base, issue(), "18", auth); r.err != nil || r.status != http.StatusOK || r.body["status"] != statusPending || r.took < 18*time.Second {
		t.Errorf("wait=18 on a pending grant: %d %v %v after %v", r.status, r.body, r.err, r.took)
	}
	// Not yours: the 404 at once, no wait.
	other := map[string]string{"Authorization": "Bearer " + s.token("acme", "bob")}
	if r := getWait(s.base, id, "30", other); r.status != http.StatusNotFound || r.took > time.Second {
		t.Errorf("another subject's wait: %d after %v", r.status, r.took)
	}
}

// TestStatusWaitsBounded: 200 waits at once from one address park at most
// MINTGATE_STATUS_WAITERS_PER_ADDRESS; the others are 429 at once, each
// counted; the instance bound holds across addresses the same way.
func TestStatusWaitsBounded(t *testing.T) {
	for _, tc := range []struct {
		name           string
		perAddr, total string
		wantParked     int
	}{
		{name: "per address", perAddr: "20", total: "2000", wantParked: 20},
		{name: "per instance", perAddr: "1000", total: "7", wantParked: 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newStack(t).env(t)
			env["MINTGATE_READ_LIMIT"] = "off" // the wait's own bound, not the reads'
			env["MINTGATE_STATUS_WAITERS_PER_ADDRESS"] = tc.perAddr
			env["MINTGATE_STATUS_WAITERS"] = tc.total
			reg := prometheus.NewRegistry()
			m := newMetrics(reg)
			s := start(t, env, withMetrics(reg, m))
			tok := s.token("acme", "alice")
			auth := map[string]string{"Authorization": "Bearer " + tok}
			r := s.sign(tok, newKey(), pngBody)
			id := r.str("urlId")

			const n = 200
			replies := make([]waitReply, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() { defer wg.Done(); replies[i] = getWait(s.base, id, "3", auth) }()
			}
			wg.Wait()
			parked, refused := 0, 0
			for _, r := range replies {
				switch {
				case r.err != nil:
					t.Fatalf("wait: %v", r.err)
				case r.status == http.StatusOK && r.body["status"] == statusPending && r.took >= 3*time.Second:
					parked++
				case r.status == http.StatusTooManyRequests && r.body["error"] == apierr.CodeTooManyReads && r.took < 3*time.Second:
					refused++
				default:
					t.Errorf("unexpected: %d %v after %v", r.status, r.body, r.took)
				}
			}
			if parked != tc.wantParked || refused != n-tc.wantParked {
				t.Errorf("parked %d, refused %d; want %d and %d", parked, refused, tc.wantParked, n-tc.wantParked)
			}
			if got := testutil.ToFloat64(m.waitsRefused); got != float64(refused) {
				t.Errorf("refused counted %v, want %d", got, refused)
			}
			if got := testutil.ToFloat64(m.waiting); got != 0 {
				t.Errorf("waits in progress after all answered: %v", got)
			}
		})
	}
}

// TestStatusWaitAnsweredAtShutdown: a SIGTERM (the run's context ending)
// answers a wait at once with the status then, well before its end, so
// the drain never waits 30 s and the client asks again.
func TestStatusWaitAnsweredAtShutdown(t *testing.T) {
	env := newStack(t).env(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	log := &testenv.Buffer{}
	go func() { errc <- runWith(ctx, mapEnv(env), log) }()
	base := "http://" + env["MINTGATE_HTTP_ADDR"]
	waitHealthy(t, base, errc, log)
	s := &signer{t: t, base: base, log: log, clock: newClock()}
	tok := s.token("acme", "alice")
	r := s.sign(tok, newKey(), pngBody)
	got := make(chan waitReply, 1)
	go func() {
		got <- getWait(base, r.str("urlId"), "30", map[string]string{"Authorization": "Bearer " + tok})
	}()
	time.Sleep(500 * time.Millisecond)
	stopped := time.Now()
	cancel()
	w := <-got
	if w.err != nil || w.status != http.StatusOK || w.body["status"] != statusPending || time.Since(stopped) > 2*time.Second {
		t.Errorf("wait at shutdown: %d %v %v after %v", w.status, w.body, w.err, time.Since(stopped))
	}
	if err := <-errc; err != nil {
		t.Errorf("signer: %v", err)
	}
}
