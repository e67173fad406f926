// Command completer marks uploads done (SPEC §3). It long-polls SQS for the
// S3 event notifications of the upload bucket and, for each object created
// under incoming/<tenant>/<urlId>, sets the done marker the sweeper checks
// before refunding a grant's token; given MINTGATE_NATS_URL, it also
// publishes one upload-completed event per upload (shared/uploads). It serves /healthz, /readyz and
// /metrics on MINTGATE_HTTP_ADDR, and exports the depth of the dead-letter
// queue named by its queue's redrive policy (dlq.go).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mintgate/mintgate/shared/backoff"
	"github.com/mintgate/mintgate/shared/config"
	"github.com/mintgate/mintgate/shared/ops"
	"github.com/mintgate/mintgate/shared/uploads"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args, os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "completer:", err)
		os.Exit(1)
	}
}

// run starts the completer with the environment getenv reads and works
// until ctx ends. A bad configuration value stops it before it starts.
// The one flag, -receivers, sets how many long polls run at once;
// -healthcheck instead probes the completer already listening on
// MINTGATE_HTTP_ADDR (the container healthcheck).
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	if len(args) > 1 && (args[1] == "-healthcheck" || args[1] == "healthcheck") {
		return ops.Probe(ctx, config.New(getenv).String("MINTGATE_HTTP_ADDR", defaultHTTPAddr))
	}
	fs := flag.NewFlagSet("completer", flag.ContinueOnError)
	fs.SetOutput(stdout)
	receivers := fs.Int("receivers", 4, "concurrent SQS long polls")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *receivers < 1 {
		return fmt.Errorf("-receivers: %d is not a positive number", *receivers)
	}
	log := slog.New(slog.NewJSONHandler(stdout, nil)).With("service", "completer")
	c, err := loadConfig(getenv)
	if err != nil {
		return err
	}

	// Redis connects lazily: a completer started while Redis is down holds
	// what its first receives bring, and receives nothing more, until it
	// answers (and /readyz says why).
	rdb, err := c.Redis.Client()
	if err != nil {
		return err
	}
	defer rdb.Close()
	q, err := newSQS(ctx, c)
	if err != nil {
		return err
	}

	reg := ops.NewRegistry()
	m := newMetrics(reg)
	pingRedis := func(ctx context.Context) error { return rdb.Ping(ctx).Err() }
	pingSQS := func(ctx context.Context) error {
		_, err := q.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
			QueueUrl:       aws.String(c.QueueURL),
			AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
		})
		return err
	}
	comp := &completer{rdb: rdb, bucket: c.Bucket, doneTTL: c.DoneTTL, m: m, log: log}
	checks := []ops.Check{{Name: "redis", Ping: pingRedis}, {Name: "sqs", Ping: pingSQS}}
	ready := pingRedis
	if c.Events {
		pub, nc, err := openEvents(ctx, c, log)
		if err != nil {
			return err
		}
		defer nc.Close()
		comp.events = pub
		checks = append(checks, ops.Check{Name: "nats", Ping: pub.Ping})
		// A held message waits for both stores it writes to.
		ready = func(ctx context.Context) error {
			if err := pingRedis(ctx); err != nil {
				return err
			}
			return pub.Ping(ctx)
		}
	}
	cons := &consumer{
		q: q, queueURL: c.QueueURL, visibility: c.Visibility,
		handle: comp.handle, ready: ready, gate: newGate(), m: m, log: log,
		backoff: backoff.Policy{Min: 100 * time.Millisecond, Max: 5 * time.Second, Jitter: 0.5},
	}

	// The DLQ's depth is only watched: its own goroutine, never in the
	// receivers' way, stopped with them.
	dlq := &dlqWatcher{q: q, queueURL: c.QueueURL, m: m, log: log}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var watching sync.WaitGroup
	watching.Go(func() { dlq.run(ctx) })
	httpErr := make(chan error, 1)
	go func() {
		httpErr <- ops.Serve(ctx, log, c.HTTPAddr, ops.Handler(reg, checks...))
		cancel() // a server that cannot listen stops the receivers too
	}()
	log.Info("completer starting", "config", c.String(), "receivers", *receivers)
	cons.run(ctx, *receivers)
	err = <-httpErr
	watching.Wait()
	log.Info("completer stopped")
	return err
}

// openEvents connects to NATS as the completer and opens the
// upload-completed events stream, creating it if absent (never changing an
// existing one). The connection reconnects forever; while it is down,
// publishes fail at once and the messages they came from are held.
func openEvents(ctx context.Context, c cfg, log *slog.Logger) (*uploads.Publisher, *nats.Conn, error) {
	opts, err := c.NATS.Options("completer")
	if err != nil {
		return nil, nil, err
	}
	nc, err := nats.Connect(c.NATS.URL, append(opts,
		nats.Timeout(2*time.Second),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond),
		nats.ReconnectBufSize(-1), // no buffering: a publish while disconnected fails now
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "err", err)
			}
		}),
	)...)
	if err != nil {
		return nil, nil, fmt.Errorf("MINTGATE_NATS_URL: connect %s: %w", config.RedactURL(c.NATS.URL), err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	pub, err := uploads.Open(octx, js, c.DoneTTL)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	if pub.Window < c.DoneTTL {
		log.Warn("stream "+uploads.Stream+" de-duplicates for less than MINTGATE_DONE_TTL: "+
			"a record redelivered after a crash past its window can publish its event twice",
			"duplicate_window", pub.Window, "done_ttl", c.DoneTTL)
	}
	return pub, nc, nil
}

// newSQS is the SQS client: region and credentials from the environment
// given to run when set, else the SDK's default chain (shared files, IRSA,
// IMDS …); the endpoint from MINTGATE_SQS_ENDPOINT when set.
func newSQS(ctx context.Context, c cfg) (*sqs.Client, error) {
	ac, err := c.AWS.Load(ctx)
	if err != nil {
		return nil, err
	}
	return sqs.NewFromConfig(ac, func(o *sqs.Options) {
		if c.SQSEndpoint != "" {
			o.BaseEndpoint = aws.String(c.SQSEndpoint)
		}
	}), nil
}
