package main

import (
	"context"
	"io"
	"net"
	"strconv"
	"testing"

	"github.com/mintgate/mintgate/shared/testenv"
)

// TestHealthcheck: `signer -healthcheck`, the image's container healthcheck,
// passes against a running signer (listening on a wildcard address, as in a
// container) and fails when no signer listens.
func TestHealthcheck(t *testing.T) {
	env := newStack(t).env(t)
	start(t, env)
	_, port, _ := net.SplitHostPort(env["MINTGATE_HTTP_ADDR"])
	probe := func(arg, addr string) error {
		return run(context.Background(), []string{"signer", arg}, mapEnv(map[string]string{"MINTGATE_HTTP_ADDR": addr}), io.Discard)
	}
	for _, arg := range []string{"-healthcheck", "healthcheck"} {
		if err := probe(arg, ":"+port); err != nil {
			t.Errorf("%s, signer running: %v", arg, err)
		}
		if err := probe(arg, "127.0.0.1:"+strconv.Itoa(testenv.FreePort(t))); err == nil {
			t.Errorf("%s, no signer listening: no error", arg)
		}
	}
}
