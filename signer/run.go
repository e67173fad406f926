package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/auth"
	"github.com/mintgate/mintgate/shared/dial"
	"github.com/mintgate/mintgate/shared/ledger"
	"github.com/mintgate/mintgate/shared/multipart"
	"github.com/mintgate/mintgate/shared/ops"
	"github.com/mintgate/mintgate/shared/service"
	"github.com/mintgate/mintgate/shared/telemetry"
	"github.com/mintgate/mintgate/shared/tiers"
	"github.com/mintgate/mintgate/signer/internal/gate"
	"github.com/mintgate/mintgate/signer/internal/identity"
	"github.com/mintgate/mintgate/signer/internal/presign"
	"github.com/mintgate/mintgate/signer/internal/readlimit"
	"github.com/mintgate/mintgate/signer/internal/verdict"
)

// run starts the signer with the environment getenv reads and serves until
// ctx ends. A bad configuration value stops it before it listens. Its one
// argument, -healthcheck, instead probes the signer already listening on
// MINTGATE_HTTP_ADDR (the container healthcheck); otherwise everything is
// the environment (docs/configuration.md).
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	if log, err := service.Start(ctx, service.Spec{Name: "signer", HTTPAddr: defaultHTTPAddr}, args, getenv, stdout); log == nil {
		return err
	}
	return runWith(ctx, getenv, stdout)
}

// option changes a dependency run would build; tests use them to fix the
// clock, to stand in for the ledger or to read the metrics.
type option func(*deps)

// runWith is run after its arguments: the signer's parts, in the order
// they start.
func runWith(ctx context.Context, getenv func(string) string, stdout io.Writer, opts ...option) error {
	log := service.Logger(stdout, "signer")
	c, err := loadConfig(getenv)
	if err != nil {
		return err
	}
	warnRisky(log, c)
	tel, err := telemetry.Setup(ctx, "signer", getenv)
	if err != nil {
		return err
	}
	defer shutdownTracing(tel)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the JWKS refresh, the tiers file watch and pprof

	d := deps{cfg: c, log: log, now: time.Now, tel: tel}
	for _, o := range opts {
		o(&d)
	}
	if err := d.observe(ctx); err != nil {
		return err
	}
	// Redis connects lazily: a signer started while Redis is down serves
	// 503 limiter_unavailable (and /readyz says why) until it is back.
	rdb, err := dial.Redis(c.Redis)
	if err != nil {
		return err
	}
	defer rdb.Close()
	if tel.Enabled() {
		rdb.AddHook(telemetry.RedisHook{})
	}
	// Deferred after rdb.Close, so it runs before it: once the servers
	// have drained the handlers, the canceller's last round still has Redis.
	defer d.startGate(ctx, rdb)()

	if d.ident, err = identity.New(ctx, c.Config, d.now); err != nil {
		return err
	}
	if d.reads == nil {
		d.reads = readlimit.New(c.ReadLimit, c.ReadLimitOn, d.ident.ClientIP())
	}
	p, s3c, err := presign.New(ctx, c.S3, c.AWS, c.URLTTL)
	if err != nil {
		return err
	}
	d.presign, d.uploads = p, multipart.New(s3c.Calls, c.S3.Bucket, multipart.PartURLsFor(s3c.Public))
	closeBus, err := d.openBus(ctx, c, log)
	if err != nil {
		return err
	}
	defer closeBus()
	return ops.ServeAll(ctx, log,
		ops.Endpoint{Variable: "MINTGATE_HTTP_ADDR", Addr: c.HTTPAddr, Handler: newServer(d)},
		// /metrics names tenants, and /admin/* will change buckets: neither
		// belongs on the port the internet reaches.
		ops.Endpoint{Variable: "MINTGATE_OPS_ADDR", Addr: c.OpsAddr, Handler: withAdmin(d, ops.Handler(d.reg, d.checks...))})
}

// openBus opens what the signer holds on NATS (the grant ledger, the
// verdict wakes of the status waits, the upload records' bus, the admin
// routes' failed webhooks) and returns what closes them, last opened
// first closed.
func (d *deps) openBus(ctx context.Context, c cfg, log *slog.Logger) (func(), error) {
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	if d.ledger == nil {
		// Opened in the background: while the stream is missing or
		// misconfigured (the operator step has not run) the signer serves,
		// answers 503 grant_ledger_unavailable and is unready.
		led, err := dialLedger(ctx, c, log)
		if err != nil {
			return nil, err
		}
		closers = append(closers, func() { led.Close() })
		d.ledger = led
		d.checks = append(d.checks, ops.Check{Name: "nats", Ping: led.Ping})
	}
	d.waits = verdict.New(c.WaitersPerAddress, c.Waiters, ctx.Done())
	closeWakes, err := d.subscribeVerdicts(c)
	if err != nil {
		closeAll()
		return nil, err
	}
	closers = append(closers, closeWakes)
	stopRecords, err := d.startRecords(ctx)
	if err != nil {
		closeAll()
		return nil, err
	}
	closers = append(closers, stopRecords)
	if len(c.AdminToken) > 0 && d.hooks == nil {
		hooks, closeHooks, err := dialWebhooks(c)
		if err != nil {
			closeAll()
			return nil, err
		}
		closers = append(closers, closeHooks)
		d.hooks = hooks
	}
	return closeAll, nil
}

// observe starts what watches the signer from outside or from its files:
// the metrics (unless a test gave its own), the tenant tiers file, pprof.
func (d *deps) observe(ctx context.Context) error {
	live, err := tiers.NewLive(d.cfg.Tiers, d.cfg.TiersFile)
	if err != nil {
		return err
	}
	d.live = live
	if d.cfg.PprofAddr != "" {
		if err := startPprof(ctx, d.log, d.cfg.PprofAddr); err != nil {
			return err
		}
	}
	if d.metrics == nil {
		d.reg = ops.NewRegistry()
		d.metrics = newMetrics(d.reg)
	}
	d.live.WatchAndLog(ctx, d.reg, d.log)
	return nil
}

// startGate builds the gate on rdb, with its canceller and the reader of
// Redis's clock, and adds Redis to /readyz. The function it returns stops
// them: the clock first, then the canceller's last round.
func (d *deps) startGate(ctx context.Context, rdb redis.UniversalClient) (stop func()) {
	share := 0.0 // no degraded mode
	if d.cfg.Degraded {
		share = d.cfg.DegradedShare
	}
	d.gate = gate.New(rdb, d.cfg.Redis.Timeout, share, d.metrics.Metrics, d.log)
	d.gate.StartCanceller(d.now)
	clockCtx, stopClock := context.WithCancel(ctx)
	if !d.noRedisClock {
		go d.gate.SyncClock(clockCtx)
	}
	d.checks = append(d.checks, ops.Check{Name: "redis", Ping: func(ctx context.Context) error { return rdb.Ping(ctx).Err() }})
	return func() {
		stopClock()
		d.gate.StopCanceller()
	}
}

// dialLedger connects to the grant ledger as the signer and opens it in
// the background (ledger.DialOpening); the ledger logs through log.
func dialLedger(ctx context.Context, c cfg, log *slog.Logger) (*ledger.Opening, error) {
	natsOpts, err := dial.NATSOptions(c.NATS, "signer")
	if err != nil {
		return nil, err
	}
	led, err := ledger.DialOpening(ctx, c.NATS.URL, ledger.Config{Grace: c.SweepGrace, Secret: c.GrantSecret, Log: log}, natsOpts...)
	if err != nil {
		return nil, fmt.Errorf("MINTGATE_NATS_URL: grant ledger: %w", err)
	}
	return led, nil
}

// subscribeVerdicts connects to NATS as the signer, on a connection of its
// own, and wakes the status waits from the completer's events
// (verdict.Hub.Subscribe). It connects in the background: while NATS is
// away the waits read Redis every statusRecheck instead.
func (d *deps) subscribeVerdicts(c cfg) (closeConn func(), err error) {
	natsOpts, err := dial.NATSOptions(c.NATS, "signer")
	if err != nil {
		return nil, err
	}
	natsOpts = append(natsOpts, nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1))
	nc, err := nats.Connect(c.NATS.URL, natsOpts...)
	if err != nil {
		return nil, fmt.Errorf("MINTGATE_NATS_URL: verdict events: %w", err)
	}
	if err := d.waits.Subscribe(nc); err != nil {
		nc.Close()
		return nil, fmt.Errorf("MINTGATE_NATS_URL: verdict events: %w", err)
	}
	return nc.Close, nil
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
	for _, p := range c.TrustedProxies {
		if auth.WideProxyRange(p) {
			log.Warn("!!! MINTGATE_TRUSTED_PROXIES holds a wide private range: every address in it may write X-Forwarded-For or CF-Connecting-IP, "+
				"so any workload there can name a fresh client, and get a fresh anonymous bucket, per request. Name your ingress controller's or load balancer's addresses only.",
				"range", p.String())
		}
	}
	// An HS256 key is shared with the token issuer, and an issuer often
	// signs tokens for several services with one key: without an audience
	// the signer takes a token minted for any of them whose claims carry a
	// tenant, and without an issuer one from any issuer holding the key.
	if len(c.JWTSecret) > 0 && c.JWTAudience == "" {
		log.Warn("!!! MINTGATE_JWT_HS256_SECRET without MINTGATE_JWT_AUDIENCE: a token the same key signed for ANY other service is accepted here. " +
			"Set MINTGATE_JWT_AUDIENCE (and MINTGATE_JWT_ISSUER) to what your issuer puts in aud (and iss) of the tokens meant for mintgate.")
	}
	if len(c.JWTSecret) > 0 && c.JWTIssuer == "" {
		log.Warn("MINTGATE_JWT_HS256_SECRET without MINTGATE_JWT_ISSUER: a token from any issuer holding the key is accepted; set MINTGATE_JWT_ISSUER")
	}
	if c.Degraded {
		log.Warn("MINTGATE_DEGRADED_MODE=local: while Redis is unavailable each instance grants from in-process buckets at MINTGATE_DEGRADED_SHARE of the limits, without idempotency; "+
			"keep the number of instances × the share at most 1", "share", c.DegradedShare)
	}
}
