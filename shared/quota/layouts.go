package quota

import (
	"strconv"
	"time"

	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/layout"
)

// The KEYS and ARGV of every script, each named once: the Go below appends
// them with Append and the Lua reads them by these names (layout.Script).
// A record's names are offsets from where the script puts it; a whole
// KEYS or ARGV's are indices.

// charge is the core's input for bs at cost.
func charge(now time.Time, cost float64, bs []bucket.Bucket) bucket.Charge {
	return bucket.Charge{Now: now, Cost: cost, Buckets: bs}
}

// Spend (spend_fn.lua's spend(), once in spend.lua, per Spend in
// spend_many.lua).
var (
	spendKeys = layout.Record("SPEND_KEYS",
		layout.Value("idem", func(s Spending) string { return s.Ask.Idem }),
		layout.Nest("buckets", bucket.CoreKeys, func(s Spending) bucket.Charge { return charge(s.Now, 1, s.Ask.Buckets) }),
	)
	spendArgs = layout.Record("SPEND",
		layout.Value("fp", func(s Spending) any { return s.Ask.Fingerprint }),
		layout.Value("nonce", func(s Spending) any { return s.Ask.Nonce }),
		layout.Value("in_flight", func(s Spending) any { return s.InFlight.Milliseconds() }), // ms
		// The last Redis time (unix ms) at which this Spend may run, 0 for no limit.
		layout.Value("last", func(s Spending) any { return untilMillis(s.Ask.Until) }),
		// The live-grants bound, packed (spend_fn.lua), '' for none.
		layout.Value("live", func(s Spending) any { return liveArg(s.Ask.Live) }),
		layout.Nest("core", bucket.Core, func(s Spending) bucket.Charge { return charge(s.Now, 1, s.Ask.Buckets) }),
	)
	// spendBatched is one Spend of spend_many.lua: its bucket count, then
	// spend.lua's ARGV.
	spendBatched = layout.Record("BATCHED_SPEND",
		layout.Value("n", func(s Spending) any { return len(s.Ask.Buckets) }),
		layout.Nest("spend", spendArgs, func(s Spending) Spending { return s }),
	)
	spendManyKeys = layout.Args("SPEND_MANY_KEYS", layout.Rest[struct{}]("spends", spendKeys))
	spendManyArgs = layout.Args("SPEND_MANY", layout.Rest[struct{}]("spends", spendBatched))
)

// liveArg packs a Spend's Live for spend_fn.lua: max|until ms|the done
// marker's prefix|the refunded marker's prefix|the live set's key (last:
// a subject may hold '|'); ” for none.
func liveArg(l *Live) string {
	if l == nil {
		return ""
	}
	tenant, _ := keys.TagOf(l.Key)
	return strconv.Itoa(l.Max) + "|" + strconv.FormatInt(l.Until.UnixMilli(), 10) + "|" +
		keys.Done(tenant, "") + "|" + keys.Refunded(tenant, "") + "|" + l.Key
}

func untilMillis(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// asked is an Undo's or a Cancel's input: the request, its clock and, for
// an Undo, its grant.
type asked struct {
	now   time.Time
	a     Ask
	urlID string
}

// Undo (undo.lua).
var (
	undoKeys = layout.Args("UNDO_KEYS",
		layout.Value("idem", func(u asked) string { return u.a.Idem }),
		layout.Value("done", func(u asked) string { return keys.Done(u.a.Tenant, u.urlID) }),
		layout.Value("refunded", func(u asked) string { return keys.Refunded(u.a.Tenant, u.urlID) }),
		layout.Nest("buckets", bucket.CoreKeys, func(u asked) bucket.Charge { return charge(u.now, -1, u.a.Buckets) }),
	)
	undoArgs = layout.Args("UNDO",
		layout.Value("fp", func(u asked) any { return u.a.Fingerprint }),
		layout.Value("nonce", func(u asked) any { return u.a.Nonce }),
		layout.Value("ttl", func(asked) any { return RefundedTTL.Milliseconds() }), // the refunded marker's, ms
		layout.Value("record", func(u asked) any { return RefundRecord(u.now, u.a.Buckets) }),
		layout.Nest("core", bucket.Core, func(u asked) bucket.Charge { return charge(u.now, -1, u.a.Buckets) }),
	)
)

// Cancel (cancel.lua).
var (
	cancelKeys = layout.Args("CANCEL_KEYS",
		layout.Value("idem", func(c asked) string { return c.a.Idem }),
		layout.Nest("buckets", bucket.CoreKeys, func(c asked) bucket.Charge { return charge(c.now, -1, c.a.Buckets) }),
	)
	cancelArgs = layout.Args("CANCEL",
		layout.Value("fp", func(c asked) any { return c.a.Fingerprint }),
		layout.Value("nonce", func(c asked) any { return c.a.Nonce }),
		layout.Value("ttl", func(asked) any { return CancelTTL.Milliseconds() }), // the tombstone's, ms
		layout.Value("max", func(asked) any { return MaxCancelled }),             // nonces a tombstone keeps
		layout.Nest("core", bucket.Core, func(c asked) bucket.Charge { return charge(c.now, -1, c.a.Buckets) }),
	)
)

// FinishOwn (finish_own.lua).
var (
	finishOwnKeys = layout.Args("FINISH_OWN_KEYS",
		layout.Value("idem", func(f Finishing) string { return f.Ask.Idem }),
		layout.Value("grant", func(f Finishing) string { return keys.Grant(f.Ask.Tenant, f.Finished.URLID) }),
	)
	finishOwnArgs = layout.Args("FINISH_OWN",
		layout.Value("fp", func(f Finishing) any { return f.Ask.Fingerprint }),
		layout.Value("nonce", func(f Finishing) any { return f.Ask.Nonce }),
		layout.Value("body", func(f Finishing) any { return f.Finished.Body }),
		layout.Value("record_ttl", func(f Finishing) any { return f.Finished.RecordTTL.Milliseconds() }),
		layout.Value("expires_at", func(f Finishing) any { return f.Finished.ExpiresAt.UnixMilli() }),
		layout.Value("subject", func(f Finishing) any { return f.Finished.Subject }),
		layout.Value("grant_ttl", func(f Finishing) any { return f.Finished.GrantTTL.Milliseconds() }),
		layout.Value("multipart", func(f Finishing) any { return f.Finished.Multipart }),      // '' for a single PUT
		layout.Value("content_type", func(f Finishing) any { return f.Finished.ContentType }), // '' for none
		layout.Value("content_length", func(f Finishing) any { return f.Finished.ContentLength }),
	)
)

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

// completing is one run of complete.lua: the Completion, the refund record
// the caller read ("" for none) and its buckets.
type completing struct {
	now time.Time
	c   Completion
	rec string
	bs  []bucket.Bucket
}

// Complete (complete.lua).
var (
	completeKeys = layout.Args("COMPLETE_KEYS",
		layout.Value("done", func(c completing) string { return keys.Done(c.c.Tenant, c.c.URLID) }),
		layout.Value("refunded", func(c completing) string { return keys.Refunded(c.c.Tenant, c.c.URLID) }),
		layout.Nest("buckets", bucket.CoreKeys, func(c completing) bucket.Charge { return charge(c.now, 1, c.bs) }),
	)
	completeArgs = layout.Args("COMPLETE",
		layout.Value("value", func(c completing) any { return c.c.Value }), // the done marker's
		layout.Value("ttl", func(c completing) any { return completeTTL(c.c.TTL).Milliseconds() }),
		// '1' to set the marker only when absent (SET NX), '0' to overwrite.
		layout.Value("nx", func(c completing) any { return boolArg(c.c.First) }),
		layout.Value("record", func(c completing) any { return c.rec }),
		layout.Nest("core", bucket.Core, func(c completing) bucket.Charge { return charge(c.now, 1, c.bs) }),
	)
)

// closing is one run of close.lua.
type closing struct {
	tenant, urlID, mode string
	lease               time.Duration
}

// Close (close.lua).
var (
	closeKeys = layout.Args("CLOSE_KEYS",
		layout.Value("done", func(c closing) string { return keys.Done(c.tenant, c.urlID) }),
		layout.Value("refunded", func(c closing) string { return keys.Refunded(c.tenant, c.urlID) }),
		layout.Value("closing", func(c closing) string { return keys.Closing(c.tenant, c.urlID) }),
	)
	closeArgs = layout.Args("CLOSE",
		layout.Value("mode", func(c closing) any { return c.mode }), // complete, abort or release
		layout.Value("lease", func(c closing) any { return c.lease.Milliseconds() }),
		layout.Value("ttl", func(closing) any { return MarkerTTL.Milliseconds() }), // an abort's claim's, ms
	)
)

// The scripts, composed once: a name a script reads that its layouts lack
// stops the program here, at its start.
var (
	spendScript     = bucket.NewScript(noncesSrc+"\n"+spendFn+"\n"+spendEntry, spendKeys, spendArgs)
	spendManyScript = bucket.NewScript(noncesSrc+"\n"+spendFn+"\n"+spendManyEntry, spendManyKeys, spendManyArgs)
	undoScript      = bucket.NewScript(recordSrc+"\n"+undoEntry, undoKeys, undoArgs)
	cancelScript    = bucket.NewScript(noncesSrc+"\n"+cancelEntry, cancelKeys, cancelArgs)
	refundScript    = bucket.NewScript(recordSrc+"\n"+refundEntry, refundKeys, refundArgs)
	completeScript  = bucket.NewScript(completeEntry, completeKeys, completeArgs)
	closeScript     = layout.Script(closeEntry, closeKeys, closeArgs)
	finishOwnScript = layout.Script(finishOwnEntry, finishOwnKeys, finishOwnArgs)
)
