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
