package main

import (
	"time"

	"github.com/mintgate/mintgate/shared/config"
	"github.com/mintgate/mintgate/shared/ledger"
	"github.com/mintgate/mintgate/shared/tiers"
)

// settings is the sweeper's configuration (docs/configuration.md), and the knobs tests
// turn through options.
type settings struct {
	Redis    config.Redis
	NATS     config.NATS
	HTTPAddr string
	// S3 is the bucket of the multipart uploads the sweeper aborts, and
	// AWS its credentials (empty: the SDK's chain).
	S3  config.S3
	AWS config.AWS
	// Limits holds Tiers (MINTGATE_TIERS with MINTGATE_TENANT_TIERS'
	// overrides: each refund is capped by them) and TiersFile
	// (MINTGATE_TENANT_TIERS_FILE: more overrides, re-read while running).
	tiers.Limits
	Grace    time.Duration
	Secret   []byte // MINTGATE_GRANT_SECRET: only batches it verifies are applied
	Previous []byte // MINTGATE_GRANT_SECRET_PREVIOUS: also verifies, during a rotation
	// Postgres is MINTGATE_POSTGRES_URL: the upload records' database,
	// whose rows this sweeper's feed writes; "" is records off.
	Postgres string

	// TrimInterval is how often the ledger messages of swept grants are
	// purged; no variable sets it (tests shorten it with an option).
	TrimInterval time.Duration
}

// defaultHTTPAddr is where the sweeper listens without MINTGATE_HTTP_ADDR.
const defaultHTTPAddr = ":8082"

// defaultTrimInterval is settings.TrimInterval outside tests.
const defaultTrimInterval = 10 * time.Second

// loadSettings reads the environment; every bad value is reported at once,
// each by its variable's name.
func loadSettings(getenv func(string) string) (settings, error) {
	e := config.New(getenv)
	s := settings{
		Redis:        e.Redis(),
		NATS:         e.NATS(),
		HTTPAddr:     e.HTTPAddr(defaultHTTPAddr),
		S3:           e.S3(),
		AWS:          e.AWS(),
		Limits:       tiers.ReadLimits(e),
		Grace:        e.SweepGrace(),
		Secret:       ledger.ReadSecret(e),
		TrimInterval: defaultTrimInterval,
		Postgres:     e.PostgresURL(),
	}
	s.Previous = ledger.ReadPreviousSecret(e, s.Secret)
	return s, e.Err()
}
