//go:build load

package quota_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/quota"
)

// TestCoalescerLoad compares, side by side, the plain Store.Spend and the
// Coalescer under the bench's decision load: 50 callers in a closed loop
// over 10k users of 4 tenants, a fresh key each Spend, limits nothing
// reaches, against one redis-server; rounds interleaved, after a warm-up,
// each round in the other order. It prints a
// report and asserts nothing about speed.
// Run: go test -tags load -count=1 -run TestCoalescerLoad -v ./shared/quota/
func TestCoalescerLoad(t *testing.T) {
	rdb := startRedis(t)
	store := quota.New(rdb)
	co := quota.NewCoalescer(store, 0, 0)
	spend := func(spend func(context.Context, time.Time, quota.Ask, time.Duration) (quota.Decision, error)) loadOp {
		return func(ctx context.Context, now time.Time, a quota.Ask, _ string) error {
			d, err := spend(ctx, now, a, time.Second)
			if err == nil && d.Outcome != quota.Allowed {
				err = fmt.Errorf("spend: %+v", d)
			}
			return err
		}
	}
	sideBySide(t, "spends", spend(store.Spend), spend(co.Spend), co.Stats)
}

// TestFinishCoalescerLoad is TestCoalescerLoad for the completing write:
// the plain Store.Finish against the FinishCoalescer, a fresh key and
// grant each Finish.
// Run: go test -tags load -count=1 -run TestFinishCoalescerLoad -v ./shared/quota/
func TestFinishCoalescerLoad(t *testing.T) {
	rdb := startRedis(t)
	store := quota.New(rdb)
	co := quota.NewFinishCoalescer(store, 0, 0)
	finish := func(finish func(context.Context, quota.Ask, quota.Finished) error) loadOp {
		return func(ctx context.Context, now time.Time, a quota.Ask, id string) error {
			return finish(ctx, a, quota.Finished{URLID: "g" + id, Subject: "u:x", Body: []byte(`{"urlId":"g` + id + `"}`),
				ExpiresAt: now.Add(time.Minute), RecordTTL: time.Minute, GrantTTL: time.Minute})
		}
	}
	sideBySide(t, "finishes", finish(store.Finish), finish(co.Finish), co.Stats)
}

// loadOp is one call under load: a's request, its key made fresh with id.
type loadOp func(ctx context.Context, now time.Time, a quota.Ask, id string) error

// sideBySide runs plain and gathered by turns: 50 callers in a closed loop
// over 10k users of 4 tenants, a warm-up, then 3 interleaved rounds of 3 s,
// each in the other order; stats are the gatherer's calls and the requests
// they carried. It logs the report.
func sideBySide(t *testing.T, what string, plain, gathered loadOp, stats func() (calls, items int64)) {
	const (
		callers, users, tenants, rounds = 50, 10_000, 4, 3
		dur                             = 3 * time.Second
	)
	asks := make([]quota.Ask, users)
	for u := range asks {
		tn := "t" + strconv.Itoa(u%tenants)
		sub := keys.UserSubject("u" + strconv.Itoa(u))
		asks[u] = quota.Ask{Tenant: tn, Idem: keys.Idempotency(tn, sub, "k"), Fingerprint: "fp",
			Buckets: []bucket.Bucket{{Key: keys.Bucket(tn, sub), Limit: big}, {Key: keys.TenantBucket(tn), Limit: big}}}
	}
	var n atomic.Int64
	run := func(op loadOp, dur time.Duration) (rate float64, p50, p99 time.Duration) {
		lat := make([][]time.Duration, callers)
		stop := time.Now().Add(dur)
		var wg sync.WaitGroup
		for c := range callers {
			wg.Go(func() {
				for time.Now().Before(stop) {
					a := asks[rand.IntN(len(asks))]
					i := strconv.FormatInt(n.Add(1), 10)
					a.Idem += i
					a.Nonce = "n" + i
					cctx, cancel := context.WithTimeout(context.Background(), time.Second)
					start := time.Now()
					err := op(cctx, start, a, i)
					lat[c] = append(lat[c], time.Since(start))
					cancel()
					if err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		began := time.Now()
		wg.Wait()
		all := slices.Concat(lat...)
		slices.Sort(all)
		return float64(len(all)) / time.Since(began).Seconds(), all[len(all)/2], all[len(all)*99/100]
	}
	rows := map[string][][3]float64{}
	// Warm up both (the pool's connections, Redis's script cache), then
	// alternate which goes first in a round.
	run(plain, time.Second)
	run(gathered, time.Second)
	for r := range rounds {
		order := []string{"plain", "gathered"}
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, name := range order {
			op := plain
			if name == "gathered" {
				op = gathered
			}
			calls0, items0 := stats()
			rate, p50, p99 := run(op, dur)
			calls, items := stats()
			note := ""
			if name == "gathered" {
				note = fmt.Sprintf(", %.1f %s a call", float64(items-items0)/float64(max(1, calls-calls0)), what)
			}
			t.Logf("round %d %-8s %8.0f %s/s  p50 %-9v p99 %v%s", r+1, name, rate, what, p50.Round(time.Microsecond), p99.Round(time.Microsecond), note)
			rows[name] = append(rows[name], [3]float64{rate, float64(p50), float64(p99)})
		}
	}
	for _, name := range []string{"plain", "gathered"} {
		var rates, p99s []float64
		for _, x := range rows[name] {
			rates, p99s = append(rates, x[0]), append(p99s, x[2])
		}
		t.Logf("%-8s rate %.0f/s (min %.0f, max %.0f), p99 median %v (min %v, max %v)", name,
			median(rates), slices.Min(rates), slices.Max(rates),
			time.Duration(median(p99s)).Round(time.Microsecond), time.Duration(slices.Min(p99s)).Round(time.Microsecond), time.Duration(slices.Max(p99s)).Round(time.Microsecond))
	}
}

func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	return s[len(s)/2]
}
