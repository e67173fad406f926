package chaos

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

var (
	longFlag   = flag.Bool("chaos.long", false, "run the long soak (make chaos): at least 10 kills of every process kind per topology")
	seedFlag   = flag.Uint64("chaos.seed", 0, "seed of the fault schedule and of the requests; 0 picks one, printed at start")
	topoFlag   = flag.String("chaos.topology", "both", "which ledger to run against: single, r3 or both")
	faultsFlag = flag.String("chaos.faults", "all", "the kinds of fault to inject: all, or a comma-separated list such as stall-nats,kill-signer")
)

// plan is the shape of one soak: its load, its timings and its faults.
type plan struct {
	name    string
	clients int // goroutines signing in a loop
	users   int // spread over the tenants
	tenants int
	think   time.Duration // longest pause between one client's requests

	ttl, grace time.Duration // MINTGATE_URL_TTL, MINTGATE_SWEEP_GRACE
	mpTTL      time.Duration // MINTGATE_MULTIPART_TTL: a multipart grant's life
	visibility time.Duration // the SQS queue's, well below grace
	doneTTL    time.Duration // above the whole run and quota.MarkerTTL, so no done marker expires before the check and its TTL tells when it was set

	faults   map[kind]int     // how many of each
	gap      [2]time.Duration // quiet time before each fault, drawn in this range
	down     [2]time.Duration // how long a killed process stays down
	stall    [2]time.Duration // how long a paused process stays paused
	tail     time.Duration    // load after the last fault, so some grants fall due with nothing failing
	settle   time.Duration    // after every grant is due: how long refunds may still take
	deadline time.Duration    // the whole soak of one topology, a guard against a hang
}

// Stalls last longer than the signer's 2 s ledger publish timeout: that is
// what makes a signer give up on a publish the server stores when it
// resumes.
var shortPlan = plan{
	name: "short", clients: 6, users: 60, tenants: 3, think: 20 * time.Millisecond,
	ttl: 3 * time.Second, grace: 4 * time.Second, mpTTL: 3 * time.Second, visibility: time.Second, doneTTL: 25 * time.Hour,
	faults: map[kind]int{
		killSigner: 2, killSweeper: 1, killCompleter: 1, killNATS: 1, killRedis: 1,
		stallNATS: 2, stallRedis: 1, scriptFlush: 1,
	},
	gap:  [2]time.Duration{200 * time.Millisecond, 700 * time.Millisecond},
	down: [2]time.Duration{200 * time.Millisecond, time.Second}, stall: [2]time.Duration{2500 * time.Millisecond, 3500 * time.Millisecond},
	tail: 3 * time.Second, settle: 45 * time.Second, deadline: 3 * time.Minute,
}

var longPlan = plan{
	name: "long", clients: 8, users: 400, tenants: 4, think: 20 * time.Millisecond,
	// A grace above the completer's hold (see completerHold), so any
	// order of faults is fair game.
	ttl: 5 * time.Second, grace: 40 * time.Second, mpTTL: 5 * time.Second, visibility: time.Second, doneTTL: 27 * time.Hour,
	faults: map[kind]int{
		killSigner: 12, killSweeper: 12, killCompleter: 12, killNATS: 12, killRedis: 12,
		stallNATS: 10, stallRedis: 8, scriptFlush: 6,
	},
	gap:  [2]time.Duration{time.Second, 5 * time.Second},
	down: [2]time.Duration{200 * time.Millisecond, 2 * time.Second}, stall: [2]time.Duration{2 * time.Second, 4 * time.Second},
	tail: 10 * time.Second, settle: 90 * time.Second, deadline: 40 * time.Minute,
}

// topology is the ledger's shape.
type topology struct {
	name     string
	replicas int // nats-server nodes, and replicas of the ledger stream
}

var topologies = []topology{{"single", 1}, {"r3", 3}}

// TestChaos runs the soak against a single nats-server and against a
// three-node cluster. The short form runs both at once (it must fit in
// two minutes); the long one runs them one after the other.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("the chaos soak starts a whole stack; skipped with -short")
	}
	p := shortPlan
	if *longFlag {
		p = longPlan
	}
	kinds, err := parseKinds(*faultsFlag)
	if err != nil {
		t.Fatal(err)
	}
	seed := *seedFlag
	if seed == 0 {
		seed = rand.Uint64() % 1_000_000
	}
	t.Logf("chaos %s: seed %d (repeat with -chaos.seed=%d)", p.name, seed, seed)
	for _, topo := range topologies {
		if *topoFlag != "both" && *topoFlag != topo.name {
			continue
		}
		t.Run(topo.name, func(t *testing.T) {
			if !*longFlag {
				t.Parallel()
			}
			soak(t, p, topo, seed, kinds)
		})
	}
}

// soak starts the stack, runs the load and the faults, lets every grant
// fall due and checks the invariants. The seed and the topology decide
// every fault and every request.
func soak(t *testing.T, p plan, topo topology, seed uint64, kinds map[kind]bool) {
	rng := rand.New(rand.NewPCG(seed, uint64(topo.replicas)))
	faults := schedule(rng, p, topo, kinds)
	t.Logf("%s: %d faults planned: %s", topo.name, len(faults), countKinds(faults))

	began := time.Now()
	st := startStack(t, p, topo, seed)
	t.Logf("%s: stack ready in %v", topo.name, time.Since(began).Round(time.Millisecond))

	ctx, cancel := context.WithTimeout(context.Background(), p.deadline)
	defer cancel()
	dls := startDownloads(ctx, st)
	t.Cleanup(func() { dls.stop() })
	ld := startLoad(ctx, t, st, p, seed, dls)
	t.Cleanup(ld.stop) // on a failure below, the clients still end before the servers

	loadStart := time.Now()
	// Halfway through the faults, a tenant's tier changes under the load.
	var planned time.Duration
	for _, f := range faults {
		planned += f.gap + f.dur
	}
	tiers := time.AfterFunc(planned/2, func() { st.changeTiers(t) })
	defer tiers.Stop()
	done := runFaults(ctx, t, st, ld, faults, loadStart)
	lastFault := loadStart
	if len(done) > 0 {
		lastFault = done[len(done)-1].end
	}
	time.Sleep(time.Until(lastFault.Add(p.tail)))
	ld.stop()
	loadStop := time.Now()
	t.Logf("%s: load ran %v, %d faults", topo.name, loadStop.Sub(loadStart).Round(time.Second), len(done))
	st.ensureUp(t)

	res := ld.result()
	settled := st.settle(ctx, t, res, loadStop)
	r := check(ctx, t, st, res, dls.stop(), done, loadStart, lastFault)
	r.seed, r.settled, r.elapsed = seed, settled, time.Since(began)
	t.Logf("%s\n%s", topo.name, r.table())
	if r.failed() {
		again := fmt.Sprintf("-chaos.seed=%d -chaos.topology=%s", seed, topo.name)
		if *longFlag {
			again += " -chaos.long"
		}
		if *faultsFlag != "all" {
			again += " -chaos.faults=" + *faultsFlag
		}
		t.Errorf("%s: invariants failed (repeat with %s)", topo.name, again)
	}
}
