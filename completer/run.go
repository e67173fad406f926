package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/backoff"
	"github.com/mintgate/mintgate/shared/dial"
	"github.com/mintgate/mintgate/shared/ops"
	"github.com/mintgate/mintgate/shared/pipeline"
	"github.com/mintgate/mintgate/shared/quota"
	"github.com/mintgate/mintgate/shared/s3event"
	"github.com/mintgate/mintgate/shared/service"
	"github.com/mintgate/mintgate/shared/telemetry"
)

// run starts the completer with the environment getenv reads and works
// until ctx ends. A bad configuration value stops it before it starts.
// The one flag, -receivers, sets how many long polls run at once (over
// MINTGATE_SQS_RECEIVERS); -healthcheck instead probes the completer
// already listening on MINTGATE_HTTP_ADDR (the container healthcheck).
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	receivers := 0 // not given
	log, err := service.Start(ctx, service.Spec{Name: "completer", HTTPAddr: defaultHTTPAddr, Flags: receiversFlag(&receivers)}, args, getenv, stdout)
	if log == nil {
		return err
	}
	c, err := configure(getenv, receivers)
	if err != nil {
		return err
	}
	tel, err := telemetry.Setup(ctx, "completer", getenv)
	if err != nil {
		return err
	}
	defer shutdownTracing(tel)

	// Redis connects lazily: a completer started while Redis is down holds
	// what its first receives bring, and receives nothing more, until it
	// answers (and /readyz says why).
	rdb, err := dial.Redis(c.Redis)
	if err != nil {
		return err
	}
	defer rdb.Close()
	if tel.Enabled() {
		rdb.AddHook(telemetry.RedisHook{})
	}
	q, err := newSQS(ctx, c)
	if err != nil {
		return err
	}
	reg := ops.NewRegistry()
	m := newMetrics(reg)
	store := quota.New(rdb)
	comp := &completer{store: store, bucket: c.Bucket, doneTTL: c.DoneTTL, m: m, log: log,
		trace: tracing{tel: tel, queue: c.QueueURL, traceparent: store.Traceparent}}
	clam, err := newGate(ctx, c, comp)
	if err != nil {
		return err
	}
	traceGate(comp.gate, tel)
	checks, ready, closeEvents, err := withEvents(ctx, c, comp, rdb, q, log)
	if err != nil {
		return err
	}
	defer closeEvents()
	if clam != nil {
		// A scanner that does not answer holds every upload: /readyz names
		// it, and held messages wait for it as for the stores.
		checks = append(checks, ops.Check{Name: "clamd", Ping: clam.Ping})
		ready = both(ready, clam.Ping)
	}
	cons := newConsumer(c, q, comp.handle, ready, m, log)
	hooks, err := startWebhooks(ctx, c, reg, log, tel)
	if err != nil {
		return err
	}
	defer hooks.close()
	// The DLQ's depth is only watched: its own goroutine, never in the
	// receivers' way, stopped with them.
	dlq := &dlqWatcher{q: q, queueURL: c.QueueURL, m: m, log: log}
	log.Info("completer starting", "config", c.String(), "receivers", c.Receivers)
	err = work(ctx, log, ops.Endpoint{Variable: "MINTGATE_HTTP_ADDR", Addr: c.HTTPAddr, Handler: ops.Handler(reg, append(checks, hooks.checks...)...)},
		append(hooks.workers, func(ctx context.Context) { cons.run(ctx, c.Receivers) }, dlq.run)...)
	log.Info("completer stopped")
	return err
}

// newConsumer is the SQS consumer that hands each received batch to
// handle while ready answers.
func newConsumer(c cfg, q queue, handle pipeline.Handler[s3event.Notification], ready func(context.Context) error, m *metrics, log *slog.Logger) *consumer {
	cons := &consumer{
		q: q, queueURL: c.QueueURL, visibility: c.Visibility,
		handle: handle, ready: ready, polls: newPolls(), m: m, log: log,
		// At most a second between two pings of a Redis that is down: once
		// it is back, the held events' done markers must land before the
		// sweeper, waiting for the same Redis, refunds their grants (their
		// due time may have passed during the outage). A ping a second per
		// receiver costs Redis nothing.
		backoff: backoff.Policy{Min: 100 * time.Millisecond, Max: time.Second, Jitter: 0.5},
	}
	if c.Verify.Content {
		// A batch reads up to ten objects from S3 and streams them to
		// clamd: more than the 30 s a batch of Redis writes gets.
		cons.batchTimeout = verifyBatchTimeout
	}
	return cons
}

// verifyBatchTimeout bounds the handling of one received batch when the
// content checks run (see consumer.batchTimeout).
const verifyBatchTimeout = 5 * time.Minute

// clamdTimeout bounds clamd's dial and each read or write of a scan: a
// clamd that stalls that long is down, and the upload held.
const clamdTimeout = 10 * time.Second

// newGate gives comp its verification gate: the S3 client of the
// services' own calls and, with MINTGATE_CLAMD_ADDR, clamd (returned, for
// /readyz; nil without a scanner).
func newGate(ctx context.Context, c cfg, comp *completer) (*clamd, error) {
	s3c, err := dial.S3(ctx, c.AWS, c.S3)
	if err != nil {
		return nil, err
	}
	comp.gate = &gate{s3: s3c, bucket: c.Bucket, content: c.Verify.Content, maxPixels: c.Verify.MaxPixels,
		scanMax: c.Verify.ScanMax, truncated: comp.m.scanTruncated.Inc}
	if !c.Verify.Content || c.Verify.ClamdAddr == "" {
		return nil, nil
	}
	clam, err := newClamd(c.Verify.ClamdAddr, clamdTimeout)
	if err != nil {
		return nil, fmt.Errorf("MINTGATE_CLAMD_ADDR: %w", err)
	}
	comp.gate.scan = clam
	return clam, nil
}

// both is a readiness that needs a and b.
func both(a, b func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		if err := a(ctx); err != nil {
			return err
		}
		return b(ctx)
	}
}

// configure is the configuration getenv gives with the -receivers flag
// on top (0: not given): the flag wins over MINTGATE_SQS_RECEIVERS.
func configure(getenv func(string) string, receivers int) (cfg, error) {
	c, err := loadConfig(getenv)
	if err != nil {
		return cfg{}, err
	}
	if receivers > 0 {
		c.Receivers = receivers
	}
	return c, nil
}

// receiversFlag defines -receivers, a positive number that wins over
// MINTGATE_SQS_RECEIVERS (operators' scripts pass it); *n stays 0 unless
// it is given.
func receiversFlag(n *int) func(*flag.FlagSet) {
	return func(fs *flag.FlagSet) {
		fs.Func("receivers", "concurrent SQS long polls (default MINTGATE_SQS_RECEIVERS, else 4)", func(v string) error {
			r, err := strconv.Atoi(v)
			if err != nil || r < 1 {
				return fmt.Errorf("%q is not a positive number", v)
			}
			*n = r
			return nil
		})
	}
}

// withEvents is what /readyz checks and what a held message waits for:
// Redis and SQS, and NATS too when the completer publishes
// upload-completed events (then it gives comp its publisher, and the
// function it returns closes the connection).
func withEvents(ctx context.Context, c cfg, comp *completer, rdb redis.UniversalClient, q *sqs.Client, log *slog.Logger) (checks []ops.Check, ready func(context.Context) error, closer func(), err error) {
	pingRedis := func(ctx context.Context) error { return rdb.Ping(ctx).Err() }
	pingSQS := func(ctx context.Context) error {
		_, err := q.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
			QueueUrl:       aws.String(c.QueueURL),
			AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
		})
		return err
	}
	checks = []ops.Check{{Name: "redis", Ping: pingRedis}, {Name: "sqs", Ping: pingSQS}}
	if !c.Events {
		return checks, pingRedis, func() {}, nil
	}
	pub, nc, err := openEvents(ctx, c, log)
	if err != nil {
		return nil, nil, nil, err
	}
	comp.events = pub
	checks = append(checks, ops.Check{Name: "nats", Ping: pub.Ping})
	// A held message waits for both stores it writes to.
	ready = func(ctx context.Context) error {
		if err := pingRedis(ctx); err != nil {
			return err
		}
		return pub.Ping(ctx)
	}
	return checks, ready, nc.Close, nil
}

// work serves ep and runs each worker until ctx ends, or until the server
// fails (it cannot listen): that stops the workers too. It returns once
// all have stopped, with the server's error.
func work(ctx context.Context, log *slog.Logger, ep ops.Endpoint, workers ...func(context.Context)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var running sync.WaitGroup
	for _, w := range workers {
		running.Go(func() { w(ctx) })
	}
	err := ops.ServeAll(ctx, log, ep)
	cancel()
	running.Wait()
	return err
}
