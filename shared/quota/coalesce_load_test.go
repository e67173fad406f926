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
	const (
		callers, users, tenants, rounds = 50, 10_000, 4, 3
		dur                             = 3 * time.Second
	)
	rdb := startRedis(t)
	store := quota.New(rdb)
	asks := make([]quota.Ask, users)
	for u := range asks {
		tn := "t" + strconv.Itoa(u%tenants)
		sub := keys.UserSubject("u" + strconv.Itoa(u))
		asks[u] = quota.Ask{Tenant: tn, Idem: keys.Idempotency(tn, sub, "k"), Fingerprint: "fp",
			Buckets: []bucket.Bucket{{Key: keys.Bucket(tn, sub), Limit: big}, {Key: keys.TenantBucket(tn), Limit: big}}}
	}
	type spendFunc func(context.Context, time.Time, quota.Ask, time.Duration) (quota.Decision, error)
	var n atomic.Int64
	run := func(spend spendFunc, dur time.Duration) (rate float64, p50, p99 time.Duration) {
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
					d, err := spend(cctx, start, a, time.Second)
					lat[c] = append(lat[c], time.Since(start))
					cancel()
					if err != nil || d.Outcome != quota.Allowed {
						t.Errorf("spend: %+v %v", d, err)
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
	co := quota.NewCoalescer(store, 0, 0)
	rows := map[string][][3]float64{}
	// Warm up both (the pool's connections, Redis's script cache), then
	// alternate which goes first in a round.
	run(store.Spend, time.Second)
	run(co.Spend, time.Second)
	for r := range rounds {
		order := []string{"plain", "coalesced"}
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, name := range order {
			spend := spendFunc(store.Spend)
			if name == "coalesced" {
				spend = co.Spend
			}
			calls0, spends0 := co.Stats()
			rate, p50, p99 := run(spend, dur)
			calls, spends := co.Stats()
			note := ""
			if name == "coalesced" {
				note = fmt.Sprintf(", %.1f spends a call", float64(spends-spends0)/float64(max(1, calls-calls0)))
			}
			t.Logf("round %d %-9s %8.0f spends/s  p50 %-9v p99 %v%s", r+1, name, rate, p50.Round(time.Microsecond), p99.Round(time.Microsecond), note)
			rows[name] = append(rows[name], [3]float64{rate, float64(p50), float64(p99)})
		}
	}
	for _, name := range []string{"plain", "coalesced"} {
		var rates, p99s []float64
		for _, x := range rows[name] {
			rates, p99s = append(rates, x[0]), append(p99s, x[2])
		}
		t.Logf("%-9s rate %.0f/s (min %.0f, max %.0f), p99 median %v (min %v, max %v)", name,
			median(rates), slices.Min(rates), slices.Max(rates),
			time.Duration(median(p99s)).Round(time.Microsecond), time.Duration(slices.Min(p99s)).Round(time.Microsecond), time.Duration(slices.Max(p99s)).Round(time.Microsecond))
	}
}

func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	return s[len(s)/2]
}
