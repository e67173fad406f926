// Package bucket is mintgate's token bucket: one Lua script that decides for
// every bucket of a request at once (a caller and its tenant), all or
// nothing, in one round trip, and an in-process twin of the same algorithm
// for the degraded mode and for running without Redis.
//
// State is a Redis hash per bucket: t, the tokens with six fractional digits,
// and ts, the millisecond stamp of the last update. A missing key is a full
// bucket. The clock is always the caller's.
//
// A spend takes from every bucket or none and leaves none below 0. A credit
// (a refund, cost < 0) comes with its grant's shape, which may not be the
// bucket's any more: it adds exactly its units to the stored tokens, capped
// at that shape's capacity, without refilling (the next spend refills the
// interval at the bucket's shape then), never lowers a bucket nor shortens
// its key's life, and reports what it gave (Credit). A charge that owes
// (TakeBack, the core's owe: a refund taken back) takes exactly what the
// credit gave, whatever the bucket holds, below 0 if need be; such a bucket
// refills from there, and its key lives until it is full again.
package bucket

import (
	_ "embed"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/layout"
)

//go:embed bucket.lua
var core string

// ErrUnavailable is returned when Redis cannot give a decision: unreachable,
// slower than the client's timeout, or failing. Callers fail closed on it.
var ErrUnavailable = errors.New("bucket: limiter unavailable")

// Limit is one tier's bucket shape.
type Limit struct {
	Capacity float64       // tokens the bucket holds when full
	Rate     float64       // tokens added per second
	TTL      time.Duration // idle expiry of the key; zero means FillTime
}

// FillTime is how long an empty bucket takes to fill, rounded up to a second.
func (l Limit) FillTime() time.Duration {
	return time.Duration(math.Ceil(l.Capacity/l.Rate)) * time.Second
}

// Window is capacity ÷ rate rounded to the nearest second: the w of a
// RateLimit-Policy header.
func (l Limit) Window() int64 {
	return int64(math.Round(l.Capacity / l.Rate))
}

// Validate reports a limit that cannot work.
func (l Limit) Validate() error {
	switch {
	case !(l.Capacity >= 1) || math.IsInf(l.Capacity, 0):
		return fmt.Errorf("capacity %v: must be at least 1", l.Capacity)
	case !(l.Rate > 0) || math.IsInf(l.Rate, 0):
		return fmt.Errorf("refill %v: must be above 0 per second", l.Rate)
	case l.Capacity/l.Rate > maxFillSeconds:
		// FillTime would overflow time.Duration, the key's expiry would go
		// negative and Redis would drop every bucket at once: no limit at all.
		return fmt.Errorf("refill %v per second: filling %v tokens would take more than %d years", l.Rate, l.Capacity, int64(maxFillSeconds)/(365*24*3600))
	case l.TTL != 0 && l.TTL < l.FillTime():
		// A key that expired must mean a full bucket, or expiry would mint quota.
		return fmt.Errorf("ttl %v: must be at least the time to fill (%v)", l.TTL, l.FillTime())
	}
	return nil
}

func (l Limit) ttl() time.Duration {
	if l.TTL > 0 {
		return l.TTL
	}
	return l.FillTime()
}

// maxFillSeconds is the longest time to fill a bucket that time.Duration
// can hold (about 292 years).
const maxFillSeconds = float64(math.MaxInt64 / int64(time.Second))

// Bucket is one bucket of a decision: its Redis key and its shape.
type Bucket struct {
	Key   string
	Limit Limit
	// Units is 0 for a bucket of requests: each unit of a charge's cost
	// takes one token. Above 0 it is a bucket of bytes, and each unit of
	// cost takes Units tokens (a sign's contentLength): the same charge of
	// 1, or refund of -1, moves a request and its bytes. A Result's
	// headers (Remaining, Limit, Reset, Scarcest) are of the request
	// buckets alone.
	Units float64
}

// need is what a charge of cost takes from b.
func (b Bucket) need(cost float64) float64 {
	if b.Units > 0 {
		return cost * b.Units
	}
	return cost
}

// Result is one decision. The headers a client sees describe the scarcest
// bucket: the one with the fewest tokens after the step.
type Result struct {
	Allowed    bool
	Remaining  int64         // whole tokens left in the scarcest bucket
	Limit      int64         // capacity of the scarcest bucket
	Reset      time.Duration // until the scarcest bucket is full again, whole seconds
	RetryAfter time.Duration // when denied: until the cost fits, whole seconds
	Blocked    int           // index of the bucket that denied, -1 when allowed
	Scarcest   int           // index of the scarcest bucket
	// BytesLeft are the whole tokens the buckets of bytes hold after the
	// step, in their order among the buckets (the first MaxByteBuckets);
	// the rest are 0.
	BytesLeft [MaxByteBuckets]int64
}

// MaxByteBuckets is how many buckets of bytes a Result reports: a sign
// spends from two at most, the caller's and the tenant's.
const MaxByteBuckets = 2

// Charge is one decision's input to the core: the caller's clock, the cost
// (negative refunds) and the buckets, in the order the reply indexes them.
type Charge struct {
	Now     time.Time
	Cost    float64
	Buckets []Bucket
}

// The core's layouts: a script that composes it nests Core in its ARGV and
// CoreKeys in its KEYS, and passes take() where each starts.
var (
	// Shape is one bucket's shape in ARGV.
	Shape = layout.Record("SHAPE",
		layout.Value("capacity", func(b Bucket) any { return formatFloat(b.Limit.Capacity) }),
		layout.Value("rate", func(b Bucket) any { return formatFloat(b.Limit.Rate) }),
		layout.Value("ttl", func(b Bucket) any { return strconv.FormatInt(b.Limit.ttl().Milliseconds(), 10) }),
		layout.Value("units", func(b Bucket) any { return units(b.Units) }),
	)
	// Core is the core's ARGV: now (ms), the cost, then a Shape per bucket.
	Core = layout.Record("CORE",
		layout.Value("now", func(c Charge) any { return strconv.FormatInt(c.Now.UnixMilli(), 10) }),
		layout.Value("cost", func(c Charge) any { return formatFloat(c.Cost) }),
		layout.Each("shapes", Shape, func(c Charge) []Bucket { return c.Buckets }),
	)
	// Key is one bucket's key in KEYS.
	Key = layout.Record("BUCKET_KEY", layout.Value("key", func(b Bucket) string { return b.Key }))
	// CoreKeys is the core's KEYS: a Key per bucket.
	CoreKeys = layout.Record("CORE_KEYS", layout.Each("buckets", Key, func(c Charge) []Bucket { return c.Buckets }))
)

// NewScript composes entry with the bucket core, so a service can guard a
// spend with its own checks in the same atomic script. The entry calls
// take(keys, k, n, argv, a), whose buckets' keys (CoreKeys) start at
// keys[k] and whose arguments (Core) start at argv[a]; ls are the entry's
// own layouts, whose names it reads (layout.Script). Run the result with
// Script.Run: it loads itself again after a SCRIPT FLUSH or a failover.
func NewScript(entry string, ls ...layout.Lua) *redis.Script {
	return layout.Script(core+"\n"+entry, append([]layout.Lua{Core, CoreKeys}, ls...)...)
}

// ResultLen is how many reply values ParseResult reads.
const ResultLen = 7

// ParseResult reads the core's reply: the first ResultLen values of vals,
// then what the buckets of bytes hold, if any.
func ParseResult(vals []any) (Result, error) {
	if len(vals) < ResultLen {
		return Result{}, fmt.Errorf("bucket: reply has %d values, want %d", len(vals), ResultLen)
	}
	var n [ResultLen]int64
	for i := range n {
		v, ok := vals[i].(int64)
		if !ok {
			return Result{}, fmt.Errorf("bucket: reply value %d is %T", i, vals[i])
		}
		n[i] = v
	}
	var left [MaxByteBuckets]int64
	for i := range min(len(vals)-ResultLen, MaxByteBuckets) {
		v, ok := vals[ResultLen+i].(int64)
		if !ok {
			return Result{}, fmt.Errorf("bucket: reply value %d is %T", ResultLen+i, vals[ResultLen+i])
		}
		left[i] = v
	}
	return Result{
		BytesLeft:  left,
		Allowed:    n[0] == 1,
		Remaining:  n[1],
		Limit:      n[2],
		Reset:      time.Duration(n[3]) * time.Second,
		RetryAfter: time.Duration(n[4]) * time.Second,
		Blocked:    int(n[5]) - 1,
		Scarcest:   int(n[6]) - 1,
	}, nil
}

func formatFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// units is a Shape's units: a constant for a bucket of requests, so that a
// sign without tiers of bytes formats nothing more than before.
func units(u float64) string {
	if u == 0 {
		return "0"
	}
	return formatFloat(u)
}
