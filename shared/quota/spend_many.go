package quota

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/layout"
)

// SpendBatch's script: spend_many.lua runs spend_fn.lua's spend() (spend.go)
// once per Spend, in order.
//
//go:embed spend_many.lua
var spendManyEntry string

// SpendBatch's KEYS and ARGV: per Spend a SPEND_KEYS record (spend.go), and
// a BATCHED_SPEND record, its bucket count and then spend.lua's ARGV.
var (
	spendBatched = layout.Record("BATCHED_SPEND",
		layout.Value("n", func(s Spending) any { return len(s.Ask.Buckets) }),
		layout.Nest("spend", spendArgs, func(s Spending) Spending { return s }),
	)
	spendManyKeys = layout.Args("SPEND_MANY_KEYS", layout.Rest[struct{}]("spends", spendKeys))
	spendManyArgs = layout.Args("SPEND_MANY", layout.Rest[struct{}]("spends", spendBatched))
)

// spendManyScript is spend_many.lua, composed once (see spendScript).
var spendManyScript = bucket.NewScript(noncesSrc+"\n"+spendFn+"\n"+spendManyEntry, spendManyKeys, spendManyArgs)

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
	if err := CheckSpendBatch(ss); err != nil || len(ss) == 0 {
		return nil, err
	}
	nk, na := 0, 0
	for _, sp := range ss {
		nk += spendKeys.Width(len(sp.Ask.Buckets))
		na += spendBatched.Width(len(sp.Ask.Buckets))
	}
	ks, args := make([]string, 0, nk), make([]any, 0, na)
	for _, sp := range ss {
		ks = spendKeys.Append(ks, sp)
		args = spendBatched.Append(args, sp)
	}
	vals, err := s.runMany(ctx, spendManyScript, "spend", len(ss), ks, args)
	if err != nil {
		return nil, err
	}
	out := make([]Spent, len(ss))
	for i, v := range vals {
		r, ok := v.([]any)
		if !ok {
			return nil, fmt.Errorf("%w: spend batch answer %d is %T", ErrUnavailable, i, v)
		}
		if err, failed := failedInBatch("spend", r); failed {
			out[i].Err = err
			continue
		}
		out[i].Decision, out[i].Err = parseSpend(r)
	}
	return out, nil
}

// CheckSpendBatch is SpendBatch's refusal of a batch, nil for a valid one.
func CheckSpendBatch(ss []Spending) error {
	return checkEach("spend", ss, func(sp Spending) (string, error) { return sp.Ask.Tenant, CheckSpend(sp.Ask, sp.InFlight) })
}

// runMany runs a batch script of n requests of op and returns its n
// answers; an error is ErrUnavailable for the whole call.
func (s *Store) runMany(ctx context.Context, script *redis.Script, op string, n int, ks []string, args []any) ([]any, error) {
	vals, err := script.Run(ctx, s.rdb, ks, args...).Slice()
	if err != nil {
		return nil, unavailable(op, err)
	}
	if len(vals) != n {
		return nil, fmt.Errorf("%w: %s batch of %d replied %d answers", ErrUnavailable, op, n, len(vals))
	}
	return vals, nil
}

// failedInBatch tells a batch script's {'error', message} answer, that of
// one request whose commands failed, and makes it that request's error.
func failedInBatch(op string, r []any) (error, bool) {
	if len(r) != 2 || r[0] != "error" {
		return nil, false
	}
	msg, _ := r[1].(string)
	return unavailable(op, scriptError(msg)), true
}

// scriptError is the failure of one Spend's commands in a batch: Redis
// replied it, as it replies a single Spend's failed script, so it is a
// redis.Error (the Spend ran; it will not run again later).
type scriptError string

func (e scriptError) Error() string { return string(e) }

// RedisError marks scriptError as a reply of Redis (go-redis's redis.Error).
func (scriptError) RedisError() {}
