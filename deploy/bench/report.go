package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// measurement is one row of the table: what runs, under which load, and
// its runs once done.
type measurement struct {
	name string
	load string
	dur  time.Duration
	do   func(ctx context.Context, d time.Duration) result
	// warmed, if set, runs after the warm-up, before the recorded runs.
	warmed func()
	runs   []result
}

func (m *measurement) rates() []float64 {
	out := make([]float64, len(m.runs))
	for i, r := range m.runs {
		out[i] = r.rate()
	}
	return out
}

func (m *measurement) rate() float64 { return median(m.rates()) }

// p99s is each run's p99, in milliseconds.
func (m *measurement) p99s() []float64 {
	out := make([]float64, len(m.runs))
	for i, r := range m.runs {
		out[i] = ms(r.pct(0.99))
	}
	return out
}

// bar is one "Done when" bar of issues 8 and 9, checked against this run.
type bar struct {
	what   string
	issue  int
	value  float64
	spread []float64 // per-round values, when the bar compares runs of one round
	want   string
	unit   string // "×", "/s", "ms"
	pass   bool
	info   bool // printed for reference, no bar
}

// ratio is a ÷ b: the ratio of the medians, and per round the ratio of the
// two runs of that round (interleaved, so they saw the same machine).
func ratio(a, b *measurement) (float64, []float64) {
	var per []float64
	for i := range min(len(a.runs), len(b.runs)) {
		if r := b.runs[i].rate(); r > 0 {
			per = append(per, a.runs[i].rate()/r)
		}
	}
	if b.rate() == 0 {
		return 0, per
	}
	return a.rate() / b.rate(), per
}

// report is everything the bench prints.
type report struct {
	header []string
	rows   []*measurement
	// headline is what a user pays for one sign (issue 22): CPU by
	// process at saturation and the tail at half of it.
	headline []bar
	bars     []bar
	profile  []string // the CPU profile table, when taken
	cpu      []string // the CPU-per-operation table
	notes    []string
}

func (rp *report) write(w io.Writer) {
	fmt.Fprintln(w, "# mintgate bench")
	fmt.Fprintln(w)
	for _, h := range rp.header {
		fmt.Fprintln(w, h)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| measurement | load | rate | spread (runs) | p50 | p99 | p999 | status split |")
	fmt.Fprintln(w, "|---|---|--:|---|--:|--:|--:|---|")
	for _, m := range rp.rows {
		all := pooled(m.runs)
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n",
			m.name, m.load, fmtRate(m.rate()), spread(m), fmtDur(all.pct(0.5)), fmtDur(all.pct(0.99)), fmtDur(all.pct(0.999)), split(all.status))
	}
	fmt.Fprintln(w)
	for _, bars := range [][]bar{rp.headline, rp.bars} {
		if len(bars) == 0 {
			continue
		}
		fmt.Fprintln(w, "| bar | issue | this run | per round | wanted | verdict |")
		fmt.Fprintln(w, "|---|--:|--:|---|---|---|")
		for _, b := range bars {
			verdict := "FAIL"
			switch {
			case b.info:
				verdict = "(no bar)"
			case b.pass:
				verdict = "PASS"
			}
			fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s |\n", b.what, b.issue, fmtValue(b.value, b.unit), fmtRange(b.spread, b.unit), b.want, verdict)
		}
		fmt.Fprintln(w)
	}
	for _, table := range [][]string{rp.cpu, rp.profile} {
		if len(table) == 0 {
			continue
		}
		for _, l := range table {
			fmt.Fprintln(w, l)
		}
		fmt.Fprintln(w)
	}
	for _, n := range rp.notes {
		fmt.Fprintln(w, "- "+n)
	}
}

// spread is the lowest–highest run of the rate and of the p99.
func spread(m *measurement) string {
	if len(m.runs) < 2 {
		return "1 run"
	}
	return fmt.Sprintf("%s; p99 %s", fmtRange(m.rates(), "/s"), fmtRange(m.p99s(), "ms"))
}

func fmtRange(xs []float64, unit string) string {
	if len(xs) == 0 {
		return "—"
	}
	lo, hi := slices.Min(xs), slices.Max(xs)
	switch unit {
	case "/s":
		return strings.TrimSuffix(fmtRate(lo), "/s") + "–" + fmtRate(hi)
	case "ms":
		return fmtValue(lo, unit) + "–" + fmtValue(hi, unit)
	}
	return fmtValue(lo, "") + "–" + fmtValue(hi, unit)
}

func fmtValue(v float64, unit string) string {
	switch unit {
	case "/s":
		return fmtRate(v)
	case "ms":
		return fmtDur(time.Duration(v * float64(time.Millisecond)))
	case "×":
		return fmt.Sprintf("%.2f×", v)
	}
	return sig3(v) + unit
}

func fmtRate(r float64) string {
	if r >= 1000 {
		return sig3(r/1000) + "k/s"
	}
	return sig3(r) + "/s"
}

func fmtDur(d time.Duration) string {
	switch {
	case d <= 0:
		return "—"
	case d < time.Millisecond:
		return sig3(float64(d)/float64(time.Microsecond)) + " µs"
	case d < time.Second:
		return sig3(ms(d)) + " ms"
	}
	return sig3(d.Seconds()) + " s"
}

// sig3 prints three significant digits at most.
func sig3(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// split is the status labels by share, the largest first.
func split(status map[string]int) string {
	total := 0
	for _, n := range status {
		total += n
	}
	labels := slices.SortedFunc(maps.Keys(status), func(a, b string) int {
		return cmp.Or(cmp.Compare(status[b], status[a]), strings.Compare(a, b))
	})
	parts := make([]string, len(labels))
	for i, l := range labels {
		parts[i] = fmt.Sprintf("%s %s %%", l, sig3(100*float64(status[l])/float64(total)))
	}
	return strings.Join(parts, " · ")
}
