package service_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mintgate/mintgate/shared/service"
)

func TestIsHealthcheck(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"signer", "-healthcheck"}, true},
		{[]string{"signer", "healthcheck"}, true},
		{[]string{"signer"}, false},
		{[]string{"signer", "-receivers", "2"}, false},
		{nil, false},
	} {
		if got := service.IsHealthcheck(tc.args); got != tc.want {
			t.Errorf("IsHealthcheck(%q) = %v", tc.args, got)
		}
	}
}

// Healthcheck probes MINTGATE_HTTP_ADDR, or the service's default when it
// is unset.
func TestHealthcheck(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	_, port, _ := net.SplitHostPort(addr)
	if err := service.Healthcheck(context.Background(), func(string) string { return "" }, ":"+port); err != nil {
		t.Errorf("default address: %v", err)
	}
	if err := service.Healthcheck(context.Background(), func(k string) string {
		return map[string]string{"MINTGATE_HTTP_ADDR": addr}[k]
	}, ":1"); err != nil {
		t.Errorf("MINTGATE_HTTP_ADDR: %v", err)
	}
}

// -h prints the usage with the service's flags and is flag.ErrHelp, which
// Main takes for success; an unknown flag is an error.
func TestFlags(t *testing.T) {
	var out bytes.Buffer
	n := 0
	define := func(fs *flag.FlagSet) { fs.IntVar(&n, "receivers", 4, "concurrent long polls") }
	if err := service.Flags("completer", []string{"completer", "-h"}, &out, define); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
	if s := out.String(); !strings.Contains(s, "usage: completer") || !strings.Contains(s, "-receivers") {
		t.Errorf("usage %q", s)
	}
	if err := service.Flags("completer", []string{"completer", "-receivers", "3"}, &out, define); err != nil || n != 3 {
		t.Errorf("-receivers 3: %v, %d", err, n)
	}
	if err := service.Flags("sweeper", []string{"sweeper", "-bogus"}, &out, nil); err == nil {
		t.Error("-bogus accepted")
	}
}

// The logger writes JSON lines to run's stdout, each naming the service.
func TestLogger(t *testing.T) {
	var out bytes.Buffer
	service.Logger(&out, "sweeper").Info("sweeper started", "grace", "30s")
	var line map[string]any
	if err := json.Unmarshal(out.Bytes(), &line); err != nil {
		t.Fatalf("%q: %v", out.String(), err)
	}
	if line["service"] != "sweeper" || line["msg"] != "sweeper started" || line["grace"] != "30s" {
		t.Errorf("line %v", line)
	}
}
