package main

import (
	"fmt"
	"time"

	"github.com/mintgate/mintgate/shared/config"
	"github.com/mintgate/mintgate/shared/quota"
)

// maxVisibility is the longest visibility timeout SQS accepts.
const maxVisibility = 12 * time.Hour

// cfg is the completer's configuration, read from the variables of docs/configuration.md.
type cfg struct {
	HTTPAddr string
	Redis    config.Redis

	// Bucket is MINTGATE_S3_BUCKET, required: without it any bucket
	// notifying the queue could mark grants done.
	Bucket string

	QueueURL    string
	SQSEndpoint string
	// Visibility is passed to every ReceiveMessage; 0 keeps the queue's own.
	Visibility time.Duration

	// Receivers is how many long polls run at once
	// (MINTGATE_SQS_RECEIVERS; run's -receivers flag wins over it).
	Receivers int

	DoneTTL time.Duration
	URLTTL  time.Duration
	Grace   time.Duration

	// NATS is set when MINTGATE_NATS_URL is: the completer then publishes
	// upload-completed events (docs/events.md). Without it, events are off.
	NATS   config.NATS
	Events bool

	// The SDK's variables, read through run's getenv so a test's
	// environment counts; empty values leave the SDK's default chain.
	AWS config.AWS
}

// defaultHTTPAddr is where the completer listens without MINTGATE_HTTP_ADDR.
const defaultHTTPAddr = ":8081"

// defaultReceivers is cfg.Receivers when neither MINTGATE_SQS_RECEIVERS
// nor -receivers sets it.
const defaultReceivers = 4

// loadConfig reads every variable and reports all bad values at once, each
// naming its variable.
func loadConfig(getenv func(string) string) (cfg, error) {
	e := config.New(getenv)
	c := cfg{
		HTTPAddr:    e.HTTPAddr(defaultHTTPAddr),
		Redis:       e.Redis(),
		Bucket:      e.S3Bucket(),
		QueueURL:    e.URL("MINTGATE_SQS_QUEUE_URL", "", "https", "http"),
		SQSEndpoint: e.URL("MINTGATE_SQS_ENDPOINT", "", "https", "http"),
		Visibility:  e.Duration("MINTGATE_SQS_VISIBILITY_TIMEOUT", 0),
		DoneTTL:     e.Duration("MINTGATE_DONE_TTL", 15*time.Minute),
		URLTTL:      e.URLTTL(),
		Grace:       e.SweepGrace(),
		Receivers:   int(e.Int("MINTGATE_SQS_RECEIVERS", defaultReceivers)),

		AWS: e.AWS(),
	}
	if getenv("MINTGATE_NATS_URL") != "" {
		c.NATS, c.Events = e.NATS(), true
	}
	if c.QueueURL == "" {
		e.Required("MINTGATE_SQS_QUEUE_URL")
	}
	if v := c.Visibility; v != 0 && (v%time.Second != 0 || v > maxVisibility) {
		e.Fail("MINTGATE_SQS_VISIBILITY_TIMEOUT", "%s is not whole seconds between 1s and 12h", v)
	}
	// A done marker must outlive the sweeper's check by a wide margin
	// (quota.GrantRecordTTL says why).
	if need := quota.GrantRecordTTL(c.URLTTL, c.Grace); c.DoneTTL < need {
		e.Fail("MINTGATE_DONE_TTL", "%s must be at least 2 × (MINTGATE_URL_TTL %s + MINTGATE_SWEEP_GRACE %s) = %s, "+
			"so a done marker outlives the sweeper's check", c.DoneTTL, c.URLTTL, c.Grace, need)
	}
	if err := e.Err(); err != nil {
		return cfg{}, err
	}
	return c, nil
}

// String is the configuration for the start-up log, without secrets.
func (c cfg) String() string {
	events := "off"
	if c.Events {
		events = config.RedactURL(c.NATS.URL)
	}
	return fmt.Sprintf("bucket=%s queue=%s endpoint=%q visibility=%s done_ttl=%s url_ttl=%s grace=%s events=%s",
		c.Bucket, config.RedactURL(c.QueueURL), config.RedactURL(c.SQSEndpoint), c.Visibility, c.DoneTTL, c.URLTTL, c.Grace, events)
}
