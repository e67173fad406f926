package bucket_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/testenv"
)

// BenchmarkTake measures one decision against a real redis-server on
// loopback: our two-tier script beside go-redis/redis_rate's single-key
// Allow as a reference. Run: go test -run ^$ -bench . ./shared/bucket/
func BenchmarkTake(b *testing.B) {
	srv := testenv.StartRedis(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	ctx := context.Background()
	big := bucket.Limit{Capacity: 1e12, Rate: 1e9}

	b.Run("mintgate/2-tier", func(b *testing.B) {
		lim := bucket.New(rdb)
		bs := []bucket.Bucket{{Key: "rl:{t:b}:sign:u:a", Limit: big}, {Key: "rl:{t:b}:sign:tenant", Limit: big}}
		for b.Loop() {
			if _, err := lim.Take(ctx, time.Now(), 1, bs...); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("mintgate/1-tier", func(b *testing.B) {
		lim := bucket.New(rdb)
		bs := []bucket.Bucket{{Key: "rl:{t:b}:sign:u:one", Limit: big}}
		for b.Loop() {
			if _, err := lim.Take(ctx, time.Now(), 1, bs...); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("redis_rate/Allow", func(b *testing.B) {
		lim := redis_rate.NewLimiter(rdb)
		l := redis_rate.PerSecond(1_000_000) // see deploy/bench's rateLimit: a billion would only read
		for b.Loop() {
			if _, err := lim.Allow(ctx, "ref", l); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel/mintgate/2-tier", func(b *testing.B) {
		lim := bucket.New(rdb)
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				i++
				tn := fmt.Sprintf("p%d", i%64)
				bs := []bucket.Bucket{{Key: "rl:{t:" + tn + "}:sign:u:a", Limit: big}, {Key: "rl:{t:" + tn + "}:sign:tenant", Limit: big}}
				if _, err := lim.Take(ctx, time.Now(), 1, bs...); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("parallel/redis_rate/Allow", func(b *testing.B) {
		lim := redis_rate.NewLimiter(rdb)
		l := redis_rate.PerSecond(1_000_000) // see deploy/bench's rateLimit: a billion would only read
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				i++
				if _, err := lim.Allow(ctx, fmt.Sprintf("p%d", i%64), l); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}

// BenchmarkLocal is the in-process twin (degraded mode).
func BenchmarkLocal(b *testing.B) {
	l := bucket.NewLocal()
	big := bucket.Limit{Capacity: 1e12, Rate: 1e9}
	bs := []bucket.Bucket{{Key: "u", Limit: big}, {Key: "t", Limit: big}}
	for b.Loop() {
		l.Take(time.Now(), 1, bs...)
	}
}
