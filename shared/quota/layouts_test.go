package quota

import (
	"testing"
	"time"

	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/keys"
)

// The Go side sizes KEYS and ARGV by Width before it appends them (Fill):
// the two must agree for every layout with a width, or a call allocates
// twice.
func TestWidthIsWhatAppendAdds(t *testing.T) {
	l := bucket.Limit{Capacity: 30, Rate: 0.5}
	for n := 1; n <= 3; n++ {
		bs := make([]bucket.Bucket, n)
		for i := range bs {
			bs[i] = bucket.Bucket{Key: keys.TenantBucket("w"), Limit: l}
		}
		sp := Spending{Now: time.Now(), Ask: Ask{Tenant: "w", Buckets: bs}, InFlight: time.Second}
		live := sp
		live.Ask.Live = &Live{Key: keys.LiveGrants("w", "u:1"), Max: 2, Until: time.Now()}
		g := dueAt{now: time.Now(), d: Due{Tenant: "w", URLID: "u", Buckets: bs}}
		u := asked{now: time.Now(), a: sp.Ask, urlID: "u"}
		c := completing{now: time.Now(), c: Completion{Tenant: "w", URLID: "u"}, bs: bs}
		for name, got := range map[string][2]int{
			"SPEND_KEYS":      {len(spendKeys.Append(nil, sp)), spendKeys.Width(n)},
			"SPEND":           {len(spendArgs.Append(nil, sp)), spendArgs.Width(n)},
			"live SPEND_KEYS": {len(spendKeys.Append(nil, live)), spendKeys.Width(n)},
			"live SPEND":      {len(spendArgs.Append(nil, live)), spendArgs.Width(n)},
			"BATCHED_SPEND":   {len(spendBatched.Append(nil, sp)), spendBatched.Width(n)},
			"GRANT_KEYS":      {len(grantKeys.Append(nil, g)), grantKeys.Width(n)},
			"GRANT":           {len(grantArgs.Append(nil, g)), grantArgs.Width(n)},
			"UNDO_KEYS":       {len(undoKeys.Append(nil, u)), undoKeys.Width(n)},
			"UNDO":            {len(undoArgs.Append(nil, u)), undoArgs.Width(n)},
			"CANCEL_KEYS":     {len(cancelKeys.Append(nil, u)), cancelKeys.Width(n)},
			"CANCEL":          {len(cancelArgs.Append(nil, u)), cancelArgs.Width(n)},
			"COMPLETE_KEYS":   {len(completeKeys.Append(nil, c)), completeKeys.Width(n)},
			"COMPLETE":        {len(completeArgs.Append(nil, c)), completeArgs.Width(n)},
		} {
			if got[0] != got[1] {
				t.Errorf("%s with %d buckets: Append adds %d values, Width says %d", name, n, got[0], got[1])
			}
		}
	}
}
