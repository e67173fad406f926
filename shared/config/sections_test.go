package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/mintgate/mintgate/shared/config"
)

// The sections every service shares: their defaults, and a bad value named
// by its variable.
func TestSections(t *testing.T) {
	e := env(map[string]string{"MINTGATE_S3_BUCKET": "uploads"})
	addr, ttl, grace, s3 := e.HTTPAddr(":8082"), e.URLTTL(), e.SweepGrace(), e.S3()
	if err := e.Err(); err != nil {
		t.Fatal(err)
	}
	if addr != ":8082" || ttl != 120*time.Second || grace != 30*time.Second || s3 != (config.S3{Bucket: "uploads"}) {
		t.Errorf("defaults: %q %v %v %+v", addr, ttl, grace, s3)
	}

	for _, tc := range []struct{ name, value string }{
		{"MINTGATE_HTTP_ADDR", "8080"},
		{"MINTGATE_HTTP_ADDR", "localhost"},
		{"MINTGATE_HTTP_ADDR", "127.0.0.1:"},
		{"MINTGATE_URL_TTL", "500ms"},
		{"MINTGATE_URL_TTL", "169h"},
		{"MINTGATE_SWEEP_GRACE", "0s"},
		{"MINTGATE_S3_BUCKET", ""},
		{"MINTGATE_S3_ENDPOINT", "s3.example"},
		{"MINTGATE_S3_PATH_STYLE", "yes please"},
	} {
		e := env(map[string]string{"MINTGATE_S3_BUCKET": "uploads", tc.name: tc.value})
		e.HTTPAddr(":8082")
		e.URLTTL()
		e.SweepGrace()
		e.S3()
		if err := e.Err(); err == nil || !strings.Contains(err.Error(), tc.name) {
			t.Errorf("%s=%q: error %v does not name it", tc.name, tc.value, err)
		}
	}
}
