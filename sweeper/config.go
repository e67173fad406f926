package main

import (
	"net"
	"time"

	"github.com/mintgate/mintgate/shared/config"
)

// settings is the sweeper's configuration (SPEC §5).
type settings struct {
	Redis     config.Redis
	NATS      config.NATS
	HTTPAddr  string
	Tiers     config.TierSet // MINTGATE_TIERS with MINTGATE_TENANT_TIERS' overrides
	TiersFile string         // MINTGATE_TENANT_TIERS_FILE: more overrides, re-read while running
	Grace     time.Duration
	Secret    []byte // MINTGATE_GRANT_SECRET: only batches it verifies are applied
	Previous  []byte // MINTGATE_GRANT_SECRET_PREVIOUS: also verifies, during a rotation
}

// defaultHTTPAddr is where the sweeper listens without MINTGATE_HTTP_ADDR.
const defaultHTTPAddr = ":8082"

// loadSettings reads the environment; every bad value is reported at once,
// each by its variable's name.
func loadSettings(getenv func(string) string) (settings, error) {
	e := config.New(getenv)
	s := settings{
		Redis:     e.Redis(),
		NATS:      e.NATS(),
		HTTPAddr:  e.String("MINTGATE_HTTP_ADDR", defaultHTTPAddr),
		Tiers:     e.TenantTiers("MINTGATE_TENANT_TIERS", e.Tiers("MINTGATE_TIERS", config.DefaultTiers)),
		TiersFile: e.String("MINTGATE_TENANT_TIERS_FILE", ""),
		Grace:     e.Duration("MINTGATE_SWEEP_GRACE", 30*time.Second),
		Secret:    e.GrantSecret(),
	}
	s.Previous = e.PreviousGrantSecret(s.Secret)
	if _, _, err := net.SplitHostPort(s.HTTPAddr); err != nil {
		e.Fail("MINTGATE_HTTP_ADDR", "%q is not host:port (such as :8082)", s.HTTPAddr)
	}
	return s, e.Err()
}
