package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mintgate/mintgate/shared/ledger"
)

// fleet is every server the bench started. Each runs in a process group
// of its own, so a Ctrl-C reaches the bench alone and the bench ends each
// server by its PID; should the bench itself be killed, the kernel kills
// them (Pdeathsig).
type fleet struct {
	dir   string // working folders, stores and logs
	procs []*proc
}

// proc is one server of the fleet.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// start runs bin with args. env nil means the bench's own environment.
func (f *fleet) start(name, bin string, env []string, args ...string) (*proc, error) {
	logPath := filepath.Join(f.dir, name+".log")
	out, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = f.dir, env, out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); out.Close(); close(p.done) }()
	f.procs = append(f.procs, p)
	return p, nil
}

// stop ends every server, the last started first.
func (f *fleet) stop() {
	for i := len(f.procs) - 1; i >= 0; i-- {
		f.procs[i].stop()
	}
	f.procs = nil
}

// stop sends SIGTERM to the process's PID and waits; SIGKILL after 10 s.
func (p *proc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// tail is the end of the process's output, for an error message.
func (p *proc) tail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// waitFor polls ready until it holds, the process exits or 30 s pass.
func (p *proc) waitFor(ctx context.Context, what string, ready func() bool) error {
	deadline := time.Now().Add(30 * time.Second)
	for !ready() {
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before %s:\n%s", p.name, what, p.tail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: no %s after 30 s:\n%s", p.name, what, p.tail())
		}
	}
	return nil
}

// waitTCP waits until addr accepts connections.
func (p *proc) waitTCP(ctx context.Context, addr string) error {
	return p.waitFor(ctx, "listener on "+addr, func() bool {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

// waitHTTP waits until url answers 200.
func (p *proc) waitHTTP(ctx context.Context, url string) error {
	client := &http.Client{Timeout: time.Second}
	return p.waitFor(ctx, "200 from "+url, func() bool {
		res, err := client.Get(url)
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	})
}

// freeAddr is a loopback host:port that was free a moment ago.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// tool finds a server binary where the repo's scripts install it
// ($MINTGATE_TOOLS/bin, then .tools/bin), else on PATH.
func tool(getenv func(string) string, root, name string) (string, error) {
	var dirs []string
	if d := getenv("MINTGATE_TOOLS"); d != "" {
		dirs = append(dirs, filepath.Join(d, "bin"))
	}
	dirs = append(dirs, filepath.Join(root, ".tools", "bin"))
	for _, d := range dirs {
		if p := filepath.Join(d, name); isExecutable(p) {
			return p, nil
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s not found in $MINTGATE_TOOLS/bin, .tools/bin or PATH: run deploy/local/tools.sh redis nats", name)
	}
	return p, nil
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// startRedis starts a redis-server without persistence, as the tests do.
func (f *fleet) startRedis(ctx context.Context, bin string) (string, error) {
	addr, err := freeAddr()
	if err != nil {
		return "", err
	}
	_, port, _ := net.SplitHostPort(addr)
	p, err := f.start("redis", bin, nil, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err != nil {
		return "", err
	}
	return addr, p.waitTCP(ctx, addr)
}

// startNATS starts a nats-server with JetStream on file storage, syncing
// every write (sync_interval: always, as production) or lazily (the
// server's default, a flush every two minutes).
func (f *fleet) startNATS(ctx context.Context, bin, name string, syncAlways bool) (string, error) {
	addr, err := freeAddr()
	if err != nil {
		return "", err
	}
	store := filepath.Join(f.dir, name)
	conf := fmt.Sprintf("listen: %q\njetstream {\n  store_dir: %q\n", addr, store)
	if syncAlways {
		conf += "  sync_interval: always\n"
	}
	conf += "}\n"
	path := filepath.Join(f.dir, name+".conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		return "", err
	}
	p, err := f.start(name, bin, nil, "-c", path)
	if err != nil {
		return "", err
	}
	if err := p.waitTCP(ctx, addr); err != nil {
		return "", err
	}
	url := "nats://" + addr
	return url, ensureLedger(ctx, url)
}

// ensureLedger is the operator step on url: the ledger's stream, which
// the signers only read.
func ensureLedger(ctx context.Context, url string) error {
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := ledger.EnsureStream(ctx, js, ledger.Config{Grace: 30 * time.Second}); err != nil {
		return fmt.Errorf("the operator step on %s: %w", url, err)
	}
	return nil
}

// version is what a server binary says it is for --version, shortened:
// "nats-server: v2.15.2", "Redis server v=7.0.15 sha=…" → "redis-server 7.0.15".
func version(bin string) string {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return filepath.Base(bin) + " ?"
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	for f := range strings.FieldsSeq(line) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return filepath.Base(bin) + " " + v
		}
	}
	return line
}

// goBuild builds the module's package pkg into dir and returns the binary.
func goBuild(ctx context.Context, root, dir, pkg string) (string, error) {
	bin := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
	}
	return bin, nil
}
