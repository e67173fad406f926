package quota

import (
	"context"
	_ "embed"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/layout"
)

var (
	// Refund's script, composed after the bucket core and record.lua.
	//
	//go:embed refund.lua
	refundEntry string
	// record.lua writes the refund record (complete.go's record) with
	// what the refund credited: composed in front of refund.lua and
	// undo.lua.
	//
	//go:embed record.lua
	recordSrc string
)

// Due is one grant the sweeper found due.
type Due struct {
	Tenant string
	URLID  string
	// Buckets are every bucket the grant's Spend took from, each with the
	// shape of the tier that issued it: the refund is capped by that shape,
	// so an anonymous grant is never refunded against the user ceiling.
	// None: the refund only ends the grant (its refunded marker), crediting
	// nothing.
	Buckets []bucket.Bucket
}

// RefundOutcome is what Refund did with one grant.
type RefundOutcome string

// The outcomes of Refund.
const (
	Refunded RefundOutcome = "refunded" // a token went back to each of its buckets
	Done     RefundOutcome = "done"     // its upload landed: nothing to give back
	Already  RefundOutcome = "already"  // given back before, by the signer's Undo or an earlier Refund
)

// Refund applies many due grants in one round trip (two after the script
// cache was emptied): the grants are grouped by tenant, one script call per
// tenant (per maxPerCall grants) loops over its grants in order, and all
// calls go in one pipeline, which a cluster client splits per node. For
// each grant: done marker →
// Done (and the done marker lives at least MarkerTTL from now); refunded
// marker → Already; else one token back to each of its buckets (capped, by
// the shape each Bucket gives: the grant's own) and the refunded marker
// set, holding the refund record Complete takes back → Refunded. Outcomes are in
// the order of ds. An error means some tenants' grants may be applied and
// others not: retry the whole batch, the markers make that safe.
func (s *Store) Refund(ctx context.Context, now time.Time, ds []Due) ([]RefundOutcome, error) {
	calls, err := byTenant(now, ds)
	if err != nil {
		return nil, err
	}
	out := make([]RefundOutcome, len(ds))
	if len(calls) == 0 {
		return out, nil
	}
	cmds := make([]*redis.Cmd, len(calls))
	pipe := s.rdb.Pipeline()
	for i, c := range calls {
		cmds[i] = refundScript.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx) // every command's own error is read below
	var again []int
	for i, cmd := range cmds {
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		// A node's script cache was emptied (SCRIPT FLUSH, restart,
		// failover). Nothing ran for these calls; EVAL sends the source,
		// which also caches it again for the next EVALSHA. Should a
		// tenant's later call have run meanwhile (another client loaded the
		// script between the two), its repeats of a grant may be the
		// Refunded one: still one credit per grant, by the markers.
		pipe := s.rdb.Pipeline()
		for _, i := range again {
			cmds[i] = refundScript.Eval(ctx, pipe, calls[i].keys, calls[i].args...)
		}
		_, _ = pipe.Exec(ctx)
	}
	for i, cmd := range cmds {
		if err := calls[i].read(cmd, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// call is one tenant's script call in a Refund.
type call struct {
	keys []string
	args []any
	at   []int // the position in ds of each of its grants, in order
}

// maxPerCall bounds the grants of one script call. A call runs atomically
// and its Redis node serves nothing else meanwhile, while signers' Spends
// on that node have deadlines of their own (~150 ms); a tenant with more due
// grants gets more calls, in order, in the same pipeline.
const maxPerCall = 256

// byTenant lays out one call per tenant (per maxPerCall grants), in the
// order tenants first appear in ds, each with its grants in their order in
// ds. Different tenants' keys never meet, and one tenant's calls go to one
// node in order, so running the calls is running ds in order.
func byTenant(now time.Time, ds []Due) ([]*call, error) {
	if err := CheckRefund(ds); err != nil {
		return nil, err
	}
	var calls []*call
	of := make(map[string]*call)
	for i, d := range ds {
		c := of[d.Tenant]
		if c == nil || len(c.at) == maxPerCall {
			c = &call{args: refundArgs.Append(nil, struct{}{})}
			of[d.Tenant] = c
			calls = append(calls, c)
		}
		g, n := dueAt{now: now, d: d}, len(d.Buckets)
		c.keys = grantKeys.Append(slices.Grow(c.keys, grantKeys.Width(n)), g)
		c.args = grantArgs.Append(slices.Grow(c.args, grantArgs.Width(n)), g)
		c.at = append(c.at, i)
	}
	return calls, nil
}

// read puts the outcomes cmd replied into out at the call's positions.
func (c *call) read(cmd *redis.Cmd, out []RefundOutcome) error {
	vals, err := cmd.Slice()
	if err != nil {
		return unavailable("refund", err)
	}
	if len(vals) != len(c.at) {
		return fmt.Errorf("%w: refund replied %d outcomes for %d grants", ErrUnavailable, len(vals), len(c.at))
	}
	for j, v := range vals {
		o, _ := v.(string)
		switch RefundOutcome(o) {
		case Refunded, Done, Already:
			out[c.at[j]] = RefundOutcome(o)
		default:
			return fmt.Errorf("%w: refund replied %v", ErrUnavailable, v)
		}
	}
	return nil
}

// dueAt is one grant of a Refund and the sweeper's clock.
type dueAt struct {
	now time.Time
	d   Due
}

// Refund (refund.lua): the marker TTL, then per grant its record.
var (
	grantKeys = layout.Record("GRANT_KEYS",
		layout.Value("done", func(g dueAt) string { return keys.Done(g.d.Tenant, g.d.URLID) }),
		layout.Value("refunded", func(g dueAt) string { return keys.Refunded(g.d.Tenant, g.d.URLID) }),
		layout.Nest("buckets", bucket.CoreKeys, func(g dueAt) bucket.Charge { return charge(g.now, -1, g.d.Buckets) }),
	)
	grantArgs = layout.Record("GRANT",
		layout.Value("n", func(g dueAt) any { return len(g.d.Buckets) }),
		layout.Value("record", func(g dueAt) any { return RefundRecord(g.now, g.d.Buckets) }),
		layout.Nest("core", bucket.Core, func(g dueAt) bucket.Charge { return charge(g.now, -1, g.d.Buckets) }),
	)
	refundKeys = layout.Args("REFUND_KEYS", layout.Rest[struct{}]("grants", grantKeys))
	refundArgs = layout.Args("REFUND",
		layout.Value("ttl", func(struct{}) any { return MarkerTTL.Milliseconds() }), // the markers', ms
		layout.Rest[struct{}]("grants", grantArgs),
	)
)

// refundScript is refund.lua, composed once (see spendScript).
var refundScript = bucket.NewScript(recordSrc+"\n"+refundEntry, refundKeys, refundArgs)

// CheckRefund is Refund's refusal of a call, nil for a valid one.
func CheckRefund(ds []Due) error {
	for i, d := range ds {
		if err := checkGrant(d.Tenant, d.URLID); err != nil {
			return fmt.Errorf("due grant %d: %w", i, err)
		}
		if len(d.Buckets) == 0 {
			continue // a marker-only refund: it ends the grant, credits nothing
		}
		if err := checkBuckets(d.Tenant, d.Buckets); err != nil {
			return fmt.Errorf("due grant %d: %w", i, err)
		}
	}
	return nil
}
