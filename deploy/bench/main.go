// Command bench is `make bench`: it builds the signer, starts real servers
// on free loopback ports — redis-server, a nats-server that syncs every
// write (sync_interval: always) and one that syncs lazily, the signer
// binary on each, and an echo handler answering a fixed 201 in a process of
// its own — drives them with its own load generator and prints one
// side-by-side table from one run, also written to artifacts/bench.md:
//
//   - Redis GET, go-redis/redis_rate Allow (one key, many keys) and
//     mintgate's decision script, 50 callers each;
//   - the echo handler and the signer end to end at saturation (50 callers,
//     keep-alive), the signer once per ledger server;
//   - the signer offered half of its saturation at a constant arrival rate;
//   - a realistic mix: many users of a few tenants, replays and 429s;
//   - ledger.Client.Record alone with 1, 64 and 512 callers on each server;
//   - allocations per sign, from the signer's own runtime counters.
//
// Every measurement runs several times, interleaved with the ones it is
// compared with, and the spread is printed. The PASS/FAIL column states
// the bars of issues 8 and 9; the bench never fails because of them. Last,
// it takes a CPU profile of each signer at saturation
// (artifacts/signer-cpu-{always,lazy}.pprof and a -top.txt beside each).
//
//	deploy/local/bench.sh            # or: make bench
//	go run ./deploy/bench -quick     # one short run of each, to try it out
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// The first Ctrl-C stops the runs and every server by PID; a second one
	// ends the bench at once (the kernel then kills the servers).
	go func() { <-ctx.Done(); stop() }()
	if err := run(ctx, os.Args, os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// plan is how long and how often everything runs.
type plan struct {
	reps          int
	callers       int           // closed-loop callers of the Redis and HTTP rows
	ledgerCallers []int         // concurrent Record callers
	redisDur      time.Duration // one run of a Redis row
	httpDur       time.Duration // one saturation run of an HTTP row
	openDur       time.Duration // one open-loop run
	ledgerDur     time.Duration // one run of a ledger row
	warm          time.Duration // unrecorded run before each row's first
	profileDur    time.Duration // the signer's CPU profile
}

// defaultPlan keeps make bench within about four minutes on two cores.
var defaultPlan = plan{
	reps: 3, callers: 50, ledgerCallers: []int{1, 64, 512},
	redisDur: 2 * time.Second, httpDur: 3 * time.Second, openDur: 4 * time.Second, ledgerDur: 2 * time.Second,
	warm: 500 * time.Millisecond, profileDur: 5 * time.Second,
}

// quickPlan is one short run of each, for working on the bench itself.
var quickPlan = plan{
	reps: 1, callers: 50, ledgerCallers: []int{1, 64, 512},
	redisDur: 500 * time.Millisecond, httpDur: 500 * time.Millisecond, openDur: time.Second, ledgerDur: 500 * time.Millisecond,
	warm: 200 * time.Millisecond, profileDur: 2 * time.Second,
}

// run reads the flags and runs the bench, or with -serve-echo serves the
// echo handler (the bench starts itself that way).
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	echoAddr := fs.String("serve-echo", "", "serve the fixed-201 echo handler on this address (the bench starts itself so)")
	out := fs.String("out", "artifacts/bench.md", "also write the table here, relative to the module root ('' skips)")
	profiles := fs.String("profiles", "artifacts", "folder for CPU profiles of both signers at saturation, relative to the module root ('' skips)")
	signerBin := fs.String("signer", "", "a built signer binary (default: go build ./signer into a temporary folder)")
	quick := fs.Bool("quick", false, "one short run of each measurement, to try the bench out")
	reps := fs.Int("reps", 0, "runs of each measurement (default 3, or 1 with -quick)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *echoAddr != "" {
		return serveEcho(ctx, *echoAddr)
	}
	p := defaultPlan
	if *quick {
		p = quickPlan
	}
	if *reps > 0 {
		p.reps = *reps
	}
	b := &bench{plan: p, getenv: getenv, stdout: stdout, progress: stderr, out: *out, profiles: *profiles, signerBin: *signerBin}
	return b.run(ctx)
}
