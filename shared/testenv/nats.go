package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// NATS is a nats-server with JetStream on file storage the test started.
type NATS struct {
	*Process
	Addr string
	// StoreDir is the JetStream store, kept across restarts.
	StoreDir string
}

// StartNATS starts the nats-server the scripts installed (≥ 2.12, with
// message scheduling) on a free port, with its store in a temporary folder
// that outlives restarts within the test.
func StartNATS(tb testing.TB) *NATS {
	tb.Helper()
	return StartNATSBinary(tb, Binary(tb, "nats-server"))
}

// StartNATSBinary is StartNATS with a given server binary, such as an old
// one without message scheduling.
func StartNATSBinary(tb testing.TB, bin string) *NATS {
	tb.Helper()
	port := FreePort(tb)
	dir := tb.TempDir()
	conf := filepath.Join(dir, "nats.conf")
	// sync_interval: always, as everywhere we ship: an acknowledged grant is on disk.
	text := fmt.Sprintf("listen: %q\njetstream {\n  store_dir: %q\n  sync_interval: always\n}\n",
		addr(port), filepath.Join(dir, "js"))
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	n := &NATS{Process: newProcess(tb, bin, "-c", conf), Addr: addr(port), StoreDir: filepath.Join(dir, "js")}
	n.Start()
	return n
}

// Start starts the server and waits until it listens.
func (n *NATS) Start() {
	n.tb.Helper()
	n.Process.Start()
	waitTCP(n.tb, n.Process, n.Addr)
}

// URL is the server's nats:// URL.
func (n *NATS) URL() string { return "nats://" + n.Addr }
