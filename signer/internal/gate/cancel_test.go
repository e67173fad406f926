package gate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/config"
	"github.com/mintgate/mintgate/shared/dial"
	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/quota"
	"github.com/mintgate/mintgate/shared/testenv"
)

// redisClient is a client with the signer's own options (no retries, every
// step bounded by timeout), to the server at addr.
func redisClient(t *testing.T, addr string, timeout time.Duration) redis.UniversalClient {
	t.Helper()
	rdb, err := dial.Redis(config.Redis{URL: "redis://" + addr + "/0", Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// testGate is a signer's gate on rdb, with metrics of its own.
func testGate(rdb redis.UniversalClient, timeout time.Duration) (*Gate, *Metrics) {
	m := NewMetrics(prometheus.NewRegistry())
	return New(rdb, timeout, 0, m, slog.New(slog.NewTextHandler(io.Discard, nil))), m
}

// testAsk is alice's sign request with key, as newAttempt lays it out.
func testAsk(key string) quota.Ask {
	sub := keys.UserSubject("alice")
	return quota.Ask{
		Tenant: "acme", Idem: keys.Idempotency("acme", sub, key), Fingerprint: "fp", Nonce: "n-" + key,
		Buckets: []bucket.Bucket{
			{Key: keys.Bucket("acme", sub), Limit: bucket.Limit{Capacity: 30, Rate: 0.5}},
			{Key: keys.TenantBucket("acme"), Limit: bucket.Limit{Capacity: 600, Rate: 10}},
		},
	}
}

// cancels is what m counted, by result.
func cancels(m *Metrics) map[string]float64 {
	out := map[string]float64{}
	for _, r := range []string{CancelRefunded, CancelTombstone, CancelGaveUp} {
		out[r] = testutil.ToFloat64(m.Cancels.WithLabelValues(r))
	}
	return out
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

// TestSpendMayRun: a Spend that failed needs a Cancel unless nothing
// reached Redis or Redis answered. The dial and the timeout are go-redis's
// own errors, with the signer's client options, so an upgrade that changes
// them fails here.
func TestSpendMayRun(t *testing.T) {
	unavailable := func(err error) error { return fmt.Errorf("sign: %w: spend: %w", quota.ErrUnavailable, err) }
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"a refusal", errors.New("quota: no request fingerprint"), false},
		{"a failed dial", unavailable(&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}), false},
		{"no pooled connection in time", unavailable(redis.ErrPoolTimeout), false},
		{"an error reply", unavailable(redis.ErrCrossSlot), false},
		{"the deadline while waiting for the reply", unavailable(context.DeadlineExceeded), true},
		{"a read that timed out", unavailable(&net.OpError{Op: "read", Net: "tcp", Err: errors.New("i/o timeout")}), true},
		{"the connection lost", unavailable(io.EOF), true},
		{"a reply no script gives", fmt.Errorf("%w: spend replied %q", quota.ErrUnavailable, "what"), true},
	} {
		if got := spendMayRun(c.err); got != c.want {
			t.Errorf("%s (%v): %v, want %v", c.name, c.err, got, c.want)
		}
	}

	ctx := context.Background()
	now := time.UnixMilli(1_700_000_000_000)
	down := quota.New(redisClient(t, fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)), 150*time.Millisecond))
	_, err := down.Spend(ctx, now, testAsk("k1"), InFlightTTL)
	if err == nil || spendMayRun(err) {
		t.Errorf("a spend to a port nobody listens on: %v; want an error that needs no cancel", err)
	}

	// The bug itself: a connection open, Redis stalls, the Spend times out
	// on our side and runs when Redis resumes.
	srv := testenv.StartRedis(t)
	rdb := redisClient(t, srv.Addr, 150*time.Millisecond)
	q := quota.New(rdb)
	// A first spend opens the connection and loads the script, as the
	// signer's traffic did before a stall.
	if _, err := q.Spend(ctx, now, testAsk("k0"), InFlightTTL); err != nil {
		t.Fatal(err)
	}
	a := testAsk("k2")
	pause(t, srv)
	tctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	_, err = q.Spend(tctx, now, a, InFlightTTL)
	cancel()
	if err == nil || !spendMayRun(err) {
		t.Fatalf("a spend cut by a stall: %v; want an error that needs a cancel", err)
	}
	srv.Resume()
	check := redisClient(t, srv.Addr, time.Second)
	waitUntil(t, 5*time.Second, "the cut spend runs once Redis resumes", func() bool {
		return check.HGet(ctx, a.Idem, "nonce").Val() == a.Nonce
	})
	if refunded, err := quota.New(check).Cancel(ctx, now, a); err != nil || !refunded {
		t.Fatalf("cancel: %v %v, want refunded", refunded, err)
	}
	if got := check.HGet(ctx, a.Buckets[0].Key, "t").Val(); got != "29.000000" {
		t.Errorf("user bucket %q after the cancel, want 29.000000 (the first spend's)", got)
	}
}

// TestStalledSpendIsLate: with Redis's clock read, a sign whose Spend a
// stall cut answers 503, and when Redis resumes that Spend finds itself
// late and takes nothing, so no cancel is needed: a signer killed before
// its canceller ran loses no token (this one's canceller never runs).
func TestStalledSpendIsLate(t *testing.T) {
	srv := testenv.StartRedis(t)
	rdb := redisClient(t, srv.Addr, 150*time.Millisecond)
	g, m := testGate(rdb, 150*time.Millisecond)
	g.cancels = newCanceller(g.cancel, time.Now, m, g.log) // never run: the signer "died"
	ctx := context.Background()
	if err := g.clock.Sync(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	// A first sign opens the connection and loads the script.
	if d, err := g.Decide(ctx, testAsk("k0"), nil, now); err != nil || d.Outcome != quota.Allowed {
		t.Fatalf("first sign: %+v %v", d, err)
	}
	a := testAsk("k1")
	pause(t, srv)
	if _, err := g.Decide(ctx, a, nil, now); !errors.Is(err, bucket.ErrUnavailable) {
		t.Fatalf("sign during the stall: %v, want unavailable", err)
	}
	if n := len(g.cancels.queue); n != 1 {
		t.Fatalf("%d cancels queued, want 1", n)
	}
	srv.Resume()
	check := redisClient(t, srv.Addr, time.Second)
	// What the stalled socket held has run once a later command answers.
	if err := check.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the closed connection's commands
	if rec := check.HGetAll(ctx, a.Idem).Val(); len(rec) != 0 {
		t.Errorf("the cut spend left its record %v: it ran after its deadline", rec)
	}
	if got := check.HGet(ctx, a.Buckets[0].Key, "t").Val(); got != "29.000000" {
		t.Errorf("user bucket %q, want 29.000000 (the first sign's only)", got)
	}
	if late := testutil.ToFloat64(m.LateSpends); late != 0 {
		t.Errorf("%v late spends counted: only a Late reply that arrives in time counts", late)
	}
}

// TestLateReplyRetries: a Redis whose clock runs ahead of the estimate
// answers Late in time; the sign spends again without a deadline, is
// allowed, and the skew is counted.
func TestLateReplyRetries(t *testing.T) {
	srv := testenv.StartRedis(t)
	rdb := redisClient(t, srv.Addr, time.Second)
	g, m := testGate(rdb, time.Second)
	g.cancels = startCanceller(g.cancel, time.Now, m, g.log)
	t.Cleanup(g.cancels.close)
	ctx := context.Background()
	if err := g.clock.Sync(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	g.until = func(dl time.Time) time.Time { return g.clock.Until(dl).Add(-2 * time.Second) } // as if Redis's clock ran 2 s ahead
	a := testAsk("k1")
	d, err := g.Decide(ctx, a, nil, time.Now())
	if err != nil || d.Outcome != quota.Allowed {
		t.Fatalf("sign: %+v %v, want allowed", d, err)
	}
	if late := testutil.ToFloat64(m.LateSpends); late != 1 {
		t.Errorf("%v late spends counted, want 1", late)
	}
}

// TestCancellerSettles: a spend that ran is refunded, one that never ran
// leaves a tombstone, and an Ask no retry can fix gives up at once.
func TestCancellerSettles(t *testing.T) {
	srv := testenv.StartRedis(t)
	g, m := testGate(redisClient(t, srv.Addr, time.Second), time.Second)
	now := time.UnixMilli(1_700_000_000_000)
	ran, never := testAsk("k1"), testAsk("k2")
	if d, err := g.store.Spend(context.Background(), now, ran, InFlightTTL); err != nil || d.Outcome != quota.Allowed {
		t.Fatalf("spend: %+v %v", d, err)
	}
	bad := testAsk("k3")
	bad.Tenant = "other"
	c := startCanceller(g.cancel, func() time.Time { return now }, m, g.log)
	for _, a := range []quota.Ask{ran, never, bad} {
		c.add(a)
	}
	want := map[string]float64{CancelRefunded: 1, CancelTombstone: 1, CancelGaveUp: 1}
	waitUntil(t, 5*time.Second, "three cancels settled", func() bool { return maps.Equal(cancels(m), want) })
	c.close()
	if d, err := g.store.Spend(context.Background(), now, never, InFlightTTL); err != nil || d.Outcome != quota.Cancelled {
		t.Errorf("the spend that never ran, run now: %+v %v; want cancelled", d, err)
	}
}

// TestCancellerGivesUpAtItsDeadline: with Redis gone, a cancel is retried
// until its deadline, then counted as given up.
func TestCancellerGivesUpAtItsDeadline(t *testing.T) {
	srv := testenv.StartRedis(t)
	g, m := testGate(redisClient(t, srv.Addr, 150*time.Millisecond), 150*time.Millisecond)
	srv.Stop()
	tries := 0
	c := newCanceller(func(ctx context.Context, now time.Time, a quota.Ask) (bool, error) {
		tries++
		return g.cancel(ctx, now, a)
	}, time.Now, m, g.log)
	c.deadline, c.backoff.Min = 300*time.Millisecond, 10*time.Millisecond
	go c.run()
	c.add(testAsk("k1"))
	waitUntil(t, 5*time.Second, "the cancel gives up", func() bool { return cancels(m)[CancelGaveUp] == 1 })
	c.close()
	if tries < 2 {
		t.Errorf("%d tries before giving up; want retries", tries)
	}
}

// TestCancellerLastRoundAtShutdown: at shutdown, what the canceller holds —
// the cancel it is backing off from and those queued behind it — is tried
// once more, and settles if Redis answers.
func TestCancellerLastRoundAtShutdown(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartRedis(t)
	// Generous: the last round's calls must pass on a loaded machine.
	rdb := redisClient(t, srv.Addr, 500*time.Millisecond)
	g, m := testGate(rdb, 500*time.Millisecond)
	tried := make(chan error, 16)
	c := newCanceller(func(ctx context.Context, now time.Time, a quota.Ask) (bool, error) {
		refunded, err := g.cancel(ctx, now, a)
		tried <- err
		return refunded, err
	}, time.Now, m, g.log)
	c.backoff.Min, c.backoff.Max = time.Hour, time.Hour // no retry but the last round's
	go c.run()

	pause(t, srv)
	asks := []quota.Ask{testAsk("k1"), testAsk("k2"), testAsk("k3")}
	for _, a := range asks {
		c.add(a)
	}
	if err := <-tried; err == nil {
		t.Fatal("a cancel passed a stalled Redis")
	}
	srv.Resume()
	c.close()
	if got := cancels(m); got[CancelTombstone] != 3 || got[CancelGaveUp] != 0 {
		t.Fatalf("cancels %v; want 3 tombstones", got)
	}
	for _, a := range asks {
		if state := rdb.HGet(ctx, a.Idem, "state").Val(); state != "cancelled" {
			t.Errorf("%s: state %q, want cancelled", a.Idem, state)
		}
	}
	c.add(testAsk("k4"))
	if got := testutil.ToFloat64(m.CancelDropped); got != 1 {
		t.Errorf("a cancel added after close: %v dropped, want 1", got)
	}
}

// TestCancellerDropsWhatItCannotHold: a full queue drops and counts; the
// request still answers at once.
func TestCancellerDropsWhatItCannotHold(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	c := newCanceller(func(context.Context, time.Time, quota.Ask) (bool, error) {
		t.Error("the canceller ran")
		return false, nil
	}, time.Now, m, slog.New(slog.NewTextHandler(io.Discard, nil)))
	c.queue = make(chan pendingCancel, 2) // and no run: nothing takes from it
	for i := range 3 {
		c.add(testAsk(fmt.Sprintf("k%d", i)))
	}
	if got := testutil.ToFloat64(m.CancelDropped); got != 1 {
		t.Errorf("%v dropped, want 1", got)
	}
}

// The degraded-mode warning is written once per degradedLogEvery, naming
// how many signs it held back, not once per sign.
func TestDegradedWarningIsSampled(t *testing.T) {
	var s sampler
	t0 := time.Unix(1_700_000_000, 0)
	if n, ok := s.allow(t0); !ok || n != 0 {
		t.Fatalf("first: %d %v, want logged", n, ok)
	}
	for i := range 1000 {
		if _, ok := s.allow(t0.Add(time.Duration(i) * time.Millisecond)); ok {
			t.Fatalf("event %d within %v logged", i, degradedLogEvery)
		}
	}
	if n, ok := s.allow(t0.Add(degradedLogEvery)); !ok || n != 1000 {
		t.Errorf("after %v: %d %v, want logged with 1000 held back", degradedLogEvery, n, ok)
	}
}
