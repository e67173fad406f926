package proc

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A redis-server started detached with its log in a file listens, is
// stopped by PID, and its log says it was there; Start runs it again.
func TestStartWaitStop(t *testing.T) {
	root, _ := Root()
	bin, err := Binary(os.Getenv, root, "redis-server")
	if err != nil {
		t.Skipf("%v: run deploy/local/tools.sh redis", err)
	}
	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(addr)
	dir := t.TempDir()
	p, err := Start(Config{Name: "redis", Bin: bin, Dir: dir, Log: filepath.Join(dir, "redis.log"), Detach: true,
		Args: []string{"--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	ctx := context.Background()
	if err := p.WaitTCP(ctx, 15*time.Second, addr); err != nil {
		t.Fatal(err)
	}
	if p.PID() == 0 || p.Exited() {
		t.Fatalf("running redis: PID %d, exited %v", p.PID(), p.Exited())
	}
	p.Stop()
	if !p.Exited() || p.PID() != 0 {
		t.Fatalf("stopped redis: PID %d, exited %v", p.PID(), p.Exited())
	}
	if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
		c.Close()
		t.Fatalf("%s still accepts connections after Stop", addr)
	}
	if !strings.Contains(p.Output(), "Ready to accept connections") {
		t.Errorf("log of the stopped server lacks its start:\n%s", p.Output())
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitTCP(ctx, 15*time.Second, addr); err != nil {
		t.Fatalf("after a restart: %v", err)
	}
}

// A process that exits while awaited ends the wait at once, and the error
// quotes what it printed; its environment is Env alone when Isolated.
func TestWaitEndsWhenTheProcessExits(t *testing.T) {
	p, err := Start(Config{Name: "quitter", Bin: "/bin/sh", Args: []string{"-c", `echo "boom $MARK $HOME"; exit 3`},
		Env: []string{"MARK=isolated"}, Isolated: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	start := time.Now()
	err = p.Wait(context.Background(), time.Minute, "readiness", func() bool { return false })
	if err == nil || !strings.Contains(err.Error(), "quitter exited before readiness") {
		t.Fatalf("Wait = %v, want the exit named", err)
	}
	if !strings.Contains(err.Error(), "boom isolated \n") {
		t.Errorf("error lacks the output of an isolated environment: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Wait took %v after the process exited", d)
	}
}
