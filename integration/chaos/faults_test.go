package chaos

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// kind is one sort of fault.
type kind int

const (
	killSigner kind = iota
	killSweeper
	killCompleter
	killNATS // the single server, or one node of the cluster
	killRedis
	stallNATS // SIGSTOP, then SIGCONT
	stallRedis
	scriptFlush
	numKinds
)

var kindNames = [numKinds]string{"kill-signer", "kill-sweeper", "kill-completer", "kill-nats", "kill-redis",
	"stall-nats", "stall-redis", "script-flush"}

func (k kind) String() string { return kindNames[k] }

// parseKinds reads -chaos.faults: "all", or a comma-separated list of kind
// names.
func parseKinds(s string) (map[kind]bool, error) {
	want := map[kind]bool{}
	for name := range strings.SplitSeq(s, ",") {
		name = strings.TrimSpace(name)
		found := false
		for k := range numKinds {
			if name == "all" || name == k.String() {
				want[k], found = true, true
			}
		}
		if !found {
			return nil, fmt.Errorf("-chaos.faults: %q is not all or one of %s", name, strings.Join(kindNames[:], ", "))
		}
	}
	return want, nil
}

// fault is one planned fault.
type fault struct {
	kind   kind
	gap    time.Duration // quiet time before it
	target int           // which signer, sweeper or NATS node
	dur    time.Duration // how long the process stays down or paused
}

func (f fault) String() string {
	switch f.kind {
	case killSigner, killSweeper, killNATS:
		return fmt.Sprintf("%s %d (down %v)", f.kind, f.target, f.dur.Round(time.Millisecond))
	case killCompleter, killRedis:
		return fmt.Sprintf("%s (down %v)", f.kind, f.dur.Round(time.Millisecond))
	case stallNATS:
		return fmt.Sprintf("%s %d (%v)", f.kind, f.target, f.dur.Round(time.Millisecond))
	case stallRedis:
		return fmt.Sprintf("%s (%v)", f.kind, f.dur.Round(time.Millisecond))
	}
	return f.kind.String()
}

// injected is a fault that ran: when, and for a signer kill the requests
// it may have cut between a token's spend and its URL, and their bytes.
type injected struct {
	fault
	start, end   time.Time // end: every service ready again
	exposed      int       // requests in flight at the killed signer, and cancels it held
	exposedBytes int64     // the contentLengths of those requests, and maxContentLength per cancel held
}

// schedule draws the plan's faults in a random order with random gaps,
// targets and durations. The first waits until grants fall due, so a
// killed sweeper holds some.
func schedule(rng *rand.Rand, p plan, topo topology, kinds map[kind]bool) []fault {
	var fs []fault
	for k := range numKinds {
		if !kinds[k] {
			continue
		}
		for range p.faults[k] {
			fs = append(fs, fault{kind: k})
		}
	}
	rng.Shuffle(len(fs), func(i, j int) { fs[i], fs[j] = fs[j], fs[i] })
	if p.grace < completerHold {
		// A completer killed while it holds events through a Redis outage
		// leaves them hidden for up to completerHold: with a shorter grace
		// the sweeper would refund those uploads. Kill it first instead.
		later := func(f fault) int {
			if f.kind == killCompleter {
				return 0
			}
			return 1
		}
		slices.SortStableFunc(fs, func(a, b fault) int { return cmp.Compare(later(a), later(b)) })
	}
	for i := range fs {
		f := &fs[i]
		f.gap = between(rng, p.gap)
		if i == 0 {
			f.gap += p.ttl + p.grace
		}
		switch f.kind {
		case killSigner, killSweeper:
			f.target = rng.IntN(2)
		case killNATS, stallNATS:
			f.target = rng.IntN(topo.replicas)
		}
		switch f.kind {
		case stallNATS, stallRedis:
			f.dur = between(rng, p.stall)
		case scriptFlush:
		default:
			f.dur = between(rng, p.down)
		}
	}
	return fs
}

// completerHold is how long the completer keeps the SQS messages it holds
// through a Redis outage invisible (completer/consume.go, holdVisibility):
// were it killed meanwhile, their events would land that much later.
const completerHold = 30 * time.Second

func between(rng *rand.Rand, r [2]time.Duration) time.Duration {
	return r[0] + time.Duration(rng.Int64N(int64(r[1]-r[0])+1))
}

// countKinds is "kill signer ×2, …" in kind order.
func countKinds(fs []fault) string {
	var n [numKinds]int
	for _, f := range fs {
		n[f.kind]++
	}
	var parts []string
	for k, c := range n {
		if c > 0 {
			parts = append(parts, fmt.Sprintf("%s ×%d", kind(k), c))
		}
	}
	return strings.Join(parts, ", ")
}

// runFaults injects the faults one after the other, each after its gap,
// and waits after each until every service is ready again. It runs on the
// test's goroutine: restarting a server may fail the test.
func runFaults(ctx context.Context, t *testing.T, st *stack, ld *load, faults []fault, began time.Time) []injected {
	t.Helper()
	var out []injected
	for i, f := range faults {
		select {
		case <-ctx.Done():
			t.Errorf("%s: the soak's deadline passed with %d of %d faults run", st.topo.name, i, len(faults))
			return out
		case <-time.After(f.gap):
		}
		in := injected{fault: f, start: time.Now()}
		in.exposed, in.exposedBytes = st.inject(ctx, t, ld, f)
		st.ensureUp(t)
		in.end = time.Now()
		t.Logf("%s: %6.1fs %-28s recovered in %v", st.topo.name, in.start.Sub(began).Seconds(), f, in.end.Sub(in.start).Round(time.Millisecond))
		out = append(out, in)
	}
	return out
}

// inject applies one fault and undoes it (restart, SIGCONT). For a signer
// kill it returns the requests that were in flight at that signer, with
// the cancels it held, and their bytes: a held cancel's contentLength is
// not known, so it counts as maxContentLength.
func (st *stack) inject(ctx context.Context, t *testing.T, ld *load, f fault) (exposed int, exposedBytes int64) {
	t.Helper()
	switch f.kind {
	case scriptFlush:
		if err := st.rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Logf("SCRIPT FLUSH: %v", err)
		}
	case stallNATS, stallRedis:
		p := st.target(f)
		p.Pause()
		time.Sleep(f.dur)
		p.Resume()
	default:
		p := st.target(f)
		if f.kind == killSweeper {
			st.rescued += rescuesIn(st.sweepers[f.target].Output()) // its log goes with it
		}
		if f.kind != killSigner {
			p.Kill()
		} else {
			fl := ld.flights[f.target]
			// A cancel it still holds (a spend cut by a stalled or killed
			// Redis, answered 503) dies with it: its token is at risk too.
			held := st.cancelsPending(t, f.target)
			before := fl.snapshot()
			p.Kill()
			cut, cutBytes := before.cutBy(fl.snapshot())
			exposed, exposedBytes = cut+held, cutBytes+int64(held)*maxContentLength
		}
		time.Sleep(f.dur)
		p.Start() // services: until ready; servers: until they answer
	}
	return exposed, exposedBytes
}

// cancelsPending reads signer i's held cancels; 0 when it does not answer
// (it may be down already, or starting).
func (st *stack) cancelsPending(t *testing.T, i int) int {
	t.Helper()
	resp, err := http.Get(st.signers[i].OpsURL + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return 0
	}
	fam, ok := fams["mintgate_signer_cancels_pending"]
	if !ok || len(fam.GetMetric()) == 0 {
		return 0
	}
	return int(fam.GetMetric()[0].GetGauge().GetValue())
}

// process is what a fault does to a server or a service.
type process interface {
	Kill()
	Start()
	Pause()
	Resume()
}

// target is the process a kill or a stall hits.
func (st *stack) target(f fault) process {
	switch f.kind {
	case killSigner:
		return st.signers[f.target]
	case killSweeper:
		return st.sweepers[f.target]
	case killCompleter:
		return st.completer
	case killNATS, stallNATS:
		return st.nats[f.target]
	}
	return st.redis
}
