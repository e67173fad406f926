package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/mintgate/mintgate/shared/config"
	"github.com/mintgate/mintgate/shared/quota"
	"github.com/mintgate/mintgate/shared/webhook"
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

	// S3 is how the completer reads, quarantines and deletes objects (its
	// own calls: MINTGATE_S3_INTERNAL_ENDPOINT when set).
	S3 config.S3
	// Verify is the verification gate: the size check always; the content
	// checks (type, pixels, scan) unless MINTGATE_VERIFY=off.
	Verify verifyConfig

	// Webhooks is the webhook deliveries' configuration (webhooks.go);
	// TiersFile is MINTGATE_TENANT_TIERS_FILE, which may name tenants' own
	// endpoints.
	Webhooks  webhook.Config
	TiersFile string
}

// verifyConfig is the verification gate's configuration.
type verifyConfig struct {
	Content   bool   // MINTGATE_VERIFY: on (default) or off
	MaxPixels int64  // MINTGATE_MAX_IMAGE_PIXELS: width × height at most; 0 off
	ClamdAddr string // MINTGATE_CLAMD_ADDR: host:port or unix:/path; "" no scan
	ScanMax   int64  // MINTGATE_SCAN_MAX_BYTES: the scan's first bytes of an object
}

// Defaults of the verification gate.
const (
	defaultMaxPixels = 100_000_000
	defaultScanMax   = 100 << 20
)

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
		QueueURL:    e.URL("MINTGATE_SQS_QUEUE_URL", "", "https", "http"),
		SQSEndpoint: e.URL("MINTGATE_SQS_ENDPOINT", "", "https", "http"),
		Visibility:  e.Duration("MINTGATE_SQS_VISIBILITY_TIMEOUT", 0),
		DoneTTL:     e.Duration("MINTGATE_DONE_TTL", 15*time.Minute),
		URLTTL:      e.URLTTL(),
		Grace:       e.SweepGrace(),
		Receivers:   int(e.Int("MINTGATE_SQS_RECEIVERS", defaultReceivers)),

		AWS: e.AWS(),
		S3:  e.S3(),
	}
	c.Bucket = c.S3.Bucket
	c.Verify = loadVerify(e)
	loadWebhooks(e, getenv, &c)
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

// loadVerify reads the verification gate's variables.
func loadVerify(e *config.Env) verifyConfig {
	v := verifyConfig{Content: true, MaxPixels: defaultMaxPixels, ClamdAddr: e.String("MINTGATE_CLAMD_ADDR", ""),
		ScanMax: e.Int("MINTGATE_SCAN_MAX_BYTES", defaultScanMax)}
	switch s := e.String("MINTGATE_VERIFY", "on"); s {
	case "on":
	case "off":
		v.Content = false
	default:
		e.Fail("MINTGATE_VERIFY", "%q is not on or off", s)
	}
	if s := e.String("MINTGATE_MAX_IMAGE_PIXELS", ""); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			e.Fail("MINTGATE_MAX_IMAGE_PIXELS", "%q is not a whole number of pixels (0: no limit)", s)
		}
		v.MaxPixels = n
	}
	if a := v.ClamdAddr; a != "" {
		if _, _, err := clamdNetwork(a); err != nil {
			e.Fail("MINTGATE_CLAMD_ADDR", "%v", err)
		}
	}
	return v
}

// String is the configuration for the start-up log, without secrets.
func (c cfg) String() string {
	events := "off"
	if c.Events {
		events = config.RedactURL(c.NATS.URL)
	}
	verify := "size"
	if c.Verify.Content {
		verify = fmt.Sprintf("size,type,pixels<=%d", c.Verify.MaxPixels)
		if c.Verify.ClamdAddr != "" {
			verify += fmt.Sprintf(",clamd=%s(first %d bytes)", c.Verify.ClamdAddr, c.Verify.ScanMax)
		}
	}
	return fmt.Sprintf("bucket=%s queue=%s endpoint=%q visibility=%s done_ttl=%s url_ttl=%s grace=%s events=%s verify=%s s3=%q",
		c.Bucket, config.RedactURL(c.QueueURL), config.RedactURL(c.SQSEndpoint), c.Visibility, c.DoneTTL, c.URLTTL, c.Grace, events,
		verify, config.RedactURL(c.S3.CallEndpoint()))
}
