package main

import (
	"context"
	"math"
	"slices"
	"sort"
	"sync"
	"time"
)

// op is one operation of a load: a Redis call, a ledger Record, an HTTP
// request. It returns a label for the status split ("ok", "201", "429" …);
// an error is counted as "error" and the first one is kept for the report.
// i is the caller's index in a closed loop, the request's number in an
// open loop.
type op func(ctx context.Context, i int) (string, error)

// result is one timed run of an op.
type result struct {
	n       int
	elapsed time.Duration
	lat     []time.Duration // sorted once the run ends
	status  map[string]int
	err     error // the first error, if any
	// lag is, in an open loop, how late the generator itself started
	// requests (sorted): a starved load generator, not the server, when
	// it is a large part of the latency.
	lag []time.Duration
	// cpu is what the run cost each process, and how busy the machine was.
	cpu cpuUse
}

// rate is completed operations per second of the run.
func (r result) rate() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.n) / r.elapsed.Seconds()
}

// pct is the q-quantile of latency (nearest rank).
func (r result) pct(q float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(r.lat)))) - 1
	return r.lat[min(max(i, 0), len(r.lat)-1)]
}

// recorder collects the samples of one caller, or of an open loop's many
// goroutines behind its mutex.
type recorder struct {
	mu     sync.Mutex
	lat    []time.Duration
	status map[string]int
	err    error
}

func (r *recorder) add(d time.Duration, label string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.status == nil {
		r.status = map[string]int{}
	}
	if err != nil {
		label = "error"
		if r.err == nil {
			r.err = err
		}
	}
	r.lat = append(r.lat, d)
	r.status[label]++
}

// merge folds the recorders into one result.
func merge(elapsed time.Duration, recs ...*recorder) result {
	res := result{elapsed: elapsed, status: map[string]int{}}
	for _, r := range recs {
		res.lat = append(res.lat, r.lat...)
		for k, v := range r.status {
			res.status[k] += v
		}
		if res.err == nil {
			res.err = r.err
		}
	}
	res.n = len(res.lat)
	slices.Sort(res.lat)
	return res
}

// closedLoop runs callers goroutines, each doing one op after the other
// for dur: the throughput the target reaches with that many requests in
// flight (a saturation run when callers is large enough).
func closedLoop(ctx context.Context, callers int, dur time.Duration, do op) result {
	recs := make([]*recorder, callers)
	start := time.Now()
	deadline := start.Add(dur)
	var wg sync.WaitGroup
	for w := range callers {
		recs[w] = &recorder{lat: make([]time.Duration, 0, 4096)}
		wg.Go(func() {
			for ctx.Err() == nil && time.Now().Before(deadline) {
				t0 := time.Now()
				label, err := do(ctx, w)
				recs[w].add(time.Since(t0), label, err)
			}
		})
	}
	wg.Wait()
	return merge(time.Since(start), recs...)
}

// maxInFlight bounds an open loop's concurrent requests; past it, requests
// start late and their wait counts in their latency.
const maxInFlight = 4096

// openLoop starts requests at a constant rate for dur, whether or not the
// earlier ones have finished, and measures each from the moment it was due
// to start, so a stalled server shows in the tail instead of slowing the
// load down (no coordinated omission).
func openLoop(ctx context.Context, rate float64, dur time.Duration, do op) result {
	interval := time.Duration(float64(time.Second) / rate)
	total := int(dur.Seconds() * rate)
	rec := &recorder{lat: make([]time.Duration, 0, total)}
	lag := make([]time.Duration, total)
	sem := make(chan struct{}, maxInFlight)
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < total && ctx.Err() == nil; i++ {
		due := start.Add(time.Duration(i) * interval)
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			lag[i] = time.Since(due)
			label, err := do(ctx, i)
			rec.add(time.Since(due), label, err)
		})
	}
	wg.Wait()
	res := merge(time.Since(start), rec)
	slices.Sort(lag)
	res.lag = lag
	return res
}

// pooled is every run's samples as one result, for percentiles over all
// runs; its rate is meaningless.
func pooled(runs []result) result {
	recs := make([]*recorder, len(runs))
	for i, r := range runs {
		recs[i] = &recorder{lat: r.lat, status: r.status, err: r.err}
	}
	return merge(0, recs...)
}

// median of xs (xs is not changed).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
