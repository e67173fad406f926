package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/mintgate/mintgate/shared/config"
)

func env(m map[string]string) *config.Env {
	return config.New(func(k string) string { return m[k] })
}

func TestDefaultTiers(t *testing.T) {
	tiers, err := config.ParseTiers(config.DefaultTiers)
	if err != nil {
		t.Fatal(err)
	}
	a := tiers[config.TierAnonymous]
	if a.Capacity != 5 || a.Window() != 60 {
		t.Errorf("anonymous %+v", a)
	}
	if u := tiers[config.TierUser]; u.Capacity != 30 || u.Rate != 0.5 || u.Window() != 60 {
		t.Errorf("user %+v", u)
	}
	if tn := tiers[config.TierTenant]; tn.Capacity != 600 || tn.Rate != 10 {
		t.Errorf("tenant %+v", tn)
	}
}

func TestBadValuesNameTheVariable(t *testing.T) {
	cases := map[string]string{
		"MINTGATE_TIERS":            "user=30:0.5",
		"MINTGATE_REDIS_TIMEOUT":    "soon",
		"MINTGATE_REDIS_URL":        "http://x",
		"MINTGATE_URL_TTL":          "-1s",
		"MINTGATE_MAX_OBJECT_BYTES": "lots",
	}
	for name, val := range cases {
		e := env(map[string]string{name: val})
		e.Tiers("MINTGATE_TIERS", config.DefaultTiers)
		e.Redis()
		e.Duration("MINTGATE_URL_TTL", 120*time.Second)
		e.Int("MINTGATE_MAX_OBJECT_BYTES", 1)
		if err := e.Err(); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%q: error %v does not name it", name, val, err)
		}
	}
}

func TestTierForms(t *testing.T) {
	for _, bad := range []string{"anonymous=5:0,user=1:1,tenant=1:1", "anonymous=x:1,user=1:1,tenant=1:1", "anonymous=5:5/0s,user=1:1,tenant=1:1", "anonymous=5,user=1:1,tenant=1:1"} {
		if _, err := config.ParseTiers(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
