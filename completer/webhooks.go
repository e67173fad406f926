package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mintgate/mintgate/shared/config"
	"github.com/mintgate/mintgate/shared/dial"
	"github.com/mintgate/mintgate/shared/ops"
	"github.com/mintgate/mintgate/shared/telemetry"
	"github.com/mintgate/mintgate/shared/tiers"
	"github.com/mintgate/mintgate/shared/webhook"
)

// The completer delivers the webhooks (docs/webhooks.md): it publishes
// the events they carry and holds the NATS credentials already, so the
// deliveries are one more goroutine of it (shared/webhook's Deliverer) on
// a connection of their own, not one more service to run.

// webhooksOn is whether the completer delivers webhooks: with events on,
// and an endpoint for every tenant (MINTGATE_WEBHOOK_URL) or a tenant
// tiers file that may name some.
func (c cfg) webhooksOn() bool {
	return c.Events && (c.Webhooks.Default.URL != "" || c.TiersFile != "")
}

// loadWebhooks reads the webhook variables and the tenant tiers file's
// path (its tenants' own endpoints). The completer reads no tiers: it
// checks the file's tiers for their syntax only (tiers.NewLive with no
// defaults), so it never refuses a tier the signer knows.
func loadWebhooks(e *config.Env, getenv func(string) string, c *cfg) {
	c.Webhooks = webhook.Read(e)
	c.TiersFile = e.String("MINTGATE_TENANT_TIERS_FILE", "")
	if c.Webhooks.Default.URL != "" && getenv("MINTGATE_NATS_URL") == "" {
		e.Fail("MINTGATE_WEBHOOK_URL", "needs MINTGATE_NATS_URL: webhooks are delivered from the events stream")
	}
}

// hooks is what the deliveries add to the completer: a worker, a /readyz
// check, a connection to close. Off, it is empty.
type hooks struct {
	workers []func(context.Context)
	checks  []ops.Check
	close   func()
}

// startWebhooks connects to NATS for the deliveries and returns the
// deliverer's loop, its /readyz check (the stream of retries, never the
// receivers) and the function closing the connection. A tiers file
// missing or bad at start stops the completer, as it stops the signer.
func startWebhooks(_ context.Context, c cfg, reg prometheus.Registerer, log *slog.Logger, tel *telemetry.Provider) (hooks, error) {
	off := hooks{close: func() {}}
	if !c.webhooksOn() {
		return off, nil
	}
	live, err := tiers.NewLive(tiers.Set{}, c.TiersFile)
	if err != nil {
		return off, err
	}
	opts, err := dial.NATSOptions(c.NATS, "completer")
	if err != nil {
		return off, err
	}
	nc, err := nats.Connect(c.NATS.URL, append(opts, nats.Name("mintgate-completer-webhooks"),
		nats.Timeout(2*time.Second), nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond),
		nats.RetryOnFailedConnect(true))...)
	if err != nil {
		return off, fmt.Errorf("MINTGATE_NATS_URL: connect %s: %w", config.RedactURL(c.NATS.URL), err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return off, err
	}
	endpoint := func(tenant string) (webhook.Endpoint, bool) {
		if ep, ok := live.Webhook(tenant); ok {
			return ep, true
		}
		return c.Webhooks.Default, c.Webhooks.Default.URL != ""
	}
	d := webhook.NewDeliverer(js, c.Webhooks, endpoint, webhook.NewMetrics(reg), log)
	d.TraceWith(tel)
	log.Info("webhooks on", "webhooks", c.Webhooks.String(), "tiersFile", c.TiersFile)
	run := func(ctx context.Context) {
		live.WatchAndLog(ctx, reg, log)
		d.Run(ctx)
	}
	return hooks{workers: []func(context.Context){run}, checks: []ops.Check{{Name: "webhooks", Ping: d.Ping}}, close: nc.Close}, nil
}
