package testenv

import (
	"os"
	"testing"
)

// NATSOptions shapes a nats-server started by StartNATSWith.
type NATSOptions struct {
	// Binary is the server to run; empty means the one the scripts installed.
	Binary string
	// NoSyncAlways leaves sync_interval out of the jetstream block: servers
	// before 2.10 reject it, and a load test may measure what it costs.
	NoSyncAlways bool
}

// StartNATSWith is StartNATS shaped by opts. The store outlives Stop, Kill
// and Start within the test, and the port stays the same.
func StartNATSWith(tb testing.TB, opts NATSOptions) *NATS {
	tb.Helper()
	bin := opts.Binary
	if bin == "" {
		bin = Binary(tb, "nats-server")
	}
	return startNATS(tb, bin, !opts.NoSyncAlways, "")
}

// OldNATSBinary is Debian's nats-server 2.9.10 when the machine has it: a
// server that accepts allow_msg_schedules on a stream and silently ignores
// it. The test is skipped without it.
func OldNATSBinary(tb testing.TB) string {
	tb.Helper()
	const p = "/usr/sbin/nats-server"
	if _, err := os.Stat(p); err != nil {
		tb.Skipf("testenv: no old nats-server at %s", p)
	}
	return p
}

// StartNATSConfig starts nats-server with the config file conf, which makes
// it listen on addr (host:port), with extra environment variables (KEY=value)
// such as the values the file refers to. It waits until addr accepts
// connections; the server is stopped when the test ends.
func StartNATSConfig(tb testing.TB, conf, addr string, env []string) *NATS {
	tb.Helper()
	n := &NATS{Process: newProcess(tb, Binary(tb, "nats-server"), "-c", conf), Addr: addr}
	n.Env = env
	n.Start()
	return n
}
