package quota_test

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/quota"
)

// BenchmarkCoalescedSpend is the signer's decision path: parallel Spends of
// 4 tenants through one Coalescer, against a redis-server on loopback, a
// fresh key each Spend. spends/call is how many one script call carried.
// Run: go test -run '^$' -bench Coalesc -benchmem ./shared/quota/
func BenchmarkCoalescedSpend(b *testing.B) {
	co := quota.NewCoalescer(quota.New(startRedis(b)), 0, 0)
	var n atomic.Int64
	b.SetParallelism(8) // callers per core: gathering needs company
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			tn := "t" + strconv.FormatInt(i%4, 10)
			a := quota.Ask{Tenant: tn, Idem: keys.Idempotency(tn, "u:a", strconv.FormatInt(i, 10)), Fingerprint: "fp", Nonce: "n",
				Buckets: []bucket.Bucket{{Key: keys.Bucket(tn, "u:a"), Limit: big}, {Key: keys.TenantBucket(tn), Limit: big}}}
			if d, err := co.Spend(ctx, time.Now(), a, inFlight); err != nil || d.Outcome != quota.Allowed {
				b.Errorf("spend: %+v %v", d, err)
				return
			}
		}
	})
	calls, spends := co.Stats()
	b.ReportMetric(float64(spends)/float64(max(1, calls)), "spends/call")
}
