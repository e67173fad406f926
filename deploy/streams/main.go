// Command streams is the operator step that creates and updates mintgate's
// JetStream streams: MINTGATE_GRANTS (the grant ledger, shared/ledger),
// MINTGATE_UPLOADS (upload events, shared/events) and MINTGATE_WEBHOOKS
// (webhook retries and failed deliveries, shared/webhook). The services
// only read them: their NATS users may not create, update or delete a
// stream (deploy/nats/authorization.conf), and a service that finds its
// stream missing or misconfigured stays unready until this has run.
//
// It connects as the operator's own NATS user (MINTGATE_NATS_CREDS holds
// the "streams" seed), ensures the three streams and exits; a second run
// changes nothing. make up, docker-compose.yml and the k8s Job
// deploy/k8s/base/streams.yaml run it before the services start; on an
// upgrade run it before rolling them (docs/production.md).
//
// With MINTGATE_POSTGRES_URL set (a role that owns the schema) it also
// applies the upload records' migrations (shared/records.Migrate, embedded
// and versioned) and the grants of the services' role
// (deploy/postgres/grants.sql), after the streams.
//
// The streams are shaped by the variables the services read
// (docs/configuration.md): MINTGATE_URL_TTL and MINTGATE_SWEEP_GRACE bound
// the ledger's MINTGATE_LEDGER_MAX_AGE from below, MINTGATE_DONE_TTL is the
// events' de-duplication window, MINTGATE_STREAM_REPLICAS the replicas of
// all three, MINTGATE_WEBHOOK_STREAM_MAX_BYTES the webhooks' size bound
// (1 GiB unless set). Other settings left unset keep what the existing
// streams have.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mintgate/mintgate/shared/config"
	"github.com/mintgate/mintgate/shared/dial"
	"github.com/mintgate/mintgate/shared/events"
	"github.com/mintgate/mintgate/shared/ledger"
	"github.com/mintgate/mintgate/shared/records"
	"github.com/mintgate/mintgate/shared/service"
	"github.com/mintgate/mintgate/shared/webhook"
)

func main() { service.Main("streams", run) }

// minOutage is what the ledger's MaxAge must exceed a grant's due time
// (URL TTL + grace) by: the stream silently drops a pending schedule
// older than MaxAge, so it must also cover the worst outage of the
// sweepers.
const minOutage = 24 * time.Hour

// minWebhookBytes is the least size bound of MINTGATE_WEBHOOKS: room for
// a few hundred deliveries.
const minWebhookBytes = 64 << 10

// settings is what shapes the streams.
type settings struct {
	NATS   config.NATS
	URLTTL time.Duration
	// MultipartTTL is a multipart grant's life (MINTGATE_MULTIPART_TTL),
	// the longest a grant waits in the ledger.
	MultipartTTL time.Duration
	Grace        time.Duration
	DoneTTL      time.Duration
	Replicas     int           // 0: keep the existing stream's, else 1
	MaxAge       time.Duration // 0: keep the existing ledger's, else ledger.DefaultMaxAge
	// WebhookMaxBytes bounds MINTGATE_WEBHOOKS (-1: no bound).
	WebhookMaxBytes int64
	Postgres        string // MINTGATE_POSTGRES_URL: "" leaves the records' schema alone
}

func loadSettings(getenv func(string) string) (settings, error) {
	e := config.New(getenv)
	s := settings{
		NATS:         e.NATS(),
		URLTTL:       e.URLTTL(),
		MultipartTTL: e.MultipartTTL(),
		Grace:        e.SweepGrace(),
		DoneTTL:      e.Duration("MINTGATE_DONE_TTL", 15*time.Minute),
		Replicas:     int(e.Int("MINTGATE_STREAM_REPLICAS", 0)),
		MaxAge:       e.Duration("MINTGATE_LEDGER_MAX_AGE", 0),
		Postgres:     e.PostgresURL(),

		WebhookMaxBytes: e.Int("MINTGATE_WEBHOOK_STREAM_MAX_BYTES", webhook.DefaultMaxBytes),
	}
	if s.WebhookMaxBytes < minWebhookBytes && s.WebhookMaxBytes != -1 {
		e.Fail("MINTGATE_WEBHOOK_STREAM_MAX_BYTES", "%d must be at least %d bytes, or -1 for no bound", s.WebhookMaxBytes, minWebhookBytes)
	}
	if s.Replicas < 0 || s.Replicas > 5 {
		e.Fail("MINTGATE_STREAM_REPLICAS", "%d must be between 1 and 5 (JetStream's limit), or unset to keep the streams'", s.Replicas)
	}
	if need := max(s.URLTTL, s.MultipartTTL) + s.Grace + minOutage; s.MaxAge != 0 && s.MaxAge < need {
		e.Fail("MINTGATE_LEDGER_MAX_AGE", "%v must be at least the longer of MINTGATE_URL_TTL and MINTGATE_MULTIPART_TTL, + MINTGATE_SWEEP_GRACE + %v = %v: "+
			"the stream drops pending grants older than it", s.MaxAge, minOutage, need)
	}
	if s.DoneTTL <= 0 {
		e.Fail("MINTGATE_DONE_TTL", "%v must be positive", s.DoneTTL)
	}
	return s, e.Err()
}

// run ensures the three streams, logging what they are, and returns.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	if err := service.Flags("streams", args, stdout, nil); err != nil {
		return err
	}
	log := service.Logger(stdout, "streams")
	s, err := loadSettings(getenv)
	if err != nil {
		return err
	}
	opts, err := dial.NATSOptions(s.NATS, "streams")
	if err != nil {
		return err
	}
	nc, err := nats.Connect(s.NATS.URL, append(opts, nats.Name("mintgate-streams"), nats.Timeout(5*time.Second),
		nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1))...)
	if err != nil {
		return fmt.Errorf("MINTGATE_NATS_URL: connect %s: %w", config.RedactURL(s.NATS.URL), err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	// A server that is still starting (compose, a rolling cluster) gets a
	// minute; Ensure waits out an election within it.
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := waitConnected(ctx, nc); err != nil {
		return fmt.Errorf("MINTGATE_NATS_URL: connect %s: %w", config.RedactURL(s.NATS.URL), err)
	}
	info, err := ledger.EnsureStream(ctx, js, ledger.Config{Grace: s.Grace, Replicas: s.Replicas, MaxAge: s.MaxAge, Log: log})
	if err != nil {
		return fmt.Errorf("stream %s: %w", ledger.DefaultStream, err)
	}
	log.Info("stream ready", "stream", info.Config.Name, "replicas", info.Config.Replicas,
		"maxAge", info.Config.MaxAge.String(), "duplicates", info.Config.Duplicates.String(), "schedules", info.Config.AllowMsgSchedules)
	if info.Config.MaxAge != 0 && info.Config.MaxAge < s.URLTTL+s.Grace+minOutage {
		log.Warn("the ledger keeps messages for less than MINTGATE_URL_TTL + MINTGATE_SWEEP_GRACE + a day: an outage that long drops pending grants; set MINTGATE_LEDGER_MAX_AGE",
			"maxAge", info.Config.MaxAge.String())
	}
	stream, err := events.EnsureStream(ctx, js, s.DoneTTL, s.Replicas)
	if err != nil {
		return fmt.Errorf("stream %s: %w", events.Stream, err)
	}
	log.Info("stream ready", "stream", stream.Config.Name, "replicas", stream.Config.Replicas,
		"maxAge", stream.Config.MaxAge.String(), "duplicates", stream.Config.Duplicates.String())
	hooks, err := webhook.EnsureStream(ctx, js, s.Replicas, s.WebhookMaxBytes)
	if err != nil {
		return fmt.Errorf("stream %s: %w", webhook.Stream, err)
	}
	log.Info("stream ready", "stream", hooks.Config.Name, "replicas", hooks.Config.Replicas,
		"maxAge", hooks.Config.MaxAge.String(), "maxBytes", hooks.Config.MaxBytes, "discard", hooks.Config.Discard.String(),
		"schedules", hooks.Config.AllowMsgSchedules)
	return migrate(ctx, s.Postgres, log)
}

// migrate applies the records' schema when url is set. A SIGKILL at any
// line leaves each migration applied whole or not at all (one
// transaction each); the next run applies the rest.
func migrate(ctx context.Context, url string, log *slog.Logger) error {
	if url == "" {
		log.Info("upload records off (MINTGATE_POSTGRES_URL unset): no schema applied")
		return nil
	}
	v, err := records.Migrate(ctx, url, log)
	if err != nil {
		return fmt.Errorf("MINTGATE_POSTGRES_URL %s: %w", config.RedactURL(url), err)
	}
	log.Info("upload records schema ready", "version", v, "database", config.RedactURL(url))
	return nil
}

// waitConnected waits until nc has connected (it retries a server that
// is not up yet) or ctx ends.
func waitConnected(ctx context.Context, nc *nats.Conn) error {
	for !nc.IsConnected() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}
