// Package testenv starts the real servers tests talk to — redis-server, a
// three-master Redis Cluster, nats-server — as child processes on free
// loopback ports, and stops them by PID when the test ends. Nothing here
// relies on servers that happen to run on the machine's default ports.
package testenv

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
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
const Module = "github.com/mintgate/mintgate"

// Root is the repository's root folder: the nearest folder at or above the
// working directory whose go.mod is the services' module.
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if data, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && modulePath(data) == Module {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("testenv: no go.mod of %s above the working directory", Module)
		}
		dir = parent
	}
}

// modulePath is the path a go.mod's module line declares.
func modulePath(gomod []byte) string {
	for line := range strings.Lines(string(gomod)) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	return ""
}

// Binary finds a server binary: $MINTGATE_TOOLS/bin, then the repo's
// git-ignored .tools/bin where the scripts install it, then PATH.
func Binary(tb testing.TB, name string) string {
	tb.Helper()
	var dirs []string
	if d := os.Getenv("MINTGATE_TOOLS"); d != "" {
		dirs = append(dirs, filepath.Join(d, "bin"))
	}
	if root, err := Root(); err == nil {
		dirs = append(dirs, filepath.Join(root, ".tools", "bin"))
	}
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		tb.Fatalf("testenv: %s not found; run deploy/local/tools.sh (or make test) to install it", name)
	}
	return p
}

// Process is a server the test started.
type Process struct {
	tb   testing.TB
	name string
	args []string
	env  []string
	dir  string
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when the running cmd has exited
	out  *Buffer
}

func newProcess(tb testing.TB, bin string, args ...string) *Process {
	tb.Helper()
	p := &Process{tb: tb, name: bin, args: args, dir: tb.TempDir()}
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
	p.env = env
	p.Start()
	return p
}

// Start starts the process (again) with the same arguments.
func (p *Process) Start() {
	p.tb.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return
	}
	cmd := exec.Command(p.name, p.args...)
	cmd.Dir = p.dir
	if p.env != nil {
		cmd.Env = append(os.Environ(), p.env...)
	}
	p.out = new(Buffer)
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		p.tb.Fatalf("testenv: start %s: %v", p.name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	p.cmd, p.done = cmd, done
}

// Exited reports whether the process started last has ended by itself
// (or was stopped).
func (p *Process) Exited() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return true
	}
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop ends the process by PID with SIGINT and waits for it.
func (p *Process) Stop() { p.signal(os.Interrupt) }

// Kill ends the process by PID with SIGKILL and waits for it.
func (p *Process) Kill() { p.signal(os.Kill) }

// Pause stops the process with SIGSTOP, as a stalled disk or a long GC
// pause would: it keeps its sockets and its state but answers nothing
// until Resume. Stop and Kill end a paused process too.
func (p *Process) Pause() { p.send(syscall.SIGSTOP) }

// Resume lets a paused process run again with SIGCONT.
func (p *Process) Resume() { p.send(syscall.SIGCONT) }

// PID is the running process's id, 0 when it is not running.
func (p *Process) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// send delivers sig to the running process, if any, by PID.
func (p *Process) send(sig os.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		_ = p.cmd.Process.Signal(sig)
	}
}

func (p *Process) signal(sig os.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	// A paused process acts on SIGINT only once it runs again.
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	p.cmd, p.done = nil, nil
}

// Output is what the process printed so far.
func (p *Process) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.out == nil {
		return ""
	}
	return p.out.String()
}

// Buffer is an io.Writer safe to read while it is written: a process's
// output (exec's copying goroutines write it while the test reads it), or an
// in-process service's log.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String is everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitTCP waits until addr accepts connections.
func waitTCP(tb testing.TB, p *Process, addr string) {
	tb.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	tb.Fatalf("testenv: %s did not listen on %s:\n%s", p.name, addr, p.Output())
}

func addr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
