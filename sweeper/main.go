// Command sweeper refunds the tokens of presigned URLs that expired unused.
// JetStream delivers each grant once it is due (expiry + grace); for each,
// one Redis script refunds a token to the issuing tier's bucket and the
// tenant's, unless the upload landed or an earlier delivery refunded it.
// Any number of sweepers share one durable consumer.
package main

import (
	"context"
	"errors"
	"flag"
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
	"github.com/mintgate/mintgate/shared/quota"
)

// durable is the JetStream consumer every sweeper shares.
const durable = "sweeper"

// trimInterval is how often a sweeper purges the ledger messages of the
// grants swept (tests shorten it).
var trimInterval = 10 * time.Second

func main() {
	if err := run(context.Background(), os.Args, os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "sweeper:", err)
		os.Exit(1)
	}
}

// run is the whole service: it returns when ctx ends or on SIGTERM/SIGINT,
// after the grants in hand are finished or released. Its one argument,
// -healthcheck, instead probes the sweeper already listening on
// MINTGATE_HTTP_ADDR (the container healthcheck).
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	if len(args) > 1 && (args[1] == "-healthcheck" || args[1] == "healthcheck") {
		return ops.Probe(ctx, config.New(getenv).String("MINTGATE_HTTP_ADDR", defaultHTTPAddr))
	}
	fs := flag.NewFlagSet("sweeper", flag.ContinueOnError)
	fs.SetOutput(stdout)
	fs.Usage = func() {
		fmt.Fprintln(stdout, "usage: sweeper [-healthcheck] (configured by MINTGATE_* environment variables, see SPEC §5)")
	}
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}

	ctx, cancel := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer cancel()
	log := slog.New(slog.NewJSONHandler(stdout, nil)).With("service", "sweeper")

	cfg, err := loadSettings(getenv)
	if err != nil {
		return err
	}
	rdb, err := cfg.Redis.Client()
	if err != nil {
		return err
	}
	defer rdb.Close()

	natsOpts, err := cfg.NATS.Options("sweeper")
	if err != nil {
		return err
	}
	dialCtx, dialCancel := context.WithTimeout(ctx, 10*time.Second)
	ledger, err := grant.Dial(dialCtx, cfg.NATS.URL, grant.LedgerConfig{Grace: cfg.Grace, Secret: cfg.Secret, PreviousSecret: cfg.Previous}, natsOpts...)
	dialCancel()
	if err != nil {
		return fmt.Errorf("MINTGATE_NATS_URL: grant ledger: %w", err)
	}
	defer ledger.Close()

	reg := ops.NewRegistry()
	m := newMetrics(reg)
	live, err := config.NewLiveTiers(cfg.Tiers, cfg.TiersFile)
	if err != nil {
		return err
	}
	ops.WatchTiers(ctx, reg, log, live)
	sw := &sweeper{
		refunder: &refunder{store: quota.New(rdb), tiers: cfg.Tiers, live: live, now: time.Now},
		grace:    cfg.Grace,
		metrics:  m,
		log:      log,
	}
	stop, err := ledger.Consume(ctx, durable, sw.handle,
		grant.WithLogger(log),
		grant.WithObserver(m.observe),
		grant.WithTrimInterval(trimInterval),
		grant.WithTrimObserver(m.trimmed),
		// A handler call is one script bounded by the Redis timeout; this
		// only caps how long a shutdown waits for the ones in flight.
		grant.WithHandleTimeout(max(5*time.Second, 10*cfg.Redis.Timeout)),
	)
	if err != nil {
		return fmt.Errorf("consume due grants: %w", err)
	}
	defer stop()
	log.Info("sweeper started", "stream", ledger.Config().Stream, "grace", cfg.Grace.String(), "tiers", cfg.Tiers.String())

	h := ops.Handler(reg,
		ops.Check{Name: "redis", Ping: func(ctx context.Context) error { return rdb.Ping(ctx).Err() }},
		ops.Check{Name: "nats", Ping: ledger.Ping},
	)
	err = ops.Serve(ctx, log, cfg.HTTPAddr, h)
	stop() // stop pulling, finish or release what is in hand, before closing the connections
	log.Info("sweeper stopped")
	if err != nil {
		return fmt.Errorf("MINTGATE_HTTP_ADDR %s: %w", cfg.HTTPAddr, err)
	}
	return nil
}
