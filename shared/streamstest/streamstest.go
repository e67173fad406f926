// Package streamstest is the operator step for tests: it creates the
// streams that deploy/streams creates in a deployment, on a test's own
// nats-server, before a service or a ledger opens them (services never
// create streams).
package streamstest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mintgate/mintgate/shared/events"
	"github.com/mintgate/mintgate/shared/ledger"
	"github.com/mintgate/mintgate/shared/webhook"
)

// DoneTTL is the events' de-duplication window Ensure gives
// MINTGATE_UPLOADS: the completer's default MINTGATE_DONE_TTL.
const DoneTTL = 15 * time.Minute

// Ensure creates or updates the three streams (grants, uploads, webhooks) on url with the defaults, as the
// operator step does; opts are connection options (credentials, TLS).
func Ensure(tb testing.TB, url string, opts ...nats.Option) {
	tb.Helper()
	EnsureLedger(tb, url, ledger.Config{}, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js := connect(tb, url, opts...)
	if _, err := events.EnsureStream(ctx, js, DoneTTL, 0); err != nil {
		tb.Fatalf("the operator step: %v", err)
	}
	if _, err := webhook.EnsureStream(ctx, js, 0, webhook.DefaultMaxBytes); err != nil {
		tb.Fatalf("the operator step: %v", err)
	}
}

// EnsureLedger creates or updates the ledger's stream of cfg on url
// (replicas, max age, name), as the operator step does.
func EnsureLedger(tb testing.TB, url string, cfg ledger.Config, opts ...nats.Option) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := ledger.EnsureStream(ctx, connect(tb, url, opts...), cfg); err != nil {
		tb.Fatalf("the operator step: %v", err)
	}
}

func connect(tb testing.TB, url string, opts ...nats.Option) jetstream.JetStream {
	tb.Helper()
	nc, err := nats.Connect(url, append([]nats.Option{nats.MaxReconnects(-1)}, opts...)...)
	if err != nil {
		tb.Fatalf("the operator step: connect: %v", err)
	}
	tb.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	return js
}
