package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// allocCounter reads the signer's own runtime counters around each run:
// heap allocations and bytes per 201, the whole process's (HTTP server,
// Redis and NATS clients, GC) divided by the signs it issued.
type allocCounter struct {
	mu            sync.Mutex
	allocs, bytes []float64
	failed        error
}

// around wraps a row's run with the counter; reset drops what the warm-up
// counted.
func (a *allocCounter) around(s *signer, client *http.Client, do func(context.Context, time.Duration) result) func(context.Context, time.Duration) result {
	return func(ctx context.Context, d time.Duration) result {
		m0, err0 := s.metric(ctx, client, "go_memstats_mallocs_total")
		b0, err1 := s.metric(ctx, client, "go_memstats_alloc_bytes_total")
		res := do(ctx, d)
		m1, err2 := s.metric(ctx, client, "go_memstats_mallocs_total")
		b1, err3 := s.metric(ctx, client, "go_memstats_alloc_bytes_total")
		a.mu.Lock()
		defer a.mu.Unlock()
		if n := res.status["201"]; n > 0 {
			if err := firstErr(err0, err1, err2, err3); err != nil {
				a.failed = err
			} else {
				a.allocs = append(a.allocs, (m1-m0)/float64(n))
				a.bytes = append(a.bytes, (b1-b0)/float64(n))
			}
		}
		return res
	}
}

func (a *allocCounter) reset() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.allocs, a.bytes = nil, nil
}

func (a *allocCounter) note() string {
	if len(a.allocs) == 0 {
		return fmt.Sprintf("**allocations per sign**: not measured (%v)", a.failed)
	}
	return fmt.Sprintf("**allocations per sign** (the signer process's go_memstats_mallocs_total and _alloc_bytes_total over its saturation runs ÷ 201s, durable ledger): "+
		"%.0f allocs, %.1f KiB (runs: %s allocs)", median(a.allocs), median(a.bytes)/1024, fmtRange(a.allocs, ""))
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// lagNote says how late the open loop's generator started requests: on a
// starved machine that lateness is in the latencies too.
func lagNote(m *measurement) string {
	var all []time.Duration
	for _, r := range m.runs {
		all = append(all, r.lag...)
	}
	slices.Sort(all)
	lag := result{lat: all}
	return fmt.Sprintf("Open loop %q: the load generator itself started its requests late by p50 %s, p99 %s, max %s (part of the latencies above).",
		m.name, fmtDur(lag.pct(0.5)), fmtDur(lag.pct(0.99)), fmtDur(lag.pct(1)))
}

// keepLogs copies the servers' logs from dir into dst, replacing the
// last run's.
func keepLogs(dir, dst string) {
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	if len(logs) == 0 || os.RemoveAll(dst) != nil || os.MkdirAll(dst, 0o755) != nil {
		return
	}
	for _, l := range logs {
		if b, err := os.ReadFile(l); err == nil {
			_ = os.WriteFile(filepath.Join(dst, filepath.Base(l)), b, 0o644)
		}
	}
}

// errorNotes names the first error of every row that had any.
func errorNotes(rows []*measurement) []string {
	var out []string
	for _, m := range rows {
		for _, r := range m.runs {
			if r.err != nil {
				out = append(out, fmt.Sprintf("first error of %q: %v", m.name, r.err))
				break
			}
		}
	}
	return out
}

func callerCounts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, "/")
}

// loadavg is /proc/loadavg's three load averages.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// cpuModel is /proc/cpuinfo's first model name.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "?"
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

// commit is HEAD's short hash, +dirty with uncommitted changes.
func (b *bench) commit() string {
	out, err := exec.Command("git", "-C", b.root, "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "?"
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "-C", b.root, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		c += "+dirty"
	}
	return c
}
