package main

import (
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/mintgate/mintgate/shared/config"
)

// settings is the sweeper's configuration (SPEC §5).
type settings struct {
	Redis    config.Redis
	NATSURL  string
	HTTPAddr string
	Tiers    config.TierSet // MINTGATE_TIERS with MINTGATE_TENANT_TIERS' overrides
	Grace    time.Duration
	Secret   []byte // MINTGATE_GRANT_SECRET: only batches it verifies are applied
}

// defaultHTTPAddr is where the sweeper listens without MINTGATE_HTTP_ADDR.
const defaultHTTPAddr = ":8082"

// loadSettings reads the environment; every bad value is reported at once,
// each by its variable's name.
func loadSettings(getenv func(string) string) (settings, error) {
	e := config.New(getenv)
	s := settings{
		Redis:    e.Redis(),
		NATSURL:  natsURL(e, "MINTGATE_NATS_URL", "nats://127.0.0.1:4222"),
		HTTPAddr: e.String("MINTGATE_HTTP_ADDR", defaultHTTPAddr),
		Tiers:    e.TenantTiers("MINTGATE_TENANT_TIERS", e.Tiers("MINTGATE_TIERS", config.DefaultTiers)),
		Grace:    e.Duration("MINTGATE_SWEEP_GRACE", 30*time.Second),
		Secret:   e.GrantSecret(),
	}
	if _, _, err := net.SplitHostPort(s.HTTPAddr); err != nil {
		e.Fail("MINTGATE_HTTP_ADDR", "%q is not host:port (such as :8082)", s.HTTPAddr)
	}
	return s, e.Err()
}

// natsURL reads one nats:// (or tls://) URL, or a comma-separated list of
// them for a cluster's seeds.
func natsURL(e *config.Env, name, def string) string {
	v := e.String(name, def)
	for item := range strings.SplitSeq(v, ",") {
		u, err := url.Parse(strings.TrimSpace(item))
		if err != nil || u.Host == "" || (u.Scheme != "nats" && u.Scheme != "tls") {
			e.Fail(name, "%q is not a nats:// or tls:// URL (or a comma-separated list of them)", item)
			return def
		}
	}
	return v
}
