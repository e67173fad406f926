package quota

import (
	"context"
	_ "embed"
	"time"

	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/layout"
)

// Undo's script, composed after the bucket core and record.lua
// (refund.go).
//
//go:embed undo.lua
var undoEntry string

// Undo's KEYS and ARGV.
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

// undoScript is undo.lua, composed once (see spendScript).
var undoScript = bucket.NewScript(recordSrc+"\n"+undoEntry, undoKeys, undoArgs)

// Undo gives back the token of an allowed Spend whose URL was never handed
// out, frees the idempotency key (only while it is still this request's:
// its in-flight mark, or the done record a FinishOwn it gave up on stored,
// by its nonce and fingerprint) and sets the refunded marker keys.Refunded(tenant, urlID),
// atomically. If the refunded marker or the done marker already exists it
// refunds nothing (the sweeper got there first, or the upload landed) but
// still frees the key. It reports whether it refunded.
func (s *Store) Undo(ctx context.Context, now time.Time, a Ask, urlID string) (refunded bool, err error) {
	if err := CheckUndo(a, urlID); err != nil {
		return false, err
	}
	u := asked{now: now, a: a, urlID: urlID}
	n, err := undoScript.Run(ctx, s.rdb, undoKeys.Fill(len(a.Buckets), u), undoArgs.Fill(len(a.Buckets), u)...).Int64()
	if err != nil {
		return false, unavailable("undo", err)
	}
	return n == 1, nil
}

// CheckUndo is Undo's refusal of a call, nil for a valid one.
func CheckUndo(a Ask, urlID string) error {
	if err := checkGrant(a.Tenant, urlID); err != nil {
		return err
	}
	return checkAsk(a, true)
}
