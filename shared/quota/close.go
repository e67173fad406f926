package quota

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/layout"
)

// Claim is what Close answered.
type Claim string

// The claims of Close.
const (
	// ClaimOK: the caller may go on (complete, or abort, the upload).
	ClaimOK Claim = "ok"
	// ClaimDone: the grant's upload completed (done marker): nothing to
	// complete or abort.
	ClaimDone Claim = "done"
	// ClaimClosed (complete only): an abort claimed the grant, or it was
	// refunded: it can no longer complete.
	ClaimClosed Claim = "closed"
	// ClaimBusy (abort only): a complete is in progress; ask again once
	// its lease ends (Closing.Wait).
	ClaimBusy Claim = "busy"
	// ClaimRefunded (abort only): the grant was given back before (a
	// DELETE, an earlier sweep, its create's undo): its upload is ended,
	// nothing to abort.
	ClaimRefunded Claim = "refunded"
)

// Closing is a Close's answer.
type Closing struct {
	Claim Claim
	Wait  time.Duration // for ClaimBusy: until the last complete's lease ends
}

// CompleteLease bounds how long a complete's claim holds off every abort:
// the signer's S3 complete is cut off well before (its budget), and the
// rest is slack for S3 to finish a request it was already given.
const CompleteLease = 3 * time.Minute

// ClaimComplete claims multipart grant urlID for one more complete, until
// lease ends at the earliest: no abort claims it while a complete holds
// it. A complete whose S3 call failed for good releases its claim
// (Release); one that died holds it to the end of the lease.
func (s *Store) ClaimComplete(ctx context.Context, tenant, urlID string, lease time.Duration) (Closing, error) {
	return s.claim(ctx, closing{tenant: tenant, urlID: urlID, mode: "complete", lease: lease})
}

// ClaimAbort claims multipart grant urlID for an abort, for good: from
// then on no complete claims it. ClaimBusy while a complete's claim holds;
// ClaimDone or ClaimRefunded (nothing claimed) once the grant has ended.
func (s *Store) ClaimAbort(ctx context.Context, tenant, urlID string) (Closing, error) {
	return s.claim(ctx, closing{tenant: tenant, urlID: urlID, mode: "abort"})
}

// Release gives up one complete's claim on urlID: once none holds it, the
// lease ends.
func (s *Store) Release(ctx context.Context, tenant, urlID string) error {
	_, err := s.claim(ctx, closing{tenant: tenant, urlID: urlID, mode: "release"})
	return err
}

func (s *Store) claim(ctx context.Context, c closing) (Closing, error) {
	if err := checkGrant(c.tenant, c.urlID); err != nil {
		return Closing{}, err
	}
	v, err := closeScript.Run(ctx, s.rdb, closeKeys.Append(nil, c), closeArgs.Append(nil, c)...).Slice()
	if err != nil {
		return Closing{}, unavailable("close "+c.mode, err)
	}
	if len(v) != 2 {
		return Closing{}, fmt.Errorf("%w: close replied %v", ErrUnavailable, v)
	}
	claim, _ := v[0].(string)
	ms, _ := v[1].(int64)
	switch Claim(claim) {
	case ClaimOK, ClaimDone, ClaimClosed, ClaimBusy, ClaimRefunded:
		return Closing{Claim: Claim(claim), Wait: time.Duration(ms) * time.Millisecond}, nil
	}
	return Closing{}, fmt.Errorf("%w: close replied %v", ErrUnavailable, v)
}

// Close's script: plain commands, no bucket core (it moves no tokens).
//
//go:embed close.lua
var closeEntry string

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

// closeScript is close.lua, composed once (see spendScript).
var closeScript = layout.Script(closeEntry, closeKeys, closeArgs)
