package main

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// The figures the table prints: a wrong percentile or ratio would report a
// bar as passed that is not.
func TestPercentilesAndRatios(t *testing.T) {
	rec := &recorder{}
	for i := 1; i <= 1000; i++ {
		rec.add(time.Duration(i)*time.Millisecond, "201", nil)
	}
	r := merge(time.Second, rec)
	for q, want := range map[float64]time.Duration{0.5: 500 * time.Millisecond, 0.99: 990 * time.Millisecond, 0.999: 999 * time.Millisecond, 1: time.Second} {
		if got := r.pct(q); got != want {
			t.Errorf("pct(%v) = %v, want %v", q, got, want)
		}
	}
	if r.rate() != 1000 {
		t.Errorf("rate %v, want 1000/s", r.rate())
	}

	run := func(n int) result { return result{n: n, elapsed: time.Second} }
	a := &measurement{runs: []result{run(100), run(300), run(200)}}
	b := &measurement{runs: []result{run(400), run(400), run(1000)}}
	got, per := ratio(a, b)
	if got != 0.5 { // medians 200 / 400
		t.Errorf("ratio %v, want 0.5", got)
	}
	if len(per) != 3 || per[0] != 0.25 || per[1] != 0.75 || per[2] != 0.2 {
		t.Errorf("per-round ratios %v, want [0.25 0.75 0.2]", per)
	}
}

func TestStatusSplitAndErrors(t *testing.T) {
	rec := &recorder{}
	for range 85 {
		rec.add(time.Millisecond, "201", nil)
	}
	for range 10 {
		rec.add(time.Millisecond, "429", nil)
	}
	for range 5 {
		rec.add(time.Millisecond, "", errors.New("connection refused"))
	}
	r := merge(time.Second, rec)
	if got, want := split(r.status), "201 85.0 % · 429 10.0 % · error 5.00 %"; got != want {
		t.Errorf("split %q, want %q", got, want)
	}
	if r.err == nil || !strings.Contains(r.err.Error(), "refused") {
		t.Errorf("first error %v", r.err)
	}
}

func TestScanMetric(t *testing.T) {
	text := "# HELP go_memstats_mallocs_total Total number of heap objects allocated.\n" +
		"# TYPE go_memstats_mallocs_total counter\n" +
		"go_memstats_mallocs_total 1.234567e+06\n" +
		"go_memstats_mallocs_total_other 1\n"
	v, found, err := scanMetric(strings.NewReader(text), "go_memstats_mallocs_total")
	if err != nil || !found || v != 1234567 {
		t.Errorf("scanMetric = %v, %v, %v; want 1234567", v, found, err)
	}
	if _, found, _ := scanMetric(strings.NewReader(text), "go_memstats_frees_total"); found {
		t.Error("found a metric that is not there")
	}
}

// The CPU table divides each process's CPU time by the operations of all
// runs: a wrong division would show a ceiling the machine cannot reach.
func TestCPUPerOperation(t *testing.T) {
	run := func(n int, bench, redis time.Duration, busy float64) result {
		return result{n: n, elapsed: time.Second, cpu: cpuUse{byProc: map[string]time.Duration{benchProc: bench, "redis": redis}, busy: busy, redisCommands: redis / 2}}
	}
	m := &measurement{name: "row", load: "50 callers", runs: []result{
		run(1000, 20*time.Millisecond, 10*time.Millisecond, 1),
		run(3000, 60*time.Millisecond, 30*time.Millisecond, 0.5),
	}}
	per, scripts, busy := cpuPerOp(m)
	if per[benchProc] != 20*time.Microsecond || per["redis"] != 10*time.Microsecond || scripts != 5*time.Microsecond || busy != 0.75 {
		t.Fatalf("per op %v, scripts %v, busy %v; want bench 20µs, redis 10µs, scripts 5µs, busy 0.75", per, scripts, busy)
	}
	// The headline's figure: the named processes together, over all runs
	// and run by run.
	all, perRun := cpuOf(m, benchProc, "redis")
	if all != 30 || len(perRun) != 2 || perRun[0] != 30 || perRun[1] != 30 {
		t.Errorf("cpuOf = %v, %v; want 30 µs, [30 30]", all, perRun)
	}
	if all, _ := cpuOf(m, "redis"); all != 10 {
		t.Errorf("cpuOf(redis) = %v; want 10 µs", all)
	}
	table := cpuTable([]*measurement{m}, 2)
	want := "| row · 50 callers | bench (load, clients) 20.0 µs · redis 10.0 µs | 5.00 µs | 30.0 µs | 75 % | 66.7k/s |"
	if len(table) != 3 || table[2] != want {
		t.Errorf("table row\n%q\nwant\n%q", table[len(table)-1], want)
	}
}

// The bench's own CPU time grows while it works, read from /proc.
func TestSampleCPU(t *testing.T) {
	f := &fleet{}
	before := f.sampleCPU()
	deadline := time.Now().Add(50 * time.Millisecond)
	for x := 0; time.Now().Before(deadline); x++ {
		_ = x * x
	}
	u := f.sampleCPU().since(before)
	if u.byProc[benchProc] <= 0 {
		t.Errorf("bench used %v of CPU while spinning 50 ms", u.byProc[benchProc])
	}
	if u.busy <= 0 || u.busy > 1 {
		t.Errorf("machine busy %v, want in (0, 1]", u.busy)
	}
}
