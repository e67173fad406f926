package quota_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/quota"
	"github.com/mintgate/mintgate/shared/testenv"
)

// TestBatchFinishFails: a Finish of a batch whose commands fail (here a
// WRONGTYPE: its idempotency key holds a string) answers its own error, a
// reply of Redis as a single Finish's would be, and the Finishes around it
// keep theirs.
func TestBatchFinishFails(t *testing.T) {
	onWrongType(t, "finishwrongtype", func(t *testing.T, e *env, bad quota.Ask) {
		single := e.b.Finish(ctx, bad, e.finished("u9", "{}"))
		a, c := e.ask("alice", "k1"), e.ask("alice", "k2")
		got, err := e.b.FinishBatch(ctx, []quota.Finishing{
			{Ask: a, Finished: e.finished("u1", `{"u":1}`)},
			{Ask: bad, Finished: e.finished("u2", `{"u":2}`)},
			{Ask: c, Finished: e.finished("u3", `{"u":3}`)},
		})
		if err != nil || len(got) != 3 {
			t.Fatalf("batch: %v %v", got, err)
		}
		var re redis.Error
		if !errors.Is(got[1], quota.ErrUnavailable) || !errors.As(got[1], &re) || !strings.Contains(got[1].Error(), "WRONGTYPE") {
			t.Errorf("the failing finish: %v", got[1])
		}
		if !errors.As(single, &re) {
			t.Errorf("the same finish alone: %v, want a reply of Redis", single)
		}
		if got[0] != nil || got[2] != nil {
			t.Errorf("the finishes around it: %v, %v", got[0], got[2])
		}
		e.wantRecord(a.Idem, map[string]string{"state": "done", "fp": a.Fingerprint, "nonce": a.Nonce, "body": `{"u":1}`}, 2*time.Minute)
		e.wantRecord(c.Idem, map[string]string{"state": "done", "fp": c.Fingerprint, "nonce": c.Nonce, "body": `{"u":3}`}, 2*time.Minute)
	})
}

// TestFinishCoalescerConcurrent: 200 Finishes over 3 tenants at once, every
// fifth on a key tombstoned by a cancelled retry: each record done with its
// own body (a tombstone too), every grant record written — and the calls
// carried several Finishes each.
func TestFinishCoalescerConcurrent(t *testing.T) {
	rdb := startRedis(t)
	store := quota.New(rdb)
	c := quota.NewFinishCoalescer(store, 0, 0)
	tenants := []string{"fco-a", "fco-b", "fco-c"}
	now := time.UnixMilli(1_700_000_000_000)
	const callers = 200
	asks := make([]quota.Ask, callers)
	fins := make([]quota.Finished, callers)
	for i := range callers {
		asks[i] = coalesceAsk(tenants[i%len(tenants)], i)
		fins[i] = quota.Finished{URLID: fmt.Sprintf("g%d", i), Subject: "u:x", Body: fmt.Appendf(nil, `{"i":%d}`, i),
			ExpiresAt: now.Add(time.Minute), RecordTTL: 2 * time.Minute, GrantTTL: time.Hour}
		if i%5 == 0 {
			retry := asks[i]
			retry.Nonce = "n:retry"
			if _, err := store.Cancel(ctx, now, retry); err != nil {
				t.Fatal(err)
			}
		}
	}
	errs := make([]error, callers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			<-start
			errs[i] = c.Finish(cctx, asks[i], fins[i])
		})
	}
	close(start)
	wg.Wait()
	st := redisBackend("redis", rdb)
	for i, a := range asks {
		if errs[i] != nil {
			t.Fatalf("finish %d: %v", i, errs[i])
		}
		rec := st.get(t, a.Idem)[0]
		want := map[string]string{"state": "done", "body": string(fins[i].Body)}
		if rec.hash["state"] != want["state"] || rec.hash["body"] != want["body"] {
			t.Errorf("finish %d: %s holds %+v", i, a.Idem, rec)
		}
		if g := st.get(t, keys.Grant(a.Tenant, fins[i].URLID))[0]; !g.ok {
			t.Errorf("finish %d: no grant record", i)
		}
	}
	calls, finishes := c.Stats()
	t.Logf("%d finishes in %d calls", finishes, calls)
	if finishes != callers || calls >= finishes {
		t.Errorf("%d finishes in %d calls: nothing was gathered", finishes, calls)
	}
}

// TestFinishCoalescerRedisDown: while Redis is down, every Finish of a
// gathered call fails with ErrUnavailable, none waiting past its deadline;
// once it is back, each caller's retry of its own Finish writes its record.
func TestFinishCoalescerRedisDown(t *testing.T) {
	srv := testenv.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, PoolSize: 8})
	defer rdb.Close()
	c := quota.NewFinishCoalescer(quota.New(rdb), 0, 0)
	now := time.UnixMilli(1_700_000_000_000)
	const callers = 60
	asks := make([]quota.Ask, callers)
	fins := make([]quota.Finished, callers)
	for i := range callers {
		asks[i] = coalesceAsk(fmt.Sprintf("down-%d", i%3), i)
		fins[i] = quota.Finished{URLID: fmt.Sprintf("g%d", i), Subject: "u:x", Body: fmt.Appendf(nil, `{"i":%d}`, i),
			ExpiresAt: now.Add(time.Minute), RecordTTL: 2 * time.Minute, GrantTTL: time.Hour}
	}
	all := func(timeout time.Duration) []error {
		errs := make([]error, callers)
		var wg sync.WaitGroup
		for i := range callers {
			wg.Go(func() {
				cctx, cancel := context.WithTimeout(ctx, timeout)
				defer cancel()
				errs[i] = c.Finish(cctx, asks[i], fins[i])
			})
		}
		wg.Wait()
		return errs
	}
	srv.Stop()
	start := time.Now()
	for i, err := range all(300 * time.Millisecond) {
		if !errors.Is(err, quota.ErrUnavailable) {
			t.Errorf("down: finish %d: %v, want ErrUnavailable", i, err)
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("down: callers took %v", d)
	}
	srv.Start()
	for i, err := range all(5 * time.Second) {
		if err != nil {
			t.Fatalf("retry: finish %d: %v", i, err)
		}
		if got := rdb.HGet(ctx, asks[i].Idem, "body").Val(); got != string(fins[i].Body) {
			t.Errorf("retry: finish %d: body %q", i, got)
		}
	}
}
