package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mintgate/mintgate/shared/config"
	"github.com/mintgate/mintgate/shared/dial"
	"github.com/mintgate/mintgate/shared/events"
)

// openEvents connects to NATS as the completer and returns the publisher
// of the upload-completed events stream, which the operator step creates
// (deploy/streams); the completer never creates or changes it. A stream
// missing or misconfigured at start is logged, not fatal: /readyz reports
// nats and every message is held (Ping fails) until the operator has run.
// The connection reconnects forever; while it is down, publishes fail at
// once and the messages they came from are held.
func openEvents(ctx context.Context, c cfg, log *slog.Logger) (*events.Publisher, *nats.Conn, error) {
	opts, err := dial.NATSOptions(c.NATS, "completer")
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
	pub := events.New(js)
	info, err := pub.Stream(octx)
	switch {
	case err != nil:
		log.Error("upload events: the stream is not usable; holding every message until the operator step (deploy/streams) creates or updates it", "err", err)
	case info.Config.Duplicates < c.DoneTTL:
		log.Warn("stream "+events.Stream+" de-duplicates for less than MINTGATE_DONE_TTL: "+
			"a record redelivered after a crash past its window can publish its event twice",
			"duplicate_window", info.Config.Duplicates, "done_ttl", c.DoneTTL)
	}
	return pub, nc, nil
}

// newSQS is the SQS client: region and credentials from the environment
// given to run when set, else the SDK's default chain (shared files, IRSA,
// IMDS …); the endpoint from MINTGATE_SQS_ENDPOINT when set.
func newSQS(ctx context.Context, c cfg) (*sqs.Client, error) {
	ac, err := dial.AWS(ctx, c.AWS)
	if err != nil {
		return nil, err
	}
	return sqs.NewFromConfig(ac, func(o *sqs.Options) {
		if c.SQSEndpoint != "" {
			o.BaseEndpoint = aws.String(c.SQSEndpoint)
		}
	}), nil
}
