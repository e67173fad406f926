package gate

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/quota"
	"github.com/mintgate/mintgate/shared/testenv"
)

// TestGateFinishesGathered: concurrent finishes of one tenant share
// transactions, and each leaves its own record, done with its own body —
// where a retry of the key was cancelled meanwhile too: that retry's late
// spend finds the done record and takes nothing.
func TestGateFinishesGathered(t *testing.T) {
	srv := testenv.StartRedis(t)
	rdb := redisClient(t, srv.Addr, time.Second)
	g, _ := testGate(rdb, time.Second)
	ctx := context.Background()
	const n = 100
	as := make([]quota.Ask, n)
	for i := range as {
		as[i] = testAsk(fmt.Sprintf("k%d", i))
		if i%10 == 0 {
			retry := as[i]
			retry.Nonce = "n-retry"
			if _, err := g.store.Cancel(ctx, time.Now(), retry); err != nil {
				t.Fatal(err)
			}
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range as {
		wg.Go(func() {
			errs[i] = g.Finish(ctx, as[i], quota.Finished{
				URLID: fmt.Sprintf("g%d", i), Subject: keys.UserSubject("alice"), Body: fmt.Appendf(nil, `{"i":%d}`, i), ExpiresAt: time.Now().Add(time.Minute),
				RecordTTL: time.Minute, GrantTTL: quota.GrantRecordTTL(time.Minute, 30*time.Second),
			})
		})
	}
	wg.Wait()
	for i, a := range as {
		if errs[i] != nil {
			t.Fatalf("finish %d: %v", i, errs[i])
		}
		rec := rdb.HGetAll(ctx, a.Idem).Val()
		if rec["state"] != "done" || rec["body"] != fmt.Sprintf(`{"i":%d}`, i) {
			t.Errorf("finish %d: %v, want done with its body", i, rec)
		}
		if i%10 == 0 {
			retry := a
			retry.Nonce = "n-retry"
			if d, err := g.store.Spend(ctx, time.Now(), retry, time.Minute); err != nil || d.Outcome != quota.Replay {
				t.Errorf("finish %d: the cancelled retry's late spend: %+v %v, want a replay", i, d, err)
			}
		}
		if rdb.Exists(ctx, keys.Grant("acme", fmt.Sprintf("g%d", i))).Val() != 1 {
			t.Errorf("finish %d: no grant record", i)
		}
	}
	calls, finishes := g.finishes.Stats()
	t.Logf("%d finishes in %d calls", finishes, calls)
	if finishes != n || calls >= finishes {
		t.Errorf("%d finishes in %d calls: nothing was gathered", finishes, calls)
	}
}
