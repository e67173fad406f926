// Command signer issues presigned S3 upload URLs, rate-limited per caller and
// per tenant (SPEC §2): POST /uploads/sign, GET /uploads/{urlId}, and the
// operational /healthz, /readyz and /metrics.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/mintgate/mintgate/shared/config"
	"github.com/mintgate/mintgate/shared/grant"
	"github.com/mintgate/mintgate/shared/ops"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args, os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "signer:", err)
		os.Exit(1)
	}
}

// run starts the signer with the environment getenv reads and serves until
// ctx ends. A bad configuration value stops it before it listens. Its one
// argument, -healthcheck, instead probes the signer already listening on
// MINTGATE_HTTP_ADDR (the container healthcheck); otherwise everything is
// SPEC §5's environment.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	if len(args) > 1 && (args[1] == "-healthcheck" || args[1] == "healthcheck") {
		return ops.Probe(ctx, config.New(getenv).String("MINTGATE_HTTP_ADDR", defaultHTTPAddr))
	}
	return runWith(ctx, getenv, stdout)
}

// option changes a dependency run would build; tests use them to fix the
// clock, to stand in for the ledger or to read the metrics.
type option func(*deps)

func runWith(ctx context.Context, getenv func(string) string, stdout io.Writer, opts ...option) error {
	log := slog.New(slog.NewJSONHandler(stdout, nil)).With("service", "signer")
	c, err := loadConfig(getenv)
	if err != nil {
		return err
	}
	warnRisky(log, c)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the JWKS refresh

	d := deps{cfg: c, log: log, now: time.Now}
	for _, o := range opts {
		o(&d)
	}
	live, err := config.NewLiveTiers(c.Tiers, c.TiersFile)
	if err != nil {
		return err
	}
	d.live = live
	if c.PprofAddr != "" {
		if err := startPprof(ctx, log, c.PprofAddr); err != nil {
			return err
		}
	}
	if d.metrics == nil {
		d.reg = ops.NewRegistry()
		d.metrics = newMetrics(d.reg)
	}

	ops.WatchTiers(ctx, d.reg, log, d.live)

	// Redis connects lazily: a signer started while Redis is down serves
	// 503 limiter_unavailable (and /readyz says why) until it is back.
	rdb, err := c.Redis.Client()
	if err != nil {
		return err
	}
	defer rdb.Close()
	share := 0.0 // no degraded mode
	if c.Degraded {
		share = c.DegradedShare
	}
	d.gate = newGate(rdb, c.Redis.Timeout, share, d.metrics, log)
	d.gate.cancels = startCanceller(d.gate.cancel, d.now, d.metrics, log)
	// Deferred after rdb.Close, so it runs before it: once serve has
	// drained the handlers, the canceller's last round still has Redis.
	defer d.gate.cancels.close()
	clockCtx, stopClock := context.WithCancel(ctx)
	defer stopClock()
	if !d.noRedisClock {
		go d.gate.syncClock(clockCtx)
	}
	d.checks = append(d.checks, ops.Check{Name: "redis", Ping: func(ctx context.Context) error { return rdb.Ping(ctx).Err() }})

	if d.ident, err = newIdentity(ctx, c, d.now); err != nil {
		return err
	}
	if d.presign, err = newPresigner(ctx, c); err != nil {
		return err
	}
	if d.ledger == nil {
		natsOpts, err := c.NATS.Options("signer")
		if err != nil {
			return err
		}
		led, err := grant.Dial(ctx, c.NATS.URL, grant.LedgerConfig{Grace: c.SweepGrace, Secret: c.GrantSecret}, natsOpts...)
		if err != nil {
			return fmt.Errorf("MINTGATE_NATS_URL: grant ledger: %w", err)
		}
		defer led.Close()
		d.ledger = led
		d.checks = append(d.checks, ops.Check{Name: "nats", Ping: led.Ping})
	}
	return ops.ServeAll(ctx, log,
		ops.Endpoint{Variable: "MINTGATE_HTTP_ADDR", Addr: c.HTTPAddr, Handler: newServer(d)},
		// /metrics names tenants, and /admin/* will change buckets: neither
		// belongs on the port the internet reaches.
		ops.Endpoint{Variable: "MINTGATE_OPS_ADDR", Addr: c.OpsAddr, Handler: withAdmin(d, ops.Handler(d.reg, d.checks...))})
}

// warnRisky logs configurations that start but are likely mistakes. An
// explicit MINTGATE_IP_SOURCE=remote is a choice (clients connect directly,
// as on the local stack), not a default left in place: no warning.
func warnRisky(log *slog.Logger, c cfg) {
	if len(c.AnonTenants) > 0 && c.IPSource == ipRemote && !c.IPSourceSet {
		log.Warn("!!! MINTGATE_IP_SOURCE=remote with anonymous tenants: behind a load balancer or CDN every anonymous visitor " +
			"has the proxy's address and shares ONE bucket. Set MINTGATE_IP_SOURCE to cf-connecting-ip or xff (with MINTGATE_TRUSTED_PROXIES) " +
			"unless clients really connect directly (then set MINTGATE_IP_SOURCE=remote to say so).")
	}
	if c.Degraded {
		log.Warn("MINTGATE_DEGRADED_MODE=local: while Redis is unavailable each instance grants from in-process buckets at MINTGATE_DEGRADED_SHARE of the limits, without idempotency; "+
			"keep the number of instances × the share at most 1", "share", c.DegradedShare)
	}
}
