package testenv

import (
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"
)

// Service is one of the module's commands (signer, completer, sweeper),
// built by BuildCommand and run as a process with its own environment on
// a port of its own (MINTGATE_HTTP_ADDR). Kill or Stop and then Start run
// it again with the same environment on the same port.
type Service struct {
	*Process
	// URL is its base URL, http://127.0.0.1:<port>.
	URL string
	// OpsURL is the signer's ops port (MINTGATE_OPS_ADDR: /metrics), a
	// free port of its own unless envs name one; the other services ignore it.
	OpsURL string
}

// readyTimeout bounds how long a service may take to answer /readyz.
const readyTimeout = 30 * time.Second

// StartService builds pkg (such as "./signer", once per test process),
// runs it with the variables of envs (later maps win) on a free port and
// waits until /readyz answers 200. A port can be taken by someone else
// between FreePort and the service's listen, so a service that exits with
// "address already in use" is started again on another.
func StartService(tb testing.TB, pkg string, envs ...map[string]string) *Service {
	tb.Helper()
	bin := BuildCommand(tb, pkg)
	vars := map[string]string{}
	for _, m := range envs {
		for k, v := range m {
			vars[k] = v
		}
	}
	if vars["MINTGATE_OPS_ADDR"] == "" {
		// Its default, :9080, would collide between two signers.
		vars["MINTGATE_OPS_ADDR"] = addr(FreePort(tb))
	}
	opsURL := "http://" + vars["MINTGATE_OPS_ADDR"]
	env := make([]string, 0, len(vars)+1)
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	for range 3 {
		port := FreePort(tb)
		s := &Service{Process: newProcess(tb, bin), URL: "http://" + addr(port), OpsURL: opsURL}
		s.Env = append([]string{"MINTGATE_HTTP_ADDR=" + addr(port)}, env...)
		s.Process.Start()
		if s.WaitReady(readyTimeout) {
			return s
		}
		if s.Exited() && strings.Contains(s.Output(), "address already in use") {
			continue
		}
		tb.Fatalf("testenv: %s not ready at %s:\n%s", pkg, s.URL, s.Output())
	}
	tb.Fatalf("testenv: %s: no free port after 3 tries", pkg)
	return nil
}

// Start starts the service again and waits until /readyz answers 200.
func (s *Service) Start() {
	s.tb.Helper()
	s.Process.Start()
	if !s.WaitReady(readyTimeout) {
		s.tb.Fatalf("testenv: %s not ready at %s after a restart:\n%s", s.Bin, s.URL, s.Output())
	}
}

// WaitReady polls /readyz until it answers 200 (true), the process exits
// or d passes (false).
func (s *Service) WaitReady(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) && !s.Exited() {
		if s.Ready() {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// readyClient is short-timed: a paused dependency must not hang a probe.
var readyClient = &http.Client{Timeout: time.Second}

// Ready reports whether /readyz answers 200 now.
func (s *Service) Ready() bool {
	resp, err := readyClient.Get(s.URL + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
