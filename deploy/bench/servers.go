package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mintgate/mintgate/shared/ledger"
	"github.com/mintgate/mintgate/shared/proc"
)

// fleet is every server the bench started. Each runs detached, in a
// process group of its own, so a Ctrl-C reaches the bench alone and the
// bench ends each server by its PID; should the bench itself be killed,
// the kernel kills them (Pdeathsig).
type fleet struct {
	dir   string // working folders, stores and logs
	procs []*proc.Process
}

// serverWait bounds how long a server may take to listen or be ready.
const serverWait = 30 * time.Second

// start runs bin with args in f's folder, its output in <name>.log there.
// env nil means the bench's own environment, else env alone.
func (f *fleet) start(name, bin string, env []string, args ...string) (*proc.Process, error) {
	p, err := proc.Start(proc.Config{
		Name: name, Bin: bin, Args: args, Env: env, Isolated: env != nil,
		Dir: f.dir, Log: filepath.Join(f.dir, name+".log"), Detach: true,
	})
	if err != nil {
		return nil, err
	}
	f.procs = append(f.procs, p)
	return p, nil
}

// stop ends every server with SIGTERM, the last started first.
func (f *fleet) stop() {
	for i := len(f.procs) - 1; i >= 0; i-- {
		f.procs[i].StopWith(syscall.SIGTERM)
	}
	f.procs = nil
}

// startRedis starts a redis-server without persistence, as the tests do.
func (f *fleet) startRedis(ctx context.Context, bin string) (string, error) {
	addr, err := proc.FreeAddr()
	if err != nil {
		return "", err
	}
	_, port, _ := net.SplitHostPort(addr)
	p, err := f.start("redis", bin, nil, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err != nil {
		return "", err
	}
	return addr, p.WaitTCP(ctx, serverWait, addr)
}

// startNATS starts a nats-server with JetStream on file storage, syncing
// every write (sync_interval: always, as production) or lazily (the
// server's default, a flush every two minutes).
func (f *fleet) startNATS(ctx context.Context, bin, name string, syncAlways bool) (string, error) {
	addr, err := proc.FreeAddr()
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
	if err := p.WaitTCP(ctx, serverWait, addr); err != nil {
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

// tool finds a server binary where the repo's scripts install it
// ($MINTGATE_TOOLS/bin, then .tools/bin), else on PATH.
func tool(getenv func(string) string, root, name string) (string, error) {
	p, err := proc.Binary(getenv, root, name)
	if err != nil {
		return "", fmt.Errorf("%w: run deploy/local/tools.sh redis nats", err)
	}
	return p, nil
}
