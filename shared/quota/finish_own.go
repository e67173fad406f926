package quota

import (
	"context"
	_ "embed"

	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/layout"
)

// FinishOwn's script: plain commands, no bucket core (it moves no tokens).
//
//go:embed finish_own.lua
var finishOwnEntry string

// FinishOwn's KEYS and ARGV.
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
		layout.Value("filename", func(f Finishing) any { return f.Finished.Filename }), // '' for none
	)
)

// finishOwnScript is finish_own.lua, composed once (see spendScript).
var finishOwnScript = layout.Script(finishOwnEntry, finishOwnKeys, finishOwnArgs)

// FinishOwn is Finish for a request that gives its grant back (Undo) if
// this write fails, as a multipart create does: the idempotency record
// becomes done only while it is still this request's in-flight mark (its
// nonce and fingerprint), in one script; the grant record is written in
// any case. A FinishOwn its caller gave up on may still run later; with
// Undo's part (it deletes a done record of its own nonce), nothing then
// replays the grant given back, whichever of the two runs first. It reports
// whether the record became done.
func (s *Store) FinishOwn(ctx context.Context, a Ask, f Finished) (bool, error) {
	if err := CheckFinish(a, f); err != nil {
		return false, err
	}
	fin := Finishing{Ask: a, Finished: f}
	n, err := finishOwnScript.Run(ctx, s.rdb, finishOwnKeys.Fill(0, fin), finishOwnArgs.Fill(0, fin)...).Int64()
	if err != nil {
		return false, unavailable("finish", err)
	}
	return n == 1, nil
}
