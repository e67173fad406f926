package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mintgate/mintgate/shared/events"
	"github.com/mintgate/mintgate/shared/records"
	"github.com/mintgate/mintgate/shared/testenv"
	"github.com/mintgate/mintgate/signer/internal/apierr"
)

const recordsAdmin = "an-admin-token-of-at-least-32-bytes!"

// recordsEnv is a stack with a migrated PostgreSQL and the records' feed
// running on it (the code the sweeper runs), and a publisher of the
// completer's events.
type recordsEnv struct {
	stack
	pg  *testenv.Postgres
	db  *records.Store
	pub *events.Publisher
}

func newRecordsEnv(t *testing.T) *recordsEnv {
	t.Helper()
	s := newStack(t)
	pg := testenv.StartPostgres(t)
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if _, err := records.Migrate(ctx, pg.URL(""), quiet); err != nil {
		t.Fatal(err)
	}
	db, err := records.Open(ctx, pg.UserURL("mintgate_service"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	nc, err := nats.Connect(s.nats.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	feedCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		(&records.Feed{Store: db, JS: js, Secrets: [][]byte{[]byte(testenv.GrantSecret)}, Log: quiet}).Run(feedCtx)
	}()
	t.Cleanup(func() { stop(); <-done })
	return &recordsEnv{stack: s, pg: pg, db: db, pub: events.New(js)}
}

// signer starts a signer with records on (and the admin API), on the
// real clock, with the variables kv on top; stop ends it (its tallies
// flushed) and waits.
func (r *recordsEnv) signer(t *testing.T, kv ...string) (s *signer, stop func()) {
	t.Helper()
	env := r.env(t)
	env["MINTGATE_POSTGRES_URL"] = r.pg.UserURL("mintgate_service")
	env["MINTGATE_ADMIN_TOKEN"] = recordsAdmin
	for i := 0; i+1 < len(kv); i += 2 {
		env[kv[i]] = kv[i+1]
	}
	s = &signer{t: t, base: "http://" + env["MINTGATE_HTTP_ADDR"], ops: "http://" + env["MINTGATE_OPS_ADDR"], log: &testenv.Buffer{}, clock: newClock()}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- runWith(ctx, mapEnv(env), s.log, func(d *deps) { d.now = time.Now }) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-errc:
			if err != nil {
				t.Errorf("signer: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("signer did not shut down")
		}
	}
	t.Cleanup(stop)
	waitHealthy(t, s.base, errc, s.log)
	waitFor(t, 15*time.Second, "signer ready", func() bool {
		resp, err := http.Get(s.ops + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return s, stop
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func (s *signer) get(path, tok string) reply {
	s.t.Helper()
	return s.do(http.MethodGet, path, map[string]string{"Authorization": "Bearer " + tok}, "")
}

// TestUploadsListAndUsage: every sign is a row within 5 s; GET /uploads
// pages a caller's own uploads newest first, never another caller's;
// the usage counts completed bytes exactly.
func TestUploadsListAndUsage(t *testing.T) {
	r := newRecordsEnv(t)
	s, _ := r.signer(t)
	alice, bob := s.token("acme", "alice"), s.token("acme", "bob")
	var mine []string
	for i := range 7 {
		body := fmt.Sprintf(`{"contentType":"image/png","contentLength":%d}`, 100+i)
		a := s.sign(alice, newKey(), body)
		mustStatus(t, a, http.StatusCreated, "")
		mine = append(mine, a.str("urlId"))
		mustStatus(t, s.sign(bob, newKey(), pngBody), http.StatusCreated, "")
		time.Sleep(2 * time.Millisecond) // distinct issue times
	}
	last := mine[len(mine)-1]
	waitFor(t, 5*time.Second, "the last sign's row", func() bool {
		v, _ := r.db.QueryValue(context.Background(), "SELECT status FROM mintgate.uploads WHERE url_id = $1", last)
		return v == records.Issued
	})
	// Two of alice's complete with their declared sizes.
	ctx := context.Background()
	for i, id := range mine[:2] {
		if _, err := r.pub.Publish(ctx, events.Event{URLID: id, Tenant: "acme", Key: "incoming/acme/" + id, Size: int64(100 + i), CompletedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 5*time.Second, "the completed rows", func() bool {
		v, _ := r.db.QueryValue(ctx, "SELECT count(*) FROM mintgate.uploads WHERE status = 'completed'")
		return v == "2"
	})

	var listed []string
	cursor := ""
	for pages := 0; pages < 10; pages++ {
		path := "/uploads?limit=3"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		p := s.get(path, alice)
		mustStatus(t, p, http.StatusOK, "")
		var page struct {
			Uploads []struct {
				URLID, Status, Filename string
				IssuedAt                time.Time
			}
			Next *string
		}
		if err := json.Unmarshal(p.raw, &page); err != nil {
			t.Fatal(err)
		}
		for _, u := range page.Uploads {
			listed = append(listed, u.URLID)
		}
		if page.Next == nil {
			break
		}
		cursor = *page.Next
	}
	if len(listed) != len(mine) {
		t.Fatalf("listed %d of alice's uploads, want %d: %v", len(listed), len(mine), listed)
	}
	for i, id := range listed {
		if want := mine[len(mine)-1-i]; id != want {
			t.Fatalf("upload %d listed is %s, want %s (newest first, alice's only)", i, id, want)
		}
	}
	done := s.get("/uploads?status=completed", alice)
	if n := len(done.body["uploads"].([]any)); n != 2 {
		t.Fatalf("?status=completed listed %d, want 2: %s", n, done.raw)
	}
	mustStatus(t, s.get("/uploads?limit=101", alice), http.StatusBadRequest, apierr.CodeInvalidRequest)
	mustStatus(t, s.get("/uploads?status=nope", alice), http.StatusBadRequest, apierr.CodeInvalidRequest)
	mustStatus(t, s.get("/uploads?cursor=zzz", alice), http.StatusBadRequest, apierr.CodeInvalidRequest)

	u := s.get("/uploads/usage", alice)
	mustStatus(t, u, http.StatusOK, "")
	if u.body["bytes"] != float64(201) || u.body["uploads"] != float64(7) {
		t.Fatalf("alice's usage %s, want 7 uploads and 100+101 bytes", u.raw)
	}
	ops := &signer{t: t, base: s.ops, clock: s.clock}
	a := ops.do(http.MethodGet, "/admin/tenants/acme/usage", map[string]string{"Authorization": "Bearer " + recordsAdmin}, "")
	mustStatus(t, a, http.StatusOK, "")
	if a.body["bytes"] != float64(201) || a.body["uploads"] != float64(14) {
		t.Fatalf("acme's usage %s, want 14 uploads and 201 bytes", a.raw)
	}
}

// TestTenantMinutesEqualWhatCallersSaw: two signers, a tenant bucket that
// refuses: the minutes' sums equal the 201s and the 429s by scope the
// callers saw, and at-ceiling lists the tenant.
func TestTenantMinutesEqualWhatCallersSaw(t *testing.T) {
	r := newRecordsEnv(t)
	tiers := "MINTGATE_TIERS"
	const shape = "anonymous=5:5/1h,user=6:6/1h,tenant=20:20/1h"
	s1, stop1 := r.signer(t, tiers, shape)
	s2, stop2 := r.signer(t, tiers, shape)
	seen := map[string]int{}
	for i := range 12 {
		for j, s := range []*signer{s1, s2} {
			res := s.sign(s.token("acme", "user"+strconv.Itoa((i+j)%5)), newKey(), pngBody)
			switch res.status {
			case http.StatusCreated:
				seen["signs"]++
			case http.StatusTooManyRequests:
				seen[res.str("scope")]++
			default:
				t.Fatalf("sign: %d %s", res.status, res.raw)
			}
		}
	}
	mustStatus(t, s1.sign(s1.token("calm", "x"), newKey(), pngBody), http.StatusCreated, "")
	seen["calm"]++
	if seen["tenant"] == 0 {
		t.Fatalf("no sign refused by the tenant bucket: %v", seen)
	}
	stop1() // each flushes its minutes as it stops
	stop2()
	want := fmt.Sprintf("%d/%d/%d/0", seen["signs"], seen["caller"], seen["tenant"])
	waitFor(t, 5*time.Second, "the tallies summed to "+want, func() bool {
		v, _ := r.db.QueryValue(context.Background(), `SELECT sum(signs) || '/' || sum(refused_caller) || '/' || sum(refused_tenant) || '/' || sum(refused_other)
FROM mintgate.tenant_minutes WHERE tenant = 'acme'`)
		return v == want
	})
	s3, _ := r.signer(t)
	ops := &signer{t: t, base: s3.ops, clock: s3.clock}
	res := ops.do(http.MethodGet, "/admin/tenants/at-ceiling?window=1h", map[string]string{"Authorization": "Bearer " + recordsAdmin}, "")
	mustStatus(t, res, http.StatusOK, "")
	var got struct{ Tenants []records.Ceiling }
	if err := json.Unmarshal(res.raw, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Tenants) != 1 || got.Tenants[0].Tenant != "acme" || got.Tenants[0].MinutesAtCeiling < 1 ||
		got.Tenants[0].Signs != int64(seen["signs"]) || got.Tenants[0].Refused != int64(seen["caller"]+seen["tenant"]) {
		t.Fatalf("at-ceiling %s, want acme alone with %v", res.raw, seen)
	}
}

// TestRecordsOffAnswer404: without MINTGATE_POSTGRES_URL the routes
// answer 404 records_off and nothing else changes.
func TestRecordsOffAnswer404(t *testing.T) {
	s := startWith(t, "MINTGATE_ADMIN_TOKEN", recordsAdmin)
	tok := s.token("acme", "alice")
	mustStatus(t, s.sign(tok, newKey(), pngBody), http.StatusCreated, "")
	mustStatus(t, s.get("/uploads", tok), http.StatusNotFound, apierr.CodeRecordsOff)
	mustStatus(t, s.get("/uploads/usage", tok), http.StatusNotFound, apierr.CodeRecordsOff)
	ops := &signer{t: t, base: s.ops, clock: s.clock}
	for _, p := range []string{"/admin/tenants/acme/usage", "/admin/tenants/at-ceiling"} {
		mustStatus(t, ops.do(http.MethodGet, p, map[string]string{"Authorization": "Bearer " + recordsAdmin}, ""), http.StatusNotFound, apierr.CodeRecordsOff)
	}
}

// TestRecordsAnswersMatchOpenAPI: the records routes' real answers match
// api/openapi.yaml, on and off, and with PostgreSQL down.
func TestRecordsAnswersMatchOpenAPI(t *testing.T) {
	c := &apiCheck{t: t, doc: loadAPI(t), seen: map[string]bool{}}
	r := newRecordsEnv(t)
	s, _ := r.signer(t)
	ops := &signer{t: t, base: s.ops, clock: s.clock}
	tok := s.token("acme", "alice")
	admin := map[string]string{"Authorization": "Bearer " + recordsAdmin}
	get := http.MethodGet
	for range 3 {
		mustStatus(t, s.sign(tok, newKey(), pngBody), http.StatusCreated, "")
	}
	waitFor(t, 5*time.Second, "the rows", func() bool {
		v, _ := r.db.QueryValue(context.Background(), "SELECT count(*) FROM mintgate.uploads")
		return v == "3"
	})
	page := c.expect(http.StatusOK, get, "/uploads", s.get("/uploads?limit=2", tok))
	c.expect(http.StatusOK, get, "/uploads", s.get("/uploads?limit=2&cursor="+page.str("next"), tok))
	c.expect(http.StatusOK, get, "/uploads", s.get("/uploads?status=completed", tok))
	c.expect(http.StatusBadRequest, get, "/uploads", s.get("/uploads?limit=0", tok))
	c.expect(http.StatusUnauthorized, get, "/uploads", s.do(get, "/uploads", nil, ""))
	c.expect(http.StatusOK, get, "/uploads/usage", s.get("/uploads/usage", tok))
	c.expect(http.StatusOK, get, "/admin/tenants/{tenant}/usage", ops.do(get, "/admin/tenants/acme/usage", admin, ""))
	c.expect(http.StatusBadRequest, get, "/admin/tenants/{tenant}/usage", ops.do(get, "/admin/tenants/a.b/usage", admin, ""))
	c.expect(http.StatusOK, get, "/admin/tenants/at-ceiling", ops.do(get, "/admin/tenants/at-ceiling?window=2h", admin, ""))
	c.expect(http.StatusBadRequest, get, "/admin/tenants/at-ceiling", ops.do(get, "/admin/tenants/at-ceiling?window=1s", admin, ""))
	c.expect(http.StatusUnauthorized, get, "/admin/tenants/at-ceiling", ops.do(get, "/admin/tenants/at-ceiling", nil, ""))
	r.pg.Stop()
	c.expect(http.StatusServiceUnavailable, get, "/uploads", s.get("/uploads", tok))
	c.expect(http.StatusServiceUnavailable, get, "/uploads/usage", s.get("/uploads/usage", tok))
	c.expect(http.StatusServiceUnavailable, get, "/admin/tenants/at-ceiling", ops.do(get, "/admin/tenants/at-ceiling", admin, ""))
	// Signs never wait for PostgreSQL.
	mustStatus(t, s.sign(tok, newKey(), pngBody), http.StatusCreated, "")

	off := startWith(t, "MINTGATE_ADMIN_TOKEN", recordsAdmin)
	offOps := &signer{t: t, base: off.ops, clock: off.clock}
	c.expect(http.StatusNotFound, get, "/uploads", off.get("/uploads", off.token("acme", "alice")))
	c.expect(http.StatusNotFound, get, "/uploads/usage", off.get("/uploads/usage", off.token("acme", "alice")))
	c.expect(http.StatusNotFound, get, "/admin/tenants/at-ceiling", offOps.do(get, "/admin/tenants/at-ceiling", admin, ""))
	c.expect(http.StatusNotFound, get, "/admin/tenants/{tenant}/usage", offOps.do(get, "/admin/tenants/acme/usage", admin, ""))
}
