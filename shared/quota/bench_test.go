package quota_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/quota"
)

// big never runs dry, so every Spend takes the whole path.
var big = bucket.Limit{Capacity: 1e12, Rate: 1e9}

// BenchmarkSpend is one sign decision (idempotency check, two buckets,
// in-flight mark) against a redis-server on loopback, a fresh key each time.
// Run: go test -run '^$' -bench . ./shared/quota/
func BenchmarkSpend(b *testing.B) {
	q := quota.New(startRedis(b))
	bs := []bucket.Bucket{{Key: keys.Bucket("b", "u:a"), Limit: big}, {Key: keys.TenantBucket("b"), Limit: big}}
	i := 0
	for b.Loop() {
		i++
		a := quota.Ask{Tenant: "b", Idem: keys.Idempotency("b", "u:a", strconv.Itoa(i)), Fingerprint: "fp", Nonce: "n", Buckets: bs}
		if d, err := q.Spend(ctx, time.Now(), a, inFlight); err != nil || d.Outcome != quota.Allowed {
			b.Fatalf("spend: %+v %v", d, err)
		}
	}
}

// BenchmarkRefund is the sweeper's work for 64 due grants over 4 tenants
// (8 callers each): one batched Refund, against 64 single-grant Refund
// calls, on a redis-server and on a three-master cluster. Every grant is
// fresh, so each is really refunded. ns/grant compares the two.
func BenchmarkRefund(b *testing.B) {
	const grants, tenants = 64, 4
	due := func(round int) []quota.Due {
		ds := make([]quota.Due, grants)
		for j := range ds {
			tn := fmt.Sprintf("bench%d", j%tenants)
			sub := keys.UserSubject(strconv.Itoa(j % 8))
			ds[j] = quota.Due{Tenant: tn, URLID: fmt.Sprintf("%d-%d", round, j), Buckets: []bucket.Bucket{
				{Key: keys.Bucket(tn, sub), Limit: userLimit}, {Key: keys.TenantBucket(tn), Limit: tenantLimit},
			}}
		}
		return ds
	}
	refund := func(b *testing.B, q *quota.Store, ds []quota.Due) {
		out, err := q.Refund(ctx, time.Now(), ds)
		if err != nil || out[0] != quota.Refunded {
			b.Fatalf("refund: %v %v", out, err)
		}
	}
	clients := []struct {
		name  string
		start func(testing.TB) redis.UniversalClient
	}{{"redis", startRedis}, {"cluster", startCluster}}
	for _, c := range clients {
		b.Run(c.name, func(b *testing.B) {
			q := quota.New(c.start(b))
			round := 0
			b.Run("batch", func(b *testing.B) {
				for b.Loop() {
					round++
					refund(b, q, due(round))
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*grants), "ns/grant")
			})
			b.Run("single", func(b *testing.B) {
				for b.Loop() {
					round++
					for _, d := range due(round) {
						refund(b, q, []quota.Due{d})
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*grants), "ns/grant")
			})
		})
	}
}
