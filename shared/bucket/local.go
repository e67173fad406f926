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

// Take is Limiter.Take without Redis. It needs at least one bucket.
func (l *Local) Take(now time.Time, cost float64, buckets ...Bucket) Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	ms := now.UnixMilli()
	l.prune(ms)
	load := func(key string) (Stored, bool) {
		st, ok := l.state[key]
		return st.Stored, ok
	}
	save := func(key string, s Stored, ttl time.Duration) {
		l.state[key] = localState{Stored: s, expires: ms + ttl.Milliseconds()}
	}
	return Step(now, cost, buckets, load, save)
}

// Stored is one bucket's state as the script keeps it in its Redis hash.
type Stored struct {
	T  string // field t: the tokens, six fractional digits
	TS int64  // field ts: the millisecond stamp of the last update
}

// Step is the script's algorithm on state kept elsewhere, for the Go twin of
// a script that composes the core (see NewScript). load returns a bucket's
// stored state, false for a missing key (a full bucket); save receives every
// bucket's new state with the idle expiry the script would set. Local.Take is
// Step over Local's own map. It needs at least one bucket.
func Step(now time.Time, cost float64, buckets []Bucket, load func(key string) (Stored, bool), save func(key string, s Stored, ttl time.Duration)) Result {
	ms := now.UnixMilli()
	n := len(buckets)
	tok := make([]float64, n)
	stamp := make([]int64, n)
	for i, b := range buckets {
		c, r := b.Limit.Capacity, b.Limit.Rate
		stamp[i] = ms
		st, ok := load(b.Key)
		t, err := strconv.ParseFloat(st.T, 64)
		switch {
		case !ok || err != nil:
			t = c
		case ms > st.TS:
			t = math.Min(c, t+float64(ms-st.TS)*r/1000)
		default:
			stamp[i] = st.TS
		}
		tok[i] = t
	}

	allowed, blocked, retry := true, -1, 0.0
	if cost > 0 {
		for i, b := range buckets {
			if tok[i] < cost {
				allowed = false
				wait := math.Ceil((cost - tok[i]) / b.Limit.Rate)
				if blocked < 0 || wait > retry {
					blocked, retry = i, wait
				}
			}
		}
	}

	s := 0
	for i, b := range buckets {
		if allowed {
			tok[i] = math.Max(0, math.Min(b.Limit.Capacity, tok[i]-cost))
		}
		save(b.Key, Stored{T: strconv.FormatFloat(tok[i], 'f', 6, 64), TS: stamp[i]}, b.Limit.ttl())
		if tok[i] < tok[s] {
			s = i
		}
	}
	lim := buckets[s].Limit
	return Result{
		Allowed:    allowed,
		Remaining:  int64(math.Floor(tok[s])),
		Limit:      int64(lim.Capacity),
		Reset:      time.Duration(math.Ceil((lim.Capacity-tok[s])/lim.Rate)) * time.Second,
		RetryAfter: time.Duration(retry) * time.Second,
		Blocked:    blocked,
		Scarcest:   s,
	}
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
