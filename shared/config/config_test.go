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

func TestBadValuesNameTheVariable(t *testing.T) {
	cases := map[string]string{
		"MINTGATE_REDIS_TIMEOUT":    "soon",
		"MINTGATE_REDIS_URL":        "http://x",
		"MINTGATE_URL_TTL":          "-1s",
		"MINTGATE_MAX_OBJECT_BYTES": "lots",
	}
	for name, val := range cases {
		e := env(map[string]string{name: val})
		e.Redis()
		e.Duration("MINTGATE_URL_TTL", 120*time.Second)
		e.Int("MINTGATE_MAX_OBJECT_BYTES", 1)
		if err := e.Err(); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%q: error %v does not name it", name, val, err)
		}
	}
}
