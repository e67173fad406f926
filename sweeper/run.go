package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/dial"
	"github.com/mintgate/mintgate/shared/events"
	"github.com/mintgate/mintgate/shared/ledger"
	"github.com/mintgate/mintgate/shared/multipart"
	"github.com/mintgate/mintgate/shared/ops"
	"github.com/mintgate/mintgate/shared/quota"
	"github.com/mintgate/mintgate/shared/records"
	"github.com/mintgate/mintgate/shared/service"
	"github.com/mintgate/mintgate/shared/telemetry"
	"github.com/mintgate/mintgate/shared/tiers"
)

// durable is the JetStream consumer every sweeper shares.
const durable = "sweeper"

// option changes a setting no variable sets; tests use them.
type option func(*settings)

// withTrimInterval has the sweeper purge swept grants' messages every d.
func withTrimInterval(d time.Duration) option {
	return func(s *settings) { s.TrimInterval = d }
}

// run is the whole service: it returns when ctx ends, after the grants in
// hand are finished or released. Its one argument, -healthcheck, instead
// probes the sweeper already listening on MINTGATE_HTTP_ADDR (the
// container healthcheck).
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	return runWith(ctx, args, getenv, stdout)
}

func runWith(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer, opts ...option) error {
	log, err := service.Start(ctx, service.Spec{Name: "sweeper", HTTPAddr: defaultHTTPAddr}, args, getenv, stdout)
	if log == nil {
		return err
	}
	cfg, err := loadSettings(getenv)
	if err != nil {
		return err
	}
	for _, o := range opts {
		o(&cfg)
	}
	tel, err := telemetry.Setup(ctx, "sweeper", getenv)
	if err != nil {
		return err
	}
	defer shutdownTracing(tel)
	rdb, err := dial.Redis(cfg.Redis)
	if err != nil {
		return err
	}
	defer rdb.Close()
	// Opened in the background: while the stream is missing (the operator step has not
	// run) the sweeper serves an unready /readyz and consumes nothing, never creates it.
	pending, err := dialLedger(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer pending.Close()
	reg := ops.NewRegistry()
	m := newMetrics(reg)
	sw, err := newSweeper(ctx, cfg, rdb, reg, m, log)
	if err != nil {
		return err
	}
	defer sw.closeFeed()
	sw.tel = tel
	serveCtx, stopServing := context.WithCancel(ctx)
	defer stopServing()
	served := make(chan error, 1)
	go func() {
		served <- ops.ServeAll(serveCtx, log, ops.Endpoint{Variable: "MINTGATE_HTTP_ADDR", Addr: cfg.HTTPAddr, Handler: ops.Handler(reg, readiness(rdb, pending, sw.feed)...)})
	}()
	var lc *ledger.Client
	select {
	case err := <-served: // a listener failed, or ctx ended first
		return err
	case <-pending.Done():
	}
	if lc, err = pending.Client(); err != nil {
		stopServing()
		if serr := <-served; serr != nil || ctx.Err() != nil {
			return serr // stopped before the ledger opened
		}
		return fmt.Errorf("MINTGATE_NATS_URL: grant ledger: %w", err)
	}
	defer startFeed(ctx, sw.feed, lc, sw)()
	stop, err := consume(ctx, lc, sw, cfg, m, log, sw.feed != nil)
	if err != nil {
		stopServing()
		<-served
		return err
	}
	defer stop()
	log.Info("sweeper started", "stream", lc.Config().Stream, "grace", cfg.Grace.String(), "tiers", cfg.Tiers.String())

	err = <-served
	stop() // stop pulling, finish or release what is in hand, before closing the connections
	log.Info("sweeper stopped")
	return err
}

// dialLedger connects to the grant ledger as the sweeper and opens it in
// the background (ledger.DialOpening) until ctx ends; the ledger logs
// through log.
func dialLedger(ctx context.Context, cfg settings, log *slog.Logger) (*ledger.Opening, error) {
	natsOpts, err := dial.NATSOptions(cfg.NATS, "sweeper")
	if err != nil {
		return nil, err
	}
	opening, err := ledger.DialOpening(ctx, cfg.NATS.URL, ledger.Config{
		Grace: cfg.Grace, Secret: cfg.Secret, PreviousSecret: cfg.Previous, Log: log,
	}, natsOpts...)
	if err != nil {
		return nil, fmt.Errorf("MINTGATE_NATS_URL: grant ledger: %w", err)
	}
	return opening, nil
}

// newSweeper is the sweeper of cfg's tiers, with the tenant tiers file
// watched (and its reloads counted on reg) until ctx ends.
func newSweeper(ctx context.Context, cfg settings, rdb redis.UniversalClient, reg *prometheus.Registry, m *metrics, log *slog.Logger) (*sweeper, error) {
	live, err := tiers.NewLive(cfg.Tiers, cfg.TiersFile)
	if err != nil {
		return nil, err
	}
	live.WatchAndLog(ctx, reg, log)
	s3c, err := dial.S3(ctx, cfg.AWS, cfg.S3)
	if err != nil {
		return nil, err
	}
	store := quota.New(rdb)
	feed, closeFeed, err := openRecords(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	return &sweeper{
		feed: feed, closeFeed: closeFeed,
		refunder: &refunder{store: store, tiers: cfg.Tiers, live: live, now: time.Now},
		closer:   multipart.NewCloser(store, multipart.New(s3c, cfg.S3.Bucket), time.Now),
		grace:    cfg.Grace,
		metrics:  m,
		log:      log,
	}, nil
}

// consume starts handing the due grants to sw; the function it returns
// stops the pulls and finishes or releases the grants in hand.
func consume(ctx context.Context, lc *ledger.Client, sw *sweeper, cfg settings, m *metrics, log *slog.Logger, recordsOn bool) (func(), error) {
	opts := []ledger.ConsumeOption{}
	if recordsOn {
		// The feed reads a grant from its due message when its schedule
		// fired before the feed got to it (PostgreSQL down): keep those.
		opts = append(opts, ledger.WithTrimHold(records.Durable))
	}
	stop, err := lc.Consume(ctx, durable, sw.handle, append(opts,
		ledger.WithLogger(log),
		ledger.WithObserver(m.observe),
		ledger.WithTrimInterval(cfg.TrimInterval),
		ledger.WithTrimObserver(m.trimmed),
		// A handler call is one script bounded by the Redis timeout, and for
		// a batch of multipart grants their S3 aborts (endParallel at a
		// time); this caps it, and how long a shutdown waits for the ones
		// in flight.
		ledger.WithHandleTimeout(max(30*time.Second, 10*cfg.Redis.Timeout)),
	)...)
	if err != nil {
		return nil, fmt.Errorf("consume due grants: %w", err)
	}
	return stop, nil
}

// readiness is the sweeper's /readyz checks: Redis, NATS and, with
// records on, PostgreSQL.
func readiness(rdb redis.UniversalClient, pending *ledger.Opening, feed *records.Feed) []ops.Check {
	return append([]ops.Check{
		{Name: "redis", Ping: func(ctx context.Context) error { return rdb.Ping(ctx).Err() }},
		{Name: "nats", Ping: pending.Ping},
	}, recordsCheck(feed)...)
}

// startFeed runs the records' feed on lc's connection until ctx ends or
// the function it returns is called (which waits for it), and has sw
// publish its refunded events; nothing when feed is nil (records off: no
// refunded events, nothing changes).
func startFeed(ctx context.Context, feed *records.Feed, lc *ledger.Client, sw *sweeper) func() {
	if feed == nil {
		return func() {}
	}
	sw.ender = &ender{pub: events.New(lc.JetStream()), log: feed.Log}
	feed.JS = lc.JetStream()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		feed.Run(ctx)
	}()
	return func() { cancel(); <-done }
}
