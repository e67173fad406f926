package main

import (
	"cmp"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of /proc's CPU times (USER_HZ, 100 on every Linux
// the bench runs on).
const clockTick = 10 * time.Millisecond

// cpuSample is the CPU time each process had used at one moment, and the
// machine's busy and total time, all from /proc.
type cpuSample struct {
	byProc      map[string]time.Duration
	busy, total time.Duration
}

// cpuUse is what a run cost: CPU time by process, and how busy the machine
// was (0 to 1) while it ran.
type cpuUse struct {
	byProc map[string]time.Duration
	busy   float64
	// redisCommands is Redis's time running scripts and transactions
	// (INFO commandstats, by the wall clock; commandTime), 0 for a row that
	// ran none.
	redisCommands time.Duration
}

// benchProc names the bench's own process in CPU accounts: the load
// generator, and the Redis and ledger clients of the rows without HTTP.
const benchProc = "bench (load, clients)"

// sampleCPU reads the CPU time of the bench and of every server of f.
// A process that cannot be read (it exited) is left out.
func (f *fleet) sampleCPU() cpuSample {
	s := cpuSample{byProc: make(map[string]time.Duration, len(f.procs)+1)}
	if d, err := procCPU("/proc/self/stat"); err == nil {
		s.byProc[benchProc] = d
	}
	for _, p := range f.procs {
		if d, err := procCPU(fmt.Sprintf("/proc/%d/stat", p.PID())); err == nil {
			s.byProc[p.Name] = d
		}
	}
	s.busy, s.total, _ = machineCPU()
	return s
}

// since is the CPU use between an earlier sample and s.
func (s cpuSample) since(before cpuSample) cpuUse {
	u := cpuUse{byProc: make(map[string]time.Duration, len(s.byProc))}
	for name, d := range s.byProc {
		if b, ok := before.byProc[name]; ok && d > b {
			u.byProc[name] = d - b
		}
	}
	if t := s.total - before.total; t > 0 {
		u.busy = float64(s.busy-before.busy) / float64(t)
	}
	return u
}

// procCPU is a process's user and system time from its /proc stat file.
func procCPU(path string) (time.Duration, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: fields count
	// from after its closing one (state is field 3, utime 14, stime 15).
	_, rest, ok := strings.Cut(string(b), ") ")
	if !ok {
		return 0, fmt.Errorf("%s: no command name", path)
	}
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0, fmt.Errorf("%s: %d fields", path, len(f))
	}
	return ticks(f[11], f[12])
}

// machineCPU is the time all cores spent busy, and in all, from /proc/stat.
func machineCPU() (busy, total time.Duration, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	// user nice system idle iowait irq softirq steal
	if total, err = ticks(f[1:9]...); err != nil {
		return 0, 0, err
	}
	idle, err := ticks(f[4], f[5])
	return total - idle, total, err
}

// ticks adds clock-tick counts.
func ticks(fields ...string) (time.Duration, error) {
	var n int64
	for _, s := range fields {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("clock ticks %q: %w", s, err)
		}
		n += v
	}
	return time.Duration(n) * clockTick, nil
}

// cpuPerOp is what one operation of m cost each process, over all its runs
// (the process's CPU time ÷ the operations completed), and how busy the
// machine was on average.
func cpuPerOp(m *measurement) (per map[string]time.Duration, scripts time.Duration, busy float64) {
	per = make(map[string]time.Duration)
	n := 0
	for _, r := range m.runs {
		n += r.n
		busy += r.cpu.busy
		scripts += r.cpu.redisCommands
		for name, d := range r.cpu.byProc {
			per[name] += d
		}
	}
	if n == 0 || len(m.runs) == 0 {
		return nil, 0, 0
	}
	for name := range per {
		per[name] /= time.Duration(n)
	}
	return per, scripts / time.Duration(n), busy / float64(len(m.runs))
}

// cpuOf is what one operation of m cost the named processes together, in
// µs: over all its runs (the processes' CPU time ÷ the operations
// completed), and run by run, for the spread.
func cpuOf(m *measurement, procs ...string) (all float64, perRun []float64) {
	var sum time.Duration
	n := 0
	for _, r := range m.runs {
		var d time.Duration
		for _, p := range procs {
			d += r.cpu.byProc[p]
		}
		sum += d
		n += r.n
		if r.n > 0 {
			perRun = append(perRun, float64(d)/float64(r.n)/float64(time.Microsecond))
		}
	}
	if n == 0 {
		return 0, perRun
	}
	return float64(sum) / float64(n) / float64(time.Microsecond), perRun
}

// cpuTable says, for each closed-loop row, what one operation cost each
// process and so how many operations the machine's cores could do at
// most, if nothing but that row ran and every core were busy: the
// ceiling that the rows' ratios are measured against.
func cpuTable(rows []*measurement, cores int) []string {
	out := []string{
		fmt.Sprintf("| CPU per operation, by process (all runs of the row: the process's CPU time ÷ operations completed) | by process | of it, Redis in scripts and transactions (INFO commandstats: wall time, so above Redis's CPU when it waited for a core) | all processes | machine busy | ceiling on %d cores (%d s of CPU a second ÷ all processes) |", cores, cores),
		"|---|---|--:|--:|--:|--:|",
	}
	for _, m := range rows {
		per, scripts, busy := cpuPerOp(m)
		if per == nil {
			continue
		}
		var total time.Duration
		for _, d := range per {
			total += d
		}
		names := slices.SortedFunc(maps.Keys(per), func(a, b string) int { return cmp.Compare(per[b], per[a]) })
		var parts []string
		for _, name := range names {
			// Servers idle in this row cost a few µs of CPU a second:
			// below a twentieth of a µs an operation, they are left out.
			if per[name] >= 50*time.Nanosecond {
				parts = append(parts, name+" "+fmtDur(per[name]))
			}
		}
		ceiling := "—"
		if total > 0 {
			ceiling = fmtRate(float64(cores) * float64(time.Second) / float64(total))
		}
		out = append(out, fmt.Sprintf("| %s · %s | %s | %s | %s | %.0f %% | %s |", m.name, m.load, strings.Join(parts, " · "), fmtDur(scripts), fmtDur(total), 100*busy, ceiling))
	}
	return out
}
