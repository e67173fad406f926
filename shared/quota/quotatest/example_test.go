package quotatest_test

import (
	"context"
	"fmt"
	"time"

	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/quota"
	"github.com/mintgate/mintgate/shared/quota/quotatest"
)

// Exactly once, whoever comes second: the signer gave up on a grant whose
// ledger publish timed out and undid it, but the publish was stored after
// all, so the sweeper sees the grant when it is due and finds the refunded
// marker. A Twin answers as a Store on Redis would.
func ExampleTwin() {
	ctx := context.Background()
	q := quotatest.NewTwin(nil)
	now := time.Unix(1_700_000_000, 0)
	// An anonymous caller spends from its address's bucket, the tenant's
	// and the tenant's anonymous_all bucket.
	tenant, subject := "acme", keys.AnonSubject("9f86d081")
	address := bucket.Bucket{Key: keys.Bucket(tenant, subject), Limit: bucket.Limit{Capacity: 5, Rate: 5.0 / 60}}
	everyone := bucket.Bucket{Key: keys.TenantBucket(tenant), Limit: bucket.Limit{Capacity: 600, Rate: 10}}
	anonymous := bucket.Bucket{Key: "rl:{t:acme}:sign:anon", Limit: bucket.Limit{Capacity: 150, Rate: 2.5}}
	a := quota.Ask{Tenant: tenant, Idem: keys.Idempotency(tenant, subject, "req-1"), Fingerprint: "fp", Nonce: "n1",
		Buckets: []bucket.Bucket{address, everyone, anonymous}}
	d, _ := q.Spend(ctx, now, a, 30*time.Second)
	fmt.Println("spend:", d.Outcome, d.Result.Remaining, "left")
	d, _ = q.Spend(ctx, now, a, 30*time.Second)
	fmt.Println("again:", d.Outcome)

	undone, _ := q.Undo(ctx, now, a, "g1")
	fmt.Println("undo refunded:", undone)

	due := []quota.Due{
		{Tenant: tenant, URLID: "g1", Buckets: a.Buckets}, // the undone grant
		{Tenant: tenant, URLID: "g2", Buckets: a.Buckets}, // expired unused
	}
	out, _ := q.Refund(ctx, now.Add(150*time.Second), due)
	fmt.Println("sweeper:", out)

	st, _ := q.Status(ctx, tenant, "g1")
	fmt.Println("g1 refunded:", st.Refunded)
	// Output:
	// spend: allowed 4 left
	// again: in progress
	// undo refunded: true
	// sweeper: [already refunded]
	// g1 refunded: true
}
