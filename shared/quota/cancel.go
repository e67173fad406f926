package quota

import (
	"context"
	_ "embed"
	"time"

	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/layout"
)

// Cancel's script, composed after the bucket core and nonces.lua
// (spend.go).
//
//go:embed cancel.lua
var cancelEntry string

// Cancel's KEYS and ARGV.
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

// cancelScript is cancel.lua, composed once (see spendScript).
var cancelScript = bucket.NewScript(noncesSrc+"\n"+cancelEntry, cancelKeys, cancelArgs)

// Cancel ends a request whose Spend failed on the caller's side (timed out,
// connection lost) but may have reached Redis, so that it spends nothing
// and holds no key, whether its Spend ran already, runs later or never
// runs. By the idempotency record:
//
//   - in flight with this nonce and fingerprint (the Spend ran): one token
//     back to every bucket, capped as Undo's, and the record becomes a
//     tombstone (TTL CancelTTL); refunded is true;
//   - absent (the Spend has not run): a tombstone, which the Spend finds if
//     it runs and then takes nothing (Outcome Cancelled);
//   - a tombstone: this nonce is added to it; if it named the nonce
//     already, nothing changes and refunded is what the first Cancel said,
//     so a Cancel retried after a lost reply answers the same;
//   - another request's (in flight with another nonce, done): nothing is
//     touched; the Spend, if it runs, finds that record and takes nothing.
//
// A tombstone never blocks a retry: a Spend with another nonce treats it as
// absent. A retry of a Cancel is safe at any time.
func (s *Store) Cancel(ctx context.Context, now time.Time, a Ask) (refunded bool, err error) {
	if err := CheckCancel(a); err != nil {
		return false, err
	}
	c := asked{now: now, a: a}
	n, err := cancelScript.Run(ctx, s.rdb, cancelKeys.Fill(len(a.Buckets), c), cancelArgs.Fill(len(a.Buckets), c)...).Int64()
	if err != nil {
		return false, unavailable("cancel", err)
	}
	return n == 1, nil
}

// CheckCancel is Cancel's refusal of a call, nil for a valid one.
func CheckCancel(a Ask) error { return checkAsk(a, true) }
