package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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
	return startNATS(tb, bin, true, "")
}

// startNATS writes a config (JetStream on file storage in a temporary
// folder, sync_interval: always unless told otherwise, then extra) and
// starts bin with it on a free port.
func startNATS(tb testing.TB, bin string, syncAlways bool, extra string) *NATS {
	tb.Helper()
	port := FreePort(tb)
	dir := tb.TempDir()
	conf := filepath.Join(dir, "nats.conf")
	var text strings.Builder
	fmt.Fprintf(&text, "listen: %q\njetstream {\n  store_dir: %q\n", addr(port), filepath.Join(dir, "js"))
	if syncAlways {
		// As everywhere we ship: an acknowledged grant is on disk.
		text.WriteString("  sync_interval: always\n")
	}
	text.WriteString("}\n" + extra)
	if err := os.WriteFile(conf, []byte(text.String()), 0o600); err != nil {
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

// JetStream connects to url (reconnecting forever, closed when the test
// ends) and returns the connection and its JetStream context.
func JetStream(tb testing.TB, url string) (*nats.Conn, jetstream.JetStream) {
	tb.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	return nc, js
}
