package bucket_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/testenv"
)

var (
	user   = bucket.Limit{Capacity: 30, Rate: 0.5}
	tenant = bucket.Limit{Capacity: 600, Rate: 10}
	anon   = bucket.Limit{Capacity: 5, Rate: 5.0 / 60}
)

func decision(tn string) []bucket.Bucket {
	return []bucket.Bucket{
		{Key: "rl:{t:" + tn + "}:sign:u:alice", Limit: user},
		{Key: "rl:{t:" + tn + "}:sign:tenant", Limit: tenant},
	}
}

func newClient(t *testing.T) (*redis.Client, *testenv.Redis) {
	srv := testenv.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: 150 * time.Millisecond, WriteTimeout: 150 * time.Millisecond})
	t.Cleanup(func() { rdb.Close() })
	return rdb, srv
}

// backends runs fn against the Lua script on a single Redis, the Lua
// script on a three-master cluster, and the in-process twin.
func backends(t *testing.T, fn func(t *testing.T, take func(now time.Time, cost float64, bs ...bucket.Bucket) bucket.Result, hget func(key string) map[string]string)) {
	ctx := context.Background()
	run := func(name string, rdb redis.UniversalClient) {
		t.Run(name, func(t *testing.T) {
			lim := bucket.New(rdb)
			fn(t, func(now time.Time, cost float64, bs ...bucket.Bucket) bucket.Result {
				t.Helper()
				res, err := lim.Take(ctx, now, cost, bs...)
				if err != nil {
					t.Fatalf("take: %v", err)
				}
				return res
			}, func(key string) map[string]string {
				m, err := rdb.HGetAll(ctx, key).Result()
				if err != nil {
					t.Fatalf("hgetall: %v", err)
				}
				return m
			})
		})
	}
	rdb, _ := newClient(t)
	run("redis", rdb)
	if !testing.Short() {
		cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.StartRedisCluster(t)})
		t.Cleanup(func() { cl.Close() })
		run("cluster", cl)
	}
	t.Run("local", func(t *testing.T) {
		l := bucket.NewLocal()
		fn(t, func(now time.Time, cost float64, bs ...bucket.Bucket) bucket.Result {
			return l.Take(now, cost, bs...)
		}, nil)
	})
}

func TestSpendUntilEmpty(t *testing.T) {
	backends(t, func(t *testing.T, take func(time.Time, float64, ...bucket.Bucket) bucket.Result, hget func(string) map[string]string) {
		now := time.UnixMilli(1_700_000_000_000)
		bs := decision("acme")
		for i := range 30 {
			res := take(now, 1, bs...)
			if !res.Allowed || res.Remaining != int64(29-i) || res.Limit != 30 || res.Scarcest != 0 {
				t.Fatalf("take %d: %+v", i+1, res)
			}
		}
		res := take(now, 1, bs...)
		if res.Allowed || res.Blocked != 0 || res.RetryAfter != 2*time.Second || res.Remaining != 0 || res.Reset != 60*time.Second {
			t.Fatalf("31st take: %+v", res)
		}
		// Half a second later half a token came back: still short, and the
		// fraction must be kept rather than truncated away.
		res = take(now.Add(500*time.Millisecond), 1, bs...)
		if res.Allowed || res.RetryAfter != 2*time.Second {
			t.Fatalf("after 500ms: %+v", res)
		}
		if hget != nil {
			if got := hget(bs[0].Key)["t"]; got != "0.250000" {
				t.Fatalf("stored tokens %q, want 0.250000", got)
			}
		}
		if res = take(now.Add(2*time.Second), 1, bs...); !res.Allowed {
			t.Fatalf("after 2s: %+v", res)
		}
	})
}

func TestTenantDenialLeavesUserBucket(t *testing.T) {
	backends(t, func(t *testing.T, take func(time.Time, float64, ...bucket.Bucket) bucket.Result, hget func(string) map[string]string) {
		now := time.UnixMilli(1_700_000_000_000)
		small := bucket.Limit{Capacity: 3, Rate: 1}
		bob := bucket.Bucket{Key: "rl:{t:t2}:sign:u:bob", Limit: user}
		carol := bucket.Bucket{Key: "rl:{t:t2}:sign:u:carol", Limit: user}
		ten := bucket.Bucket{Key: "rl:{t:t2}:sign:tenant", Limit: small}
		for range 3 {
			if res := take(now, 1, bob, ten); !res.Allowed {
				t.Fatalf("bob: %+v", res)
			}
		}
		res := take(now, 1, carol, ten)
		if res.Allowed || res.Blocked != 1 || res.RetryAfter != time.Second {
			t.Fatalf("carol: %+v", res)
		}
		// Carol's bucket was not charged: reading it costs nothing.
		if res := take(now, 0, carol); res.Remaining != 30 {
			t.Fatalf("carol's bucket: %+v", res)
		}
	})
}

func TestRefundCappedAtCapacity(t *testing.T) {
	backends(t, func(t *testing.T, take func(time.Time, float64, ...bucket.Bucket) bucket.Result, hget func(string) map[string]string) {
		now := time.UnixMilli(1_700_000_000_000)
		a := bucket.Bucket{Key: "rl:{t:x}:sign:a:ip", Limit: anon}
		take(now, 1, a)
		for range 3 {
			take(now, -1, a)
		}
		if res := take(now, 0, a); res.Remaining != 5 || res.Limit != 5 {
			t.Fatalf("after refunds: %+v", res)
		}
	})
}

func TestClockBackwardsAddsNothing(t *testing.T) {
	backends(t, func(t *testing.T, take func(time.Time, float64, ...bucket.Bucket) bucket.Result, hget func(string) map[string]string) {
		b := bucket.Bucket{Key: "rl:{t:c}:sign:u:u", Limit: bucket.Limit{Capacity: 2, Rate: 1}}
		t0 := time.UnixMilli(1_700_000_010_000)
		take(t0, 2, b)
		// Back 5 s then forward to t0: no token appears for time never lived.
		if res := take(t0.Add(-5*time.Second), 1, b); res.Allowed {
			t.Fatalf("backwards: %+v", res)
		}
		if res := take(t0, 1, b); res.Allowed {
			t.Fatalf("back at t0: %+v", res)
		}
	})
}

// TestConcurrentSpendsExact: 50 concurrent requests against 30 tokens, exactly 30 pass.
func TestConcurrentSpendsExact(t *testing.T) {
	rdb, _ := newClient(t)
	lim := bucket.New(rdb)
	now := time.Now()
	var mu sync.Mutex
	allowed := 0
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			res, err := lim.Take(context.Background(), now, 1, decision("conc")...)
			if err != nil {
				t.Error(err)
				return
			}
			if res.Allowed {
				mu.Lock()
				allowed++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if allowed != 30 {
		t.Fatalf("allowed %d of 50, want 30", allowed)
	}
}

func TestScriptFlushRecovers(t *testing.T) {
	rdb, _ := newClient(t)
	lim := bucket.New(rdb)
	ctx := context.Background()
	now := time.Now()
	for i := range 3 {
		if _, err := lim.Take(ctx, now, 1, decision("flush")...); err != nil {
			t.Fatalf("take %d: %v", i, err)
		}
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRedisDownIsUnavailable(t *testing.T) {
	rdb, srv := newClient(t)
	lim := bucket.New(rdb)
	ctx := context.Background()
	srv.Stop()
	if _, err := lim.Take(ctx, time.Now(), 1, decision("down")...); !errors.Is(err, bucket.ErrUnavailable) {
		t.Fatalf("err %v, want ErrUnavailable", err)
	}
	srv.Start()
	if _, err := lim.Take(ctx, time.Now(), 1, decision("down")...); err != nil {
		t.Fatalf("after restart: %v", err)
	}
}

func TestClusterNoCrossSlot(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster in -short")
	}
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.StartRedisCluster(t)})
	defer cl.Close()
	lim := bucket.New(cl)
	ctx := context.Background()
	// Many tenants spread over all three masters.
	for i := range 200 {
		if _, err := lim.Take(ctx, time.Now(), 1, decision(fmt.Sprintf("tenant-%d", i))...); err != nil {
			if strings.Contains(err.Error(), "CROSSSLOT") {
				t.Fatalf("CROSSSLOT: %v", err)
			}
			t.Fatalf("tenant-%d: %v", i, err)
		}
	}
}

func TestLimitValidate(t *testing.T) {
	for _, l := range []bucket.Limit{
		{Capacity: 0, Rate: 1}, {Capacity: 5, Rate: 0}, {Capacity: 30, Rate: 0.5, TTL: time.Second},
		// 300 years to fill: time.Duration overflows, the key's TTL would go
		// negative and Redis would drop the bucket at once.
		{Capacity: 100_000, Rate: 100_000 / (300 * 365 * 24 * 3600.0)},
	} {
		if l.Validate() == nil {
			t.Errorf("%+v: no error", l)
		}
	}
	if err := user.Validate(); err != nil {
		t.Error(err)
	}
	slow := bucket.Limit{Capacity: 100_000, Rate: 100_000 / (200 * 365 * 24 * 3600.0)}
	if err := slow.Validate(); err != nil || slow.FillTime() <= 0 {
		t.Errorf("200 years to fill: %v, fill time %v", err, slow.FillTime())
	}
	if w := anon.Window(); w != 60 {
		t.Errorf("anonymous window %d, want 60", w)
	}
}

// TestDifferential feeds the Lua script and the Go twin the same random
// sequences — times forward and backward, costs positive and negative, one
// to three tiers, some of them buckets of bytes charged a random size each
// step — and requires identical decisions and stored state.
func TestDifferential(t *testing.T) {
	rdb, _ := newClient(t)
	lim := bucket.New(rdb)
	ctx := context.Background()
	seqs, steps := 300, 40
	if testing.Short() {
		seqs = 50
	}
	limits := []bucket.Limit{user, tenant, anon, {Capacity: 1, Rate: 0.001}, {Capacity: 7, Rate: 3.3}, {Capacity: 2.5, Rate: 0.7}}
	for seq := range seqs {
		r := rand.New(rand.NewPCG(uint64(seq), 42))
		local := bucket.NewLocal()
		n := 1 + r.IntN(3)
		bs := make([]bucket.Bucket, n)
		bytes := make([]bool, n)
		for i := range bs {
			bs[i] = bucket.Bucket{Key: fmt.Sprintf("rl:{t:d%d}:b%d", seq, i), Limit: limits[r.IntN(len(limits))]}
			if bytes[i] = r.IntN(3) == 0; bytes[i] {
				bs[i].Limit = bucket.Limit{Capacity: float64(8<<20 + r.IntN(8<<20)), Rate: 1024 + float64(r.IntN(1<<20))}
			}
		}
		now := time.UnixMilli(1_700_000_000_000 + r.Int64N(1_000_000))
		for step := range steps {
			now = now.Add(time.Duration(r.Int64N(4000)-1000) * time.Millisecond)
			var cost float64
			switch r.IntN(6) {
			case 0:
				cost = -1
			case 1:
				cost = 0
			case 2:
				cost = float64(r.IntN(5)) + r.Float64()
			default:
				cost = 1
			}
			for i := range bs {
				if bytes[i] {
					bs[i].Units = float64(1 + r.Int64N(3<<20))
				}
			}
			// Sometimes only a prefix of the buckets, as a sweeper refund would.
			use := bs[:1+r.IntN(n)]
			got, err := lim.Take(ctx, now, cost, use...)
			if err != nil {
				t.Fatal(err)
			}
			want := local.Take(now, cost, use...)
			if got != want {
				t.Fatalf("seq %d step %d cost %v: lua %+v, go %+v", seq, step, cost, got, want)
			}
			for _, b := range use {
				h := rdb.HGetAll(ctx, b.Key).Val()
				if lt, lts := local.State(b.Key); h["t"] != lt || h["ts"] != lts {
					t.Fatalf("seq %d step %d key %s: lua t=%s ts=%s, go t=%s ts=%s", seq, step, b.Key, h["t"], h["ts"], lt, lts)
				}
			}
		}
	}
}
