package main

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/mintgate/mintgate/shared/testenv"
)

// With MINTGATE_PPROF_ADDR the profiles answer there and not on the API port.
func TestPprofIsOptInAndApart(t *testing.T) {
	env := newStack(t).env(t)
	pprofAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	env["MINTGATE_PPROF_ADDR"] = pprofAddr
	s := start(t, env)

	res, err := http.Get("http://" + pprofAddr + "/debug/pprof/")
	if err != nil {
		t.Fatalf("pprof index: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Errorf("pprof index: %d", res.StatusCode)
	}
	if r := s.do(http.MethodGet, "/debug/pprof/", nil, ""); r.status != http.StatusNotFound {
		t.Errorf("API port serves /debug/pprof/: %d", r.status)
	}
}

func TestLoopbackAddr(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:6060": true, "127.1.2.3:6060": true, "[::1]:6060": true, "localhost:6060": true,
		":6060": false, "0.0.0.0:6060": false, "10.0.0.5:6060": false, "[::]:6060": false, "127.0.0.1": false,
	} {
		if got := loopbackAddr(addr); got != want {
			t.Errorf("loopbackAddr(%q) = %v, want %v", addr, got, want)
		}
	}
}
