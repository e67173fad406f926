package quota

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Spending is one Spend of a batch: Store.Spend's arguments.
type Spending struct {
	Now      time.Time // the caller's clock, for this Spend's buckets
	Ask      Ask
	InFlight time.Duration
}

// Spent is one Spend's answer in a batch: its Decision, or the error of
// its own commands on Redis (a redis.Error: the script ran and failed for
// this Spend alone; whatever it wrote before failing stays, as with a
// single Spend that failed so).
type Spent struct {
	Decision Decision
	Err      error
}

// SpendBatch runs Spends of one tenant in one script call (one round trip,
// one slot on Redis Cluster), in order: each is exactly Store.Spend, and
// sees the writes of those before it as if they had run one after another.
// Redis's clock is read once for the batch; each Spend checks its own
// Ask.Until against it. The answers are in the order of ss.
//
// An error refuses the batch before anything is sent (an invalid Spend,
// Spends of several tenants) or is ErrUnavailable for the whole call: then
// any, all or none of the Spends may have run, exactly as for a single
// Spend that failed so.
func (s *Store) SpendBatch(ctx context.Context, ss []Spending) ([]Spent, error) {
	if err := checkBatch(ss); err != nil {
		return nil, err
	}
	if len(ss) == 0 {
		return nil, nil
	}
	var (
		ks   []string
		args []any
	)
	for _, sp := range ss {
		ks = append(append(ks, sp.Ask.Idem), bucketKeys(sp.Ask.Buckets)...)
		args = spendArgs(append(args, len(sp.Ask.Buckets)), sp.Now, sp.Ask, sp.InFlight)
	}
	vals, err := s.spendMany.Run(ctx, s.rdb, ks, args...).Slice()
	if err != nil {
		return nil, unavailable("spend", err)
	}
	if len(vals) != len(ss) {
		return nil, fmt.Errorf("%w: spend batch of %d replied %d answers", ErrUnavailable, len(ss), len(vals))
	}
	out := make([]Spent, len(ss))
	for i, v := range vals {
		r, ok := v.([]any)
		if !ok {
			return nil, fmt.Errorf("%w: spend batch answer %d is %T", ErrUnavailable, i, v)
		}
		if len(r) == 2 && r[0] == "error" {
			msg, _ := r[1].(string)
			out[i].Err = unavailable("spend", scriptError(msg))
			continue
		}
		out[i].Decision, out[i].Err = parseSpend(r)
	}
	return out, nil
}

// scriptError is the failure of one Spend's commands in a batch: Redis
// replied it, as it replies a single Spend's failed script, so it is a
// redis.Error (the Spend ran; it will not run again later).
type scriptError string

func (e scriptError) Error() string { return string(e) }

// RedisError marks scriptError as a reply of Redis (go-redis's redis.Error).
func (scriptError) RedisError() {}

// SpendBatch is Store.SpendBatch: the Spends one after another, atomically.
// It reads its clock for each Spend's Until where the script reads Redis's
// once: the two differ only for an Until within the batch's own run.
func (t *Twin) SpendBatch(_ context.Context, ss []Spending) ([]Spent, error) {
	if err := checkBatch(ss); err != nil {
		return nil, err
	}
	if len(ss) == 0 {
		return nil, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]Spent, len(ss))
	for i, sp := range ss {
		out[i].Decision = t.spend(sp.Now, sp.Ask, sp.InFlight)
	}
	return out, nil
}

func checkBatch(ss []Spending) error {
	for i, sp := range ss {
		if err := checkSpend(sp.Ask, sp.InFlight); err != nil {
			return fmt.Errorf("spend %d: %w", i, err)
		}
		if i > 0 && sp.Ask.Tenant != ss[0].Ask.Tenant {
			return errors.New("quota: a spend batch holds tenants " + ss[0].Ask.Tenant + " and " + sp.Ask.Tenant)
		}
	}
	return nil
}
