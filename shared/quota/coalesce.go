package quota

import (
	"context"
	"time"

	"github.com/mintgate/mintgate/shared/gather"
)

// Defaults of a Coalescer.
const (
	DefaultCoalesceWindow = 200 * time.Microsecond
	DefaultCoalesceBatch  = 32
)

// Coalescer gathers concurrent Spends of one tenant (one hash tag, one
// Redis Cluster slot) into one script call, SpendBatch, by the rules of
// package gather with a lane per tenant: a Spend leaves at once while none
// of that tenant's is in flight, so a lone Spend waits no longer than it
// would alone; otherwise it waits for the reply of a call of that
// tenant's, or until the oldest waiting Spend has waited the window, or
// until maxBatch wait. Spends of different tenants never share a call.
//
// Each caller gets its own Decision, exactly what Store.Spend would have
// answered had the Spends of its batch run one after another. A call that
// fails fails every Spend in it with the same error a single Spend would
// have had, so a caller tells "may still run" from "never ran" as before.
// A caller whose ctx ended before its batch left is not sent. The call's
// ctx ends at the earliest deadline among its callers.
type Coalescer struct {
	g *gather.Gatherer[Spending, Spent]
}

// NewCoalescer gathers Spends on store; a window or maxBatch of zero or less
// is the default (DefaultCoalesceWindow, DefaultCoalesceBatch). maxBatch 1
// sends every Spend alone.
func NewCoalescer(store *Store, window time.Duration, maxBatch int) *Coalescer {
	run := func(ctx context.Context, ss []Spending) []Spent {
		if len(ss) == 1 {
			// Alone: the plain script, byte for byte a Store.Spend.
			d, err := store.Spend(ctx, ss[0].Now, ss[0].Ask, ss[0].InFlight)
			return []Spent{{Decision: d, Err: err}}
		}
		out, err := store.SpendBatch(ctx, ss)
		if err != nil {
			out = make([]Spent, len(ss))
			for i := range out {
				out[i].Err = err
			}
		}
		return out
	}
	return &Coalescer{g: newGatherer(window, maxBatch, run)}
}

// newGatherer is the Coalescers' gatherer of run's calls, a lane per
// tenant; a window or maxBatch of zero or less is the default
// (DefaultCoalesceWindow, DefaultCoalesceBatch).
func newGatherer[Q, A any](window time.Duration, maxBatch int, run func(context.Context, []Q) []A) *gather.Gatherer[Q, A] {
	if window <= 0 {
		window = DefaultCoalesceWindow
	}
	if maxBatch <= 0 {
		maxBatch = DefaultCoalesceBatch
	}
	return gather.New(gather.Config{Window: window, MaxBatch: maxBatch}, run)
}

// Spend is Store.Spend, sharing a script call with the concurrent Spends
// of a's tenant. An error of ctx while the Spend waited to leave means it
// was not sent; once it left, the Spend may run as a single Spend that
// timed out may.
func (c *Coalescer) Spend(ctx context.Context, now time.Time, a Ask, inFlight time.Duration) (Decision, error) {
	if err := CheckSpend(a, inFlight); err != nil {
		return Decision{}, err
	}
	r, err := c.g.Do(ctx, a.Tenant, Spending{Now: now, Ask: a, InFlight: inFlight})
	if err != nil {
		// Sent or not, this caller gives up as on a single call's timeout.
		return Decision{}, unavailable("spend", err)
	}
	return r.Decision, r.Err
}

// Stats is how many script calls the Coalescer made and how many Spends
// they carried.
func (c *Coalescer) Stats() (calls, spends int64) { return c.g.Stats() }
