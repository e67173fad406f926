package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/proc"
)

// bench is one run of make bench.
type bench struct {
	plan      plan
	getenv    func(string) string
	stdout    io.Writer // the table
	progress  io.Writer // what runs now
	out       string
	profiles  string
	signerBin string

	root   string
	fleet  *fleet
	client *http.Client // every HTTP row's: keep-alive, one connection per caller
	rdb    *redis.Client
}

// servers is what the bench started.
type servers struct {
	redisAddr            string
	natsAlways, natsLazy string
	echoBase             string
	always, lazy, mixed  *signer
	versions             string
}

func (b *bench) run(ctx context.Context) error {
	var err error
	if b.root, err = proc.Root(); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "mintgate-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// The servers' logs outlive the run: a 503 in the table is explained there.
	defer keepLogs(dir, filepath.Join(b.root, "artifacts", "bench-logs"))
	b.fleet = &fleet{dir: dir}
	defer b.fleet.stop()

	start := time.Now()
	loadStart := loadavg()
	srv, err := b.startServers(ctx, dir)
	if err != nil {
		return err
	}
	b.rdb = redis.NewClient(&redis.Options{Addr: srv.redisAddr, PoolSize: 2 * b.plan.callers, MinIdleConns: b.plan.callers})
	defer b.rdb.Close()
	if err := b.rdb.Set(ctx, "bench:get", "mintgate", 0).Err(); err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	b.client = &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			MaxIdleConns: 4096, MaxIdleConnsPerHost: 1024, IdleConnTimeout: 2 * time.Minute, DisableCompression: true,
		},
	}
	defer b.client.CloseIdleConnections()

	rp := &report{}
	allocs, err := b.sideBySide(ctx, srv, rp)
	if err != nil {
		return err
	}
	loadMid := loadavg()
	if err := b.openLoops(ctx, srv, rp); err != nil {
		return err
	}
	if err := b.ledger(ctx, srv, rp); err != nil {
		return err
	}
	if b.profiles != "" {
		if err := b.profileSigners(ctx, rp, srv.always, srv.lazy); err != nil {
			return err
		}
	}
	return b.finish(rp, srv, allocs, start, [3]string{loadStart, loadMid, loadavg()})
}

// finish writes the table with what it was measured on: the header, the
// notes, then rp; to stdout and, with -out, to a file.
func (b *bench) finish(rp *report, srv servers, allocs string, start time.Time, loads [3]string) error {
	rp.header = []string{
		fmt.Sprintf("One run of `make bench`, %s, commit %s, %s. Every row: %d run(s), interleaved with the rows it is compared with (the order rotates each round); "+
			"Redis rows %v a run, HTTP saturation %v, open loop %v, ledger %v; %v unrecorded warm-up first. Took %v.",
			start.UTC().Format("2006-01-02 15:04 UTC"), b.commit(), runtime.Version(), b.plan.reps,
			b.plan.redisDur, b.plan.httpDur, b.plan.openDur, b.plan.ledgerDur, b.plan.warm, time.Since(start).Round(time.Second)),
		"",
		fmt.Sprintf("Machine: %d cores (%s), shared; load average (1/5/15 min) at start %s, after the side-by-side rows %s, at the end %s. %s.",
			runtime.NumCPU(), cpuModel(), loads[0], loads[1], loads[2], srv.versions),
	}
	rp.notes = append(rp.notes, allocs,
		"rate: the median run; spread: the lowest–highest run (rate; p99); p50/p99/p999 and the status split: over every sample of every run.",
		"Closed loop: N callers, each with one request in flight on a kept-alive connection. Open loop: requests start at a constant rate "+
			"whatever the answers, and each is timed from when it was due (no coordinated omission).",
		"Everything (load generator included) shares the machine's cores; Redis has no persistence; the signers presign for a fake S3 endpoint "+
			"(local CPU only) and issue "+urlTTL+" URLs, so no schedule falls due during the bench (the ledger's fire and purge writes are not in these figures).",
	)
	rp.notes = append(rp.notes, errorNotes(rp.rows)...)
	rp.notes = append(rp.notes, "The servers' logs (a 503 is explained there): artifacts/bench-logs/.")

	var buf bytes.Buffer
	rp.write(&buf)
	if _, err := b.stdout.Write(buf.Bytes()); err != nil {
		return err
	}
	if b.out != "" {
		path := filepath.Join(b.root, b.out)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(b.progress, "bench: table written to %s\n", path)
	}
	return nil
}

func (b *bench) startServers(ctx context.Context, dir string) (servers, error) {
	var s servers
	redisBin, err := tool(b.getenv, b.root, "redis-server")
	if err != nil {
		return s, err
	}
	natsBin, err := tool(b.getenv, b.root, "nats-server")
	if err != nil {
		return s, err
	}
	s.versions = version(natsBin) + ", " + version(redisBin)
	signerBin := b.signerBin
	if signerBin == "" {
		b.say("building the signer")
		if signerBin, err = goBuild(ctx, b.root, dir, "./signer"); err != nil {
			return s, err
		}
	}
	b.say("starting redis-server, two nats-servers, the echo handler and three signers")
	if s.redisAddr, err = b.fleet.startRedis(ctx, redisBin); err != nil {
		return s, err
	}
	if s.natsAlways, err = b.fleet.startNATS(ctx, natsBin, "nats-always", true); err != nil {
		return s, err
	}
	if s.natsLazy, err = b.fleet.startNATS(ctx, natsBin, "nats-lazy", false); err != nil {
		return s, err
	}
	self, err := os.Executable()
	if err != nil {
		return s, err
	}
	echoAddr, err := proc.FreeAddr()
	if err != nil {
		return s, err
	}
	ep, err := b.fleet.start("echo", self, baseEnv(), "-serve-echo", echoAddr)
	if err != nil {
		return s, err
	}
	s.echoBase = "http://" + echoAddr
	if err := ep.WaitHTTP(ctx, serverWait, s.echoBase+"/healthz"); err != nil {
		return s, err
	}
	if s.always, err = b.fleet.startSigner(ctx, signerBin, "signer-always", s.redisAddr, s.natsAlways, hugeTiers); err != nil {
		return s, err
	}
	if s.lazy, err = b.fleet.startSigner(ctx, signerBin, "signer-lazy", s.redisAddr, s.natsLazy, hugeTiers); err != nil {
		return s, err
	}
	if s.mixed, err = b.fleet.startSigner(ctx, signerBin, "signer-mix", s.redisAddr, s.natsAlways, mixTiers); err != nil {
		return s, err
	}
	return s, nil
}

// Tenants and users of the rows.
const (
	benchTenants   = 4
	decisionUsers  = 10_000
	allowKeys      = 10_000
	halfUsers      = 1_000
	mixLightUsers  = 20_000
	mixHeavyUsers  = 8
	satUsersPrefix = "sat-"
)

// sideBySide is every row compared with another: Redis, redis_rate, the
// decision script, the echo handler and both signers at saturation, all in
// the same rounds. It returns the allocations-per-sign note.
func (b *bench) sideBySide(ctx context.Context, srv servers, rp *report) (string, error) {
	c := b.plan.callers
	callers := fmt.Sprintf("%d callers", c)
	httpCallers := fmt.Sprintf("%d callers, keep-alive", c)
	toks := tokens(satUsersPrefix, c, benchTenants)
	var allocs allocCounter
	get := &measurement{name: "Redis GET", load: callers, dur: b.plan.redisDur, do: closed(c, redisGet(b.rdb))}
	allowOne := &measurement{name: "go-redis/redis_rate `Allow`, one key", load: callers, dur: b.plan.redisDur, do: closed(c, allow(b.rdb, 1))}
	allowMany := &measurement{name: "go-redis/redis_rate `Allow`, 10k keys", load: callers, dur: b.plan.redisDur, do: closed(c, allow(b.rdb, allowKeys))}
	dec := &measurement{name: "mintgate decision: `quota.Store.Spend` (idempotency + 2 buckets + in-flight mark; 10k users, 4 tenants)", load: callers, dur: b.plan.redisDur,
		do: closed(c, decision(b.rdb, decisionUsers, benchTenants, false))}
	coal := &measurement{name: "mintgate decision, coalesced: `quota.Coalescer.Spend` (the signer's path; same load)", load: callers, dur: b.plan.redisDur,
		do: closed(c, decision(b.rdb, decisionUsers, benchTenants, true))}
	echoRow := &measurement{name: "echo handler, fixed 201 JSON (own process)", load: httpCallers, dur: b.plan.httpDur, do: closed(c, sign(b.client, srv.echoBase, toks))}
	always := &measurement{name: "**signer end to end, ledger `sync_interval: always`**", load: httpCallers, dur: b.plan.httpDur,
		do: allocs.around(srv.always, b.client, closed(c, sign(b.client, srv.always.base, toks))), warmed: allocs.reset}
	lazy := &measurement{name: "signer end to end, ledger lazily synced", load: httpCallers, dur: b.plan.httpDur, do: closed(c, sign(b.client, srv.lazy.base, toks))}
	// The same signer and load, each sign with checksumSHA256 (issue 30).
	withSum := &measurement{name: "signer end to end, sign with checksumSHA256, ledger `sync_interval: always`", load: httpCallers, dur: b.plan.httpDur,
		do: closed(c, signSum(b.client, srv.always.base, toks))}

	// Downloads of completed uploads (issue 40): CPU per download grant.
	ups, err := completeUploads(ctx, b.client, b.rdb, srv.always.base, toks, downloadUploads)
	if err != nil {
		return "", err
	}
	dl := &measurement{name: "signer end to end, download of a completed upload (`POST /uploads/{urlId}/download`)", load: httpCallers, dur: b.plan.httpDur,
		do: closed(c, download(b.client, srv.always.base, ups))}

	ms := []*measurement{get, allowOne, allowMany, dec, coal, echoRow, always, withSum, dl, lazy}
	if err := b.rounds(ctx, "side by side", ms...); err != nil {
		return "", err
	}
	rp.rows = append(rp.rows, ms...)
	rp.cpu = cpuTable(ms, runtime.NumCPU())

	// The headline: CPU per sign of the servers a sign runs on, by
	// process, at saturation with the durable ledger.
	servers, perRound := cpuOf(always, "signer-always", "redis", "nats-always")
	rp.headline = append(rp.headline, bar{what: "CPU per sign at saturation, signer + Redis + nats-server (durable ledger)", issue: 22,
		value: servers, spread: perRound, want: "≤ 150 µs", unit: " µs", pass: servers > 0 && servers <= 150})
	redisCPU, perRound := cpuOf(always, "redis")
	rp.headline = append(rp.headline, bar{what: "of it, Redis's CPU per sign", issue: 22,
		value: redisCPU, spread: perRound, want: "≤ 35 µs", unit: " µs", pass: redisCPU > 0 && redisCPU <= 35})
	checksumBars(always, withSum, rp)

	r, per := ratio(always, lazy)
	rp.bars = append(rp.bars, bar{what: "signer (ledger sync always) ÷ signer (lazy ledger)", issue: 8, value: r, spread: per, want: "≥ 0.8×", unit: "×", pass: r >= 0.8})
	r, per = ratio(always, allowOne)
	// Issue 9's bars of this kind are retired (issue 22): they compare ten
	// Redis commands with three and a whole box with one process.
	rp.bars = append(rp.bars, bar{what: "signer end to end (durable ledger) ÷ redis_rate `Allow` (one key)", issue: 9, value: r, spread: per, want: "— (retired)", unit: "×", info: true})
	r, per = ratio(dec, allowOne)
	rp.bars = append(rp.bars, bar{what: "mintgate decision ÷ redis_rate `Allow` (one key), 50 callers", issue: 9, value: r, spread: per, want: "— (retired)", unit: "×", info: true})
	r, per = ratio(coal, allowOne)
	rp.bars = append(rp.bars, bar{what: "mintgate decision as the signer sends it (coalesced) ÷ redis_rate `Allow` (one key), 50 callers", issue: 9, value: r, spread: per, want: "—", unit: "×", info: true})
	r, per = ratio(coal, dec)
	rp.bars = append(rp.bars, bar{what: "mintgate decision coalesced ÷ plain `quota.Store.Spend`, 50 callers over 4 tenants", issue: 9, value: r, spread: per, want: "—", unit: "×", info: true})
	r, per = ratio(always, echoRow)
	rp.bars = append(rp.bars, bar{what: "signer end to end ÷ echo fixed 201 (for reference)", issue: 9, value: r, spread: per, want: "—", unit: "×", info: true})
	return allocs.note(), nil
}

// openLoops offers the signer (durable ledger) half of its measured
// saturation, then the realistic mix at the same rate.
func (b *bench) openLoops(ctx context.Context, srv servers, rp *report) error {
	var sat float64
	for _, m := range rp.rows {
		if strings.Contains(m.name, "ledger `sync_interval: always`") {
			sat = m.rate()
		}
	}
	if sat <= 0 {
		return fmt.Errorf("no saturation rate of the signer to halve")
	}
	rate := sat / 2
	load := "open loop, " + fmtRate(rate) + " (half of saturation)"
	half := &measurement{name: "**signer at half of its saturation**, ledger `sync_interval: always`", load: load, dur: b.plan.openDur,
		do: open(rate, sign(b.client, srv.always.base, tokens("half-", halfUsers, benchTenants)))}
	// The lazily synced twin at the same rate, interleaved: how much of
	// the tail is the ledger's fsync.
	halfLazy := &measurement{name: "signer at the same rate, ledger lazily synced", load: load, dur: b.plan.openDur,
		do: open(rate, sign(b.client, srv.lazy.base, tokens("half-lazy-", halfUsers, benchTenants)))}
	if err := b.rounds(ctx, "half of saturation", half, halfLazy); err != nil {
		return err
	}
	b.say("mix: preparing 20k users and draining the heavy users' tier")
	mx := newMix(b.client, srv.mixed.base, mixLightUsers, mixHeavyUsers, benchTenants)
	if err := mx.drain(ctx); err != nil {
		return err
	}
	mixed := &measurement{name: fmt.Sprintf("realistic mix: %dk users, %d tenants, ~5 %% replays (200), ~10 %% from %d users over their tier (429)",
		mixLightUsers/1000, benchTenants, mixHeavyUsers), load: load, dur: b.plan.openDur, do: open(rate, mx.op)}
	if err := b.rounds(ctx, "realistic mix", mixed); err != nil {
		return err
	}
	rp.rows = append(rp.rows, half, halfLazy, mixed)
	rp.notes = append(rp.notes, lagNote(half), lagNote(halfLazy), lagNote(mixed))

	p99 := ms(pooled(half.runs).pct(0.99))
	rp.headline = append(rp.headline, bar{what: "signer p99 at half of its saturation (durable ledger)", issue: 22, value: p99, spread: half.p99s(), want: "≤ 10 ms", unit: "ms", pass: p99 <= 10})
	return nil
}

// ledger measures ledger.Client.Record alone on both servers, the same
// number of callers side by side.
func (b *bench) ledger(ctx context.Context, srv servers, rp *report) error {
	ledAlways, err := dialLedger(ctx, srv.natsAlways)
	if err != nil {
		return err
	}
	defer ledAlways.Close()
	ledLazy, err := dialLedger(ctx, srv.natsLazy)
	if err != nil {
		return err
	}
	defer ledLazy.Close()
	var ms, durable []*measurement
	for _, n := range b.plan.ledgerCallers {
		load := fmt.Sprintf("%d callers", n)
		if n == 1 {
			load = "1 caller"
		}
		a := &measurement{name: "`ledger.Client.Record`, `sync_interval: always`", load: load, dur: b.plan.ledgerDur, do: closed(n, record(ledAlways))}
		l := &measurement{name: "`ledger.Client.Record`, lazily synced", load: load, dur: b.plan.ledgerDur, do: closed(n, record(ledLazy))}
		ms = append(ms, a, l)
		durable = append(durable, a)
	}
	if err := b.rounds(ctx, "ledger alone", ms...); err != nil {
		return err
	}
	rp.rows = append(rp.rows, ms...)
	best := durable[0]
	for _, m := range durable {
		if m.rate() > best.rate() {
			best = m
		}
	}
	rp.bars = append(rp.bars, bar{what: "ledger alone, durable (`Record`, best of " + callerCounts(b.plan.ledgerCallers) + ": " + best.load + ")",
		issue: 8, value: best.rate(), spread: best.rates(), want: "≥ 20k/s", unit: "/s", pass: best.rate() >= 20000})
	return nil
}

// rounds warms every row up once, then runs all of them plan.reps times,
// one round after the other, each round starting one row further along, so
// a slow moment of the shared machine is spread over the rows it compares.
func (b *bench) rounds(ctx context.Context, what string, ms ...*measurement) error {
	b.say(what + ": warming up")
	for _, m := range ms {
		m.do(ctx, b.plan.warm)
	}
	for _, m := range ms {
		if m.warmed != nil {
			m.warmed()
		}
	}
	for r := range b.plan.reps {
		for j := range ms {
			m := ms[(j+r)%len(ms)]
			// Redis's statistics start afresh, so its command time is this run's.
			statsErr := b.rdb.ConfigResetStat(ctx).Err()
			before := b.fleet.sampleCPU()
			res := m.do(ctx, m.dur)
			res.cpu = b.fleet.sampleCPU().since(before)
			if statsErr == nil {
				res.cpu.redisCommands, _ = commandTime(ctx, b.rdb)
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			m.runs = append(m.runs, res)
			b.say(fmt.Sprintf("%s %d/%d: %-70s %9s  p99 %-8s %s", what, r+1, b.plan.reps, m.name+" · "+m.load,
				fmtRate(res.rate()), fmtDur(res.pct(0.99)), split(res.status)))
		}
	}
	return nil
}

func (b *bench) say(s string) { fmt.Fprintln(b.progress, "bench: "+s) }

// closed is a closed-loop row of callers.
func closed(callers int, o op) func(context.Context, time.Duration) result {
	return func(ctx context.Context, d time.Duration) result { return closedLoop(ctx, callers, d, o) }
}

// open is an open-loop row at rate per second.
func open(rate float64, o op) func(context.Context, time.Duration) result {
	return func(ctx context.Context, d time.Duration) result { return openLoop(ctx, rate, d, o) }
}

// checksumBars sets a sign with checksumSHA256 beside a plain one: the CPU
// per sign of the servers a sign runs on, each with its spread, and their
// ratio run by run (the two rows run interleaved in the same rounds).
func checksumBars(plain, withSum *measurement, rp *report) {
	procs := []string{"signer-always", "redis", "nats-always"}
	p, pPer := cpuOf(plain, procs...)
	s, sPer := cpuOf(withSum, procs...)
	rp.headline = append(rp.headline, bar{what: "CPU per sign with checksumSHA256, signer + Redis + nats-server (durable ledger)", issue: 30,
		value: s, spread: sPer, want: "—", unit: " µs", info: true})
	var per []float64
	for i := range min(len(pPer), len(sPer)) {
		if pPer[i] > 0 {
			per = append(per, sPer[i]/pPer[i])
		}
	}
	r := 0.0
	if p > 0 {
		r = s / p
	}
	rp.headline = append(rp.headline, bar{what: "CPU per sign with checksumSHA256 ÷ without (same servers, same rounds)", issue: 30,
		value: r, spread: per, want: "≤ 1.05×", unit: "×", pass: r > 0 && r <= 1.05})
}
