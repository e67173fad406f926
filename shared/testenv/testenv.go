// Package testenv starts the real servers tests talk to — redis-server, a
// three-master Redis Cluster, nats-server — as child processes on free
// loopback ports, and stops them by PID when the test ends. Nothing here
// relies on servers that happen to run on the machine's default ports.
package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/mintgate/mintgate/shared/proc"
)

// GrantSecret is the MINTGATE_GRANT_SECRET every test gives signers and
// sweepers, so that the batches one seals the other verifies.
const GrantSecret = "mintgate-test-grant-secret-0123456789abcdef"

// FreePort returns a loopback TCP port that was free a moment ago, and
// that no earlier call in this process returned: the kernel may hand a
// port just closed out again, and servers started together (a cluster's
// client and route ports) must not be given the same one.
func FreePort(tb testing.TB) int {
	tb.Helper()
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatalf("free port: %v", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return port
		}
	}
	tb.Fatal("free port: 100 tries gave only ports handed out before")
	return 0
}

// handedOut is every port FreePort returned in this process.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// Module is the services' module: the repository's root holds its go.mod.
// The test modules in it (integration, deploy/checks) have their own.
const Module = proc.Module

// Root is the repository's root folder: the nearest folder at or above the
// working directory whose go.mod is the services' module.
func Root() (string, error) {
	root, err := proc.Root()
	if err != nil {
		return "", fmt.Errorf("testenv: %w", err)
	}
	return root, nil
}

// Binary finds a server binary: $MINTGATE_TOOLS/bin, then the repo's
// git-ignored .tools/bin where the scripts install it, then PATH.
func Binary(tb testing.TB, name string) string {
	tb.Helper()
	root, _ := Root()
	p, err := proc.Binary(os.Getenv, root, name)
	if err != nil {
		tb.Fatalf("testenv: %v; run deploy/local/tools.sh (or make test) to install it", err)
	}
	return p
}

// Process is a server the test started: a proc.Process (Stop, Kill,
// Pause, Resume, PID, Exited, Output) that fails the test when it cannot
// start and is stopped when the test ends.
type Process struct {
	*proc.Process
	tb testing.TB
}

func newProcess(tb testing.TB, bin string, args ...string) *Process {
	tb.Helper()
	p := &Process{Process: proc.New(proc.Config{Bin: bin, Args: args, Dir: tb.TempDir()}), tb: tb}
	tb.Cleanup(p.Stop)
	return p
}

// StartProcess starts bin with extra environment variables (KEY=value) on
// top of the test's own, in a temporary working folder. It is stopped when
// the test ends; Stop, Kill and Start again restart it with the same
// arguments.
func StartProcess(tb testing.TB, bin string, env []string, args ...string) *Process {
	tb.Helper()
	p := newProcess(tb, bin, args...)
	p.Env = env
	p.Start()
	return p
}

// Start starts the process (again) with the same arguments.
func (p *Process) Start() {
	p.tb.Helper()
	if err := p.Process.Start(); err != nil {
		p.tb.Fatalf("testenv: %v", err)
	}
}

// Buffer is an io.Writer safe to read while it is written: a process's
// output, or an in-process service's log.
type Buffer = proc.Buffer

// waitTCP waits until addr accepts connections.
func waitTCP(tb testing.TB, p *Process, addr string) {
	tb.Helper()
	if err := p.WaitTCP(context.Background(), 15*time.Second, addr); err != nil {
		tb.Fatalf("testenv: %s did not listen on %s: %v\n%s", p.Bin, addr, err, p.Output())
	}
}

func addr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
