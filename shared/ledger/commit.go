package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mintgate/mintgate/shared/gather"
)

// Defaults of the group commit (LedgerConfig).
const (
	DefaultWindow   = time.Millisecond
	DefaultMaxBatch = 256
	// One publish at a time: the grants that arrive during its fsync share
	// the next one. Every message is one more fsynced write when its
	// schedule fires, so more in flight, making more and smaller messages,
	// fires schedules later and records fewer grants a second.
	DefaultMaxInFlight = 1
	// Two publishes start at least 2 ms apart (a full batch excepted), so
	// a stream fires at most ~500 schedules a second per signer: on an R1
	// ledger with sync always each fire is two fsynced writes, one after
	// another, and fewer, fuller messages keep the schedules on time. A
	// lone grant, or a few, still leave at once (gapFrom).
	DefaultMinGap = 2 * time.Millisecond
)

// gapFrom is how many grants must wait for the gap to hold them: fewer is
// a caller or two signing one after another, whose each sign would wait
// the gap for nothing.
const gapFrom = 4

// errClosed is what Record returns after Close.
var errClosed = errors.New("ledger: closed")

// committer gathers the grants of concurrent Record calls into batches:
// one ledger message, one fsync, however many grants it carries. It is
// one lane of a gather.Gatherer: a batch leaves at once while no publish
// is in flight (a lone grant waits no longer than it would alone);
// otherwise as soon as a publish's ack is back, or when the oldest waiting
// grant has waited the window, or when maxBatch grants wait — never with
// more than maxInFlight publishes outstanding, and while busy never sooner
// than the gap after the previous one. Under load the grants that arrive
// during one fsync share the next one. Past two full batches waiting,
// Record waits for room (back pressure on the signs).
//
// A grant's Record returns the error of the publish that carried it, so a
// sign answers 201 only once its own batch is acknowledged, and every sign
// of a failed batch fails (and undoes its spend) together.
type committer struct {
	g *gather.Gatherer[Grant, error]
}

// commitConfig is the gatherer of a ledger's group commit; a gap of zero
// or less is none.
func commitConfig(window time.Duration, maxBatch, maxInFlight int, gap time.Duration) gather.Config {
	return gather.Config{
		Window: window, MaxBatch: maxBatch, MaxInFlight: maxInFlight, MaxQueued: 2 * maxBatch,
		MinGap: max(gap, 0), GapFrom: gapFrom,
	}
}

// newCommitter publishes its batches with publish, each with an id of newID.
func newCommitter(cfg gather.Config, newID func() string, publish func(Batch) error) *committer {
	run := func(_ context.Context, gs []Grant) []error {
		// The publish has its own timeout (PublishTimeout), not the
		// callers': a batch once sent is waited for to the end.
		err := publish(Batch{ID: newID(), Grants: gs})
		out := make([]error, len(gs))
		for i := range out {
			out[i] = err
		}
		return out
	}
	return &committer{g: gather.New(cfg, run)}
}

// record queues g and waits for the ack of the batch that carries it.
// When ctx ends first, the grant may still be committed: the caller treats
// that as a failure and undoes the sign, and the undo's refunded marker
// keeps the sweeper from refunding the same grant again. A Record that
// gave up before its batch left is not sent: storing it would be harmless,
// since the undo's marker stops its refund, but useless.
func (c *committer) record(ctx context.Context, g Grant) error {
	res, gaveUp := c.g.Do(ctx, lane(g), g)
	switch {
	case errors.Is(gaveUp, gather.ErrClosed):
		return errClosed
	case gaveUp != nil:
		return fmt.Errorf("grant %s: waiting for the ledger's ack: %w", g.URLID, gaveUp)
	}
	return res
}

// lane is the batch lane of g: a batch falls due with the latest of its
// grants, so multipart grants, which live far longer than a URL, travel
// apart from single PUTs and never hold back their refunds.
func lane(g Grant) string {
	if g.UploadID != "" {
		return "multipart"
	}
	return ""
}

// close sends what is queued, waits for every publish, and refuses every
// Record from then on.
func (c *committer) close() { c.g.Close() }
