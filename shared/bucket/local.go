package bucket

import (
	"math"
	"strconv"
	"sync"
	"time"
)

// Local is the in-process twin of the Redis script: the same inputs give the
// same decisions and the same stored state. It serves the degraded mode and
// development without Redis; its state is per process.
type Local struct {
	mu    sync.Mutex
	state map[string]localState
	calls int
}

type localState struct {
	Stored
	// expires is the caller's clock at which the key would have expired.
	expires int64
}

// NewLocal returns an empty Local: every bucket starts full.
func NewLocal() *Local {
	return &Local{state: make(map[string]localState)}
}

// Take spends cost tokens from every bucket or from none, as the core does
// on Redis; a negative cost refunds, capped at each bucket's capacity. It
// needs at least one bucket.
func (l *Local) Take(now time.Time, cost float64, buckets ...Bucket) Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	ms := now.UnixMilli()
	l.prune(ms)
	return Step(now, cost, buckets, l.load, l.saver(ms))
}

// Peek is what Take would decide now, changing nothing: whether cost
// tokens fit every bucket, and if not when they will (RetryAfter). It
// needs at least one bucket.
func (l *Local) Peek(now time.Time, cost float64, buckets ...Bucket) Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Step(now, cost, buckets, l.load, func(string, Stored, time.Duration, bool) {})
}

// Charge spends cost tokens from every bucket whatever they hold, below
// zero if need be (the core's owe): a bucket that owes refuses every Take
// until its refill has paid the debt back. It is how work already done is
// paid for after the fact, so that requests let through together by a
// Peek are all paid for. It needs at least one bucket.
func (l *Local) Charge(now time.Time, cost float64, buckets ...Bucket) Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	ms := now.UnixMilli()
	l.prune(ms)
	save := l.saver(ms)
	// Refilled to now at the buckets' own shapes first: the owing charge
	// itself never refills (it is the core's take-back), and a refill
	// capped later would swallow what it charged.
	for _, b := range buckets {
		st, ok := l.load(b.Key)
		t, err := strconv.ParseFloat(st.T, 64)
		if ok && err == nil && ms > st.TS {
			t = math.Min(b.Limit.Capacity, t+float64(ms-st.TS)*b.Limit.Rate/1000)
			save(b.Key, Stored{T: strconv.FormatFloat(t, 'f', 6, 64), TS: ms}, life(b.Limit, t), true)
		}
	}
	res, _ := step(now, cost, true, nil, buckets, l.load, save)
	return res
}

// load is a bucket's stored state; false: missing, a full bucket.
func (l *Local) load(key string) (Stored, bool) {
	st, ok := l.state[key]
	return st.Stored, ok
}

// saver is Take's and Charge's save at ms: the key expires when the script
// would expire it.
func (l *Local) saver(ms int64) Save {
	return func(key string, s Stored, ttl time.Duration, extend bool) {
		exp := ms + ttl.Milliseconds()
		if old, ok := l.state[key]; ok && extend && old.expires > exp {
			exp = old.expires
		}
		l.state[key] = localState{Stored: s, expires: exp}
	}
}

// Stored is one bucket's state as the script keeps it in its Redis hash.
type Stored struct {
	T  string // field t: the tokens, six fractional digits
	TS int64  // field ts: the millisecond stamp of the last update
}

// Save receives a bucket's new state and the idle expiry the script sets:
// ttl from now, or, when extend is true (a credit, or a charge that owes),
// whichever is later of that and the key's current expiry.
type Save func(key string, s Stored, ttl time.Duration, extend bool)

// Step is the script's algorithm on state kept elsewhere, for the Go twin of
// a script that composes the core (see NewScript). load returns a bucket's
// stored state, false for a missing key (a full bucket); save receives every
// bucket's new state. Local.Take is Step over Local's own map. It needs at
// least one bucket.
func Step(now time.Time, cost float64, buckets []Bucket, load func(key string) (Stored, bool), save Save) Result {
	res, _ := step(now, cost, false, nil, buckets, load, save)
	return res
}

// Credit is Step at a cost of -1 (a refund), reporting the tokens it gave
// each bucket: none to a missing key or a full one, less than a whole unit
// to one it filled. A refund records them, so that TakeBack charges exactly
// that.
func Credit(now time.Time, buckets []Bucket, load func(key string) (Stored, bool), save Save) []float64 {
	_, moved := step(now, -1, false, nil, buckets, load, save)
	return moved
}

// TakeBack is the core's take with owe set (a refund taken back): it
// charges each bucket whatever it holds, below 0 if need be, amounts[i]
// tokens (what Credit gave it), or, with amounts nil, one unit of cost.
func TakeBack(now time.Time, buckets []Bucket, amounts []float64, load func(key string) (Stored, bool), save Save) {
	step(now, 1, true, amounts, buckets, load, save)
}

func step(now time.Time, cost float64, owe bool, amounts []float64, buckets []Bucket, load func(key string) (Stored, bool), save Save) (Result, []float64) {
	ms := now.UnixMilli()
	credit := cost < 0
	n := len(buckets)
	tok := make([]float64, n)
	stamp := make([]int64, n)
	missing := make([]bool, n)
	for i, b := range buckets {
		c, r := b.Limit.Capacity, b.Limit.Rate
		stamp[i] = ms
		st, ok := load(b.Key)
		t, err := strconv.ParseFloat(st.T, 64)
		switch {
		case !ok || err != nil:
			t, missing[i] = c, true
		case credit || owe:
			// The grant's shape may not be the bucket's: no refill (the
			// next spend refills the interval, at the bucket's shape).
			stamp[i] = st.TS
		case ms > st.TS:
			t = math.Min(c, t+float64(ms-st.TS)*r/1000)
		default:
			stamp[i] = st.TS
		}
		tok[i] = t
	}

	allowed, blocked, retry := true, -1, 0.0
	if cost > 0 && !owe {
		for i, b := range buckets {
			if need := b.need(cost); tok[i] < need {
				allowed = false
				wait := math.Ceil((need - tok[i]) / b.Limit.Rate)
				if blocked < 0 || wait > retry {
					blocked, retry = i, wait
				}
			}
		}
	}

	moved := make([]float64, n)
	s := -1
	for i, b := range buckets {
		need := b.need(cost)
		if amounts != nil {
			need = amounts[i]
		}
		was := tok[i]
		switch {
		case owe:
			tok[i] -= need
		case credit:
			if tok[i] < b.Limit.Capacity && !missing[i] {
				tok[i] = math.Min(b.Limit.Capacity, tok[i]-need)
			}
		case allowed:
			tok[i] = math.Max(0, math.Min(b.Limit.Capacity, tok[i]-need))
		}
		moved[i] = math.Abs(tok[i] - was)
		// A missing key is a full bucket: nothing to credit, and a charge of
		// nothing leaves it missing.
		if !((credit || (owe && need == 0)) && missing[i]) {
			save(b.Key, Stored{T: strconv.FormatFloat(tok[i], 'f', 6, 64), TS: stamp[i]}, life(b.Limit, tok[i]), credit || owe)
		}
		if b.Units <= 0 && (s < 0 || tok[i] < tok[s]) {
			s = i
		}
	}
	return report(tok, buckets, max(s, 0), allowed, blocked, retry), moved
}

// report is a step's Result: the headers' figures of the scarcest bucket s
// (the first, when all are buckets of bytes) and what each bucket of bytes
// holds, from the tokens tok each bucket holds after it.
func report(tok []float64, buckets []Bucket, s int, allowed bool, blocked int, retry float64) Result {
	lim := buckets[s].Limit
	var left [MaxByteBuckets]int64
	j := 0
	for i, b := range buckets {
		if b.Units > 0 && j < MaxByteBuckets {
			left[j] = int64(math.Max(0, math.Floor(tok[i])))
			j++
		}
	}
	return Result{
		BytesLeft:  left,
		Allowed:    allowed,
		Remaining:  int64(math.Max(0, math.Floor(tok[s]))),
		Limit:      int64(lim.Capacity),
		Reset:      time.Duration(math.Ceil((lim.Capacity-tok[s])/lim.Rate)) * time.Second,
		RetryAfter: time.Duration(retry) * time.Second,
		Blocked:    blocked,
		Scarcest:   s,
	}
}

// life is how long a bucket's key must live so that it expires only once
// the bucket is full again: the idle TTL, and for a bucket that owes the
// time to climb back to 0 on top.
func life(l Limit, tokens float64) time.Duration {
	ms := l.ttl().Milliseconds()
	if tokens < 0 {
		ms += int64(math.Ceil(-tokens * 1000 / l.Rate))
	}
	return time.Duration(ms) * time.Millisecond
}

// pruneAbove is how many keys Local keeps before it looks for expired ones.
const pruneAbove = 1 << 16

// prune drops expired keys now and then; an expired key is a full bucket, as
// in Redis, so dropping it changes no decision.
func (l *Local) prune(now int64) {
	l.calls++
	if l.calls%1024 != 0 || len(l.state) < pruneAbove {
		return
	}
	for k, st := range l.state {
		if st.expires <= now {
			delete(l.state, k)
		}
	}
}
