// Package proc runs server binaries as child processes — redis-server,
// nats-server, the module's own services — and ends them by PID: start
// one with its own environment and working folder, keep its output, wait
// until it is ready, stop it. It imports no testing, so a command (the
// bench) links it as well as the tests' helpers (shared/testenv) do.
package proc

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Config says how to run a server binary. Start reads it each time: a
// field changed while the process is not running holds from the next Start.
type Config struct {
	// Name names the process in errors; the binary's path when empty.
	Name string
	// Bin is the binary; Args its arguments.
	Bin  string
	Args []string
	// Env is added to the parent's environment (KEY=value; a later one
	// wins), or, with Isolated, is the process's whole environment.
	Env []string
	// Isolated gives the process Env alone: nothing of the parent's
	// environment (a developer's MINTGATE_* or AWS_PROFILE) leaks in.
	Isolated bool
	// Dir is its working folder; empty is the parent's.
	Dir string
	// Log is a file its output goes to, truncated at each Start; empty
	// keeps the output in memory. Output reads either.
	Log string
	// Detach runs it in a process group of its own, so that a Ctrl-C
	// reaches the parent alone, which then stops it by PID; on Linux the
	// kernel kills it should the parent die first.
	Detach bool
}

// Process is a server binary started as a child process. Its methods are
// safe for concurrent use.
type Process struct {
	Config

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when the running cmd has exited
	out  *Buffer       // its output when Log is empty
}

// New is a process of c, not started yet.
func New(c Config) *Process { return &Process{Config: c} }

// Start runs c and returns the process.
func Start(c Config) (*Process, error) {
	p := New(c)
	return p, p.Start()
}

// stopWait is how long Stop waits for the process to end before SIGKILL.
const stopWait = 10 * time.Second

// Start runs the process (again) as its Config says; nothing when it runs.
func (p *Process) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return nil
	}
	var (
		w   io.Writer
		log *os.File
	)
	if p.Log != "" {
		f, err := os.Create(p.Log)
		if err != nil {
			return fmt.Errorf("start %s: %w", p.name(), err)
		}
		w, log = f, f
	} else {
		p.out = new(Buffer)
		w = p.out
	}
	cmd := exec.Command(p.Bin, p.Args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = p.Dir, w, w
	switch {
	case p.Isolated:
		cmd.Env = p.Env
	case p.Env != nil:
		cmd.Env = append(os.Environ(), p.Env...)
	}
	if p.Detach {
		cmd.SysProcAttr = detached()
	}
	if err := cmd.Start(); err != nil {
		if log != nil {
			log.Close()
		}
		return fmt.Errorf("start %s: %w", p.name(), err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		if log != nil {
			log.Close()
		}
		close(done)
	}()
	p.cmd, p.done = cmd, done
	return nil
}

func (p *Process) name() string {
	if p.Name != "" {
		return p.Name
	}
	return p.Bin
}

// Exited reports whether the process started last has ended by itself
// (or was stopped, or never started).
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
func (p *Process) Stop() { p.StopWith(os.Interrupt) }

// Kill ends the process by PID with SIGKILL and waits for it.
func (p *Process) Kill() { p.StopWith(os.Kill) }

// StopWith sends sig to the process by PID and waits for it to end; after
// 10 s it kills it. A paused process is resumed, as it acts on sig only
// once it runs. Nothing when it does not run.
func (p *Process) StopWith(sig os.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	select {
	case <-p.done:
	case <-time.After(stopWait):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	p.cmd, p.done = nil, nil
}

// Pause stops the process with SIGSTOP, as a stalled disk or a long GC
// pause would: it keeps its sockets and its state but answers nothing
// until Resume. Stop and Kill end a paused process too.
func (p *Process) Pause() { p.send(syscall.SIGSTOP) }

// Resume lets a paused process run again with SIGCONT.
func (p *Process) Resume() { p.send(syscall.SIGCONT) }

// send delivers sig to the running process, if any, by PID.
func (p *Process) send(sig os.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		_ = p.cmd.Process.Signal(sig)
	}
}

// PID is the running process's id, 0 when it is not running.
func (p *Process) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Output is what the process printed so far (since its last Start).
func (p *Process) Output() string {
	if p.Log != "" {
		b, _ := os.ReadFile(p.Log)
		return string(b)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.out == nil {
		return ""
	}
	return p.out.String()
}

// Tail is the last n bytes of Output, for an error message.
func (p *Process) Tail(n int) string {
	s := p.Output()
	if len(s) > n {
		s = s[len(s)-n:]
	}
	return s
}

// Buffer is an io.Writer safe to read while it is written: a process's
// output (exec's copying goroutines write it while the parent reads it),
// or an in-process service's log.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends b.
func (w *Buffer) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(b)
}

// String is everything written so far.
func (w *Buffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
