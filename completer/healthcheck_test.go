package main

import (
	"context"
	"io"
	"net"
	"strconv"
	"testing"

	"github.com/mintgate/mintgate/shared/testenv"
)

// TestHealthcheck: `completer -healthcheck`, the image's container
// healthcheck, passes against a running completer (listening on a wildcard
// address, as in a container) and fails when no completer listens.
func TestHealthcheck(t *testing.T) {
	s := startStack(t, nil)
	_, port, _ := net.SplitHostPort(s.addr)
	probe := func(arg, addr string) error {
		return run(context.Background(), []string{"completer", arg}, func(k string) string { return map[string]string{"MINTGATE_HTTP_ADDR": addr}[k] }, io.Discard)
	}
	for _, arg := range []string{"-healthcheck", "healthcheck"} {
		if err := probe(arg, ":"+port); err != nil {
			t.Errorf("%s, completer running: %v", arg, err)
		}
		if err := probe(arg, "127.0.0.1:"+strconv.Itoa(testenv.FreePort(t))); err == nil {
			t.Errorf("%s, no completer listening: no error", arg)
		}
	}
}
