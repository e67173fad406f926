package bucket

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// takeEntry is the plain entry, every key a bucket: the core alone on Redis,
// which the tests hold equal to Local.
//
//go:embed take.lua
var takeEntry string

// Limiter runs the core alone on Redis. Any go-redis client fits, a Redis
// Cluster client included: all keys of one decision must share a hash tag.
type Limiter struct {
	rdb    redis.Scripter
	script *redis.Script
}

// New returns a Limiter on rdb.
func New(rdb redis.Scripter) *Limiter {
	return &Limiter{rdb: rdb, script: NewScript(takeEntry)}
}

// Take spends cost tokens from every bucket or from none; a negative cost
// refunds, capped at each bucket's capacity.
func (l *Limiter) Take(ctx context.Context, now time.Time, cost float64, buckets ...Bucket) (Result, error) {
	c := Charge{Now: now, Cost: cost, Buckets: buckets}
	vals, err := l.script.Run(ctx, l.rdb, CoreKeys.Append(nil, c), Core.Append(nil, c)...).Slice()
	if err != nil {
		return Result{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return ParseResult(vals)
}

// State is a key's stored tokens and stamp, as Redis would hold them.
func (l *Local) State(key string) (t, ts string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st, ok := l.state[key]
	if !ok {
		return "", ""
	}
	return st.T, strconv.FormatInt(st.TS, 10)
}
