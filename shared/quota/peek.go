package quota

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/bucket"
)

// Peek reads what each of bs holds at now without spending or writing
// anything: one Result per bucket, as a Spend of nothing would see it
// (Remaining, Limit and Reset of that bucket alone). One round trip: the
// reads go out as one pipeline, and every bucket of a tenant shares its
// hash tag, so on a Cluster they reach one node.
func (s *Store) Peek(ctx context.Context, now time.Time, tenant string, bs []bucket.Bucket) ([]bucket.Result, error) {
	if err := CheckPeek(tenant, bs); err != nil {
		return nil, err
	}
	cmds := make([]*redis.SliceCmd, len(bs))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, b := range bs {
			cmds[i] = p.HMGet(ctx, b.Key, "t", "ts")
		}
		return nil
	})
	if err != nil {
		return nil, unavailable("peek", err)
	}
	stored := make(map[string]bucket.Stored, len(bs))
	for i, c := range cmds {
		v := c.Val()
		t, ok1 := v[0].(string)
		ts, ok2 := v[1].(string)
		if !ok1 || !ok2 {
			continue // missing: a full bucket
		}
		ms, err := strconv.ParseInt(ts, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: bucket %s holds ts %q", ErrUnavailable, bs[i].Key, ts)
		}
		stored[bs[i].Key] = bucket.Stored{T: t, TS: ms}
	}
	return Peeked(now, bs, func(key string) (bucket.Stored, bool) {
		st, ok := stored[key]
		return st, ok
	}), nil
}

// Peeked is what Peek answers for bs at now, their stored state read by
// load: bucket.Step for nothing over each bucket alone, saving nothing.
func Peeked(now time.Time, bs []bucket.Bucket, load func(key string) (bucket.Stored, bool)) []bucket.Result {
	out := make([]bucket.Result, len(bs))
	for i, b := range bs {
		out[i] = bucket.Step(now, 0, []bucket.Bucket{b}, load, func(string, bucket.Stored, time.Duration, bool) {})
	}
	return out
}

// Refill fills bucket key of tenant to capacity at once, as an idle bucket
// would be: it deletes the key (a missing bucket is a full one). For
// operators (the signer's admin API), never for a sign.
func (s *Store) Refill(ctx context.Context, tenant, key string) error {
	if err := CheckRefill(tenant, key); err != nil {
		return err
	}
	if err := s.rdb.Del(ctx, key).Err(); err != nil {
		return unavailable("refill", err)
	}
	return nil
}

// CheckPeek is Peek's refusal of a call, nil for a valid one.
func CheckPeek(tenant string, bs []bucket.Bucket) error { return checkBuckets(tenant, bs) }

// CheckRefill is Refill's refusal of a call, nil for a valid one.
func CheckRefill(tenant, key string) error { return inTenant(tenant, key) }
