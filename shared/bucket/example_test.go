package bucket_test

import (
	"fmt"
	"time"

	"github.com/mintgate/mintgate/shared/bucket"
)

// A caller and its tenant are decided together: both pay, or neither does.
func ExampleLocal_Take() {
	user := bucket.Limit{Capacity: 2, Rate: 0.5}
	tenant := bucket.Limit{Capacity: 600, Rate: 10}
	bs := []bucket.Bucket{
		{Key: "rl:{t:acme}:sign:u:alice", Limit: user},
		{Key: "rl:{t:acme}:sign:tenant", Limit: tenant},
	}
	l := bucket.NewLocal()
	now := time.Unix(1_700_000_000, 0)
	for range 3 {
		r := l.Take(now, 1, bs...)
		fmt.Printf("allowed=%v remaining=%d limit=%d retry=%v\n", r.Allowed, r.Remaining, r.Limit, r.RetryAfter)
	}
	// Output:
	// allowed=true remaining=1 limit=2 retry=0s
	// allowed=true remaining=0 limit=2 retry=0s
	// allowed=false remaining=0 limit=2 retry=2s
}
