package quota

import (
	"context"
	"fmt"
	"time"

	"github.com/mintgate/mintgate/shared/gather"
)

// Finishing is one Finish of a batch: Store.Finish's arguments.
type Finishing struct {
	Ask      Ask
	Finished Finished
}

// FinishBatch runs Finishes of one tenant in one script call (one round
// trip, one slot on Redis Cluster), in order: each is exactly Store.Finish,
// and sees the writes of those before it as if they had run one after
// another; a tombstone is left as it is. The answers are in the order of
// fs: nil, or the error of that Finish's own commands on Redis (a
// redis.Error wrapped in ErrUnavailable; whatever it wrote before failing
// stays, as with a single Finish that failed so).
//
// An error refuses the batch before anything is sent (an invalid Finish,
// Finishes of several tenants) or is ErrUnavailable for the whole call:
// then any, all or none of the Finishes may have run, exactly as for a
// single Finish that failed so; each is idempotent and may be retried.
func (s *Store) FinishBatch(ctx context.Context, fs []Finishing) ([]error, error) {
	if err := CheckFinishBatch(fs); err != nil || len(fs) == 0 {
		return nil, err
	}
	ks := make([]string, 0, len(fs)*finishKeys.Width(0))
	args := make([]any, 0, len(fs)*finishArgs.Width(0))
	for _, f := range fs {
		ks, args = finishKeys.Append(ks, f), finishArgs.Append(args, f)
	}
	vals, err := s.runMany(ctx, s.finishMany, "finish", len(fs), ks, args)
	if err != nil {
		return nil, err
	}
	out := make([]error, len(fs))
	for i, v := range vals {
		if r, ok := v.([]any); ok {
			if err, failed := failedInBatch("finish", r); failed {
				out[i] = err
				continue
			}
		}
		if v != int64(1) {
			return nil, fmt.Errorf("%w: finish batch answer %d is %v", ErrUnavailable, i, v)
		}
	}
	return out, nil
}

// FinishCoalescer gathers concurrent Finishes of one tenant into one script
// call, FinishBatch, by the Coalescer's rules (the same gatherer): a lone
// Finish leaves at once, as the plain script; others wait for the reply of
// a call of their tenant's, the window, or maxBatch waiting.
//
// Each caller gets its own answer, exactly what Store.Finish would have
// answered had the Finishes of its batch run one after another. A call
// that fails fails every Finish in it with the same error a single Finish
// would have had; a Finish is idempotent, so its caller retries as after a
// single one. A caller whose ctx ended before its batch left is not sent.
type FinishCoalescer struct {
	g *gather.Gatherer[Finishing, error]
}

// NewFinishCoalescer gathers Finishes on store; a window or maxBatch of zero
// or less is the default (DefaultCoalesceWindow, DefaultCoalesceBatch).
// maxBatch 1 sends every Finish alone.
func NewFinishCoalescer(store *Store, window time.Duration, maxBatch int) *FinishCoalescer {
	run := func(ctx context.Context, fs []Finishing) []error {
		if len(fs) == 1 {
			// Alone: the plain script, byte for byte a Store.Finish.
			return []error{store.Finish(ctx, fs[0].Ask, fs[0].Finished)}
		}
		out, err := store.FinishBatch(ctx, fs)
		if err != nil {
			out = make([]error, len(fs))
			for i := range out {
				out[i] = err
			}
		}
		return out
	}
	return &FinishCoalescer{g: newGatherer(window, maxBatch, run)}
}

// Finish is Store.Finish, sharing a script call with the concurrent
// Finishes of a's tenant.
func (c *FinishCoalescer) Finish(ctx context.Context, a Ask, f Finished) error {
	if err := CheckFinish(a, f); err != nil {
		return err
	}
	res, gaveUp := c.g.Do(ctx, a.Tenant, Finishing{Ask: a, Finished: f})
	if gaveUp != nil {
		return unavailable("finish", gaveUp)
	}
	return res
}

// Stats is how many script calls the FinishCoalescer made and how many
// Finishes they carried.
func (c *FinishCoalescer) Stats() (calls, finishes int64) { return c.g.Stats() }
