package testenv

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// Clamd is ClamAV's clamd (Debian's clamav-daemon) the test started on a
// free loopback port, with the repository's own signature database
// (deploy/clamav: the EICAR test string as a body signature) and no other:
// freshclam can never run here.
type Clamd struct {
	*Process
	// Addr is MINTGATE_CLAMD_ADDR for it: 127.0.0.1:<port>.
	Addr string
}

// ClamdSignatures is the signature file StartClamd loads, relative to the
// repository's root; the local stack loads it too.
const ClamdSignatures = "deploy/clamav/mintgate-test.ndb"

// StartClamd starts clamd with a configuration of its own
// (DatabaseDirectory holding only ClamdSignatures, TCPSocket on a free
// loopback port, Foreground, StreamMaxLength and the scan limits at
// streamMax) and waits until PING answers PONG. It is stopped by PID when
// the test ends; Stop and Start restart it on the same port.
func StartClamd(tb testing.TB, streamMax int64) *Clamd {
	tb.Helper()
	root, err := Root()
	if err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	sigs, err := os.ReadFile(filepath.Join(root, ClamdSignatures))
	if err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	dir := tb.TempDir()
	db := filepath.Join(dir, "db")
	if err := os.MkdirAll(db, 0o755); err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	if err := os.WriteFile(filepath.Join(db, filepath.Base(ClamdSignatures)), sigs, 0o644); err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	port := FreePort(tb)
	conf := filepath.Join(dir, "clamd.conf")
	if err := os.WriteFile(conf, []byte(ClamdConfig(db, "127.0.0.1", port, streamMax)), 0o644); err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	c := &Clamd{Process: newProcess(tb, clamdBinary(tb), "-c", conf), Addr: addr(port)}
	c.Start()
	return c
}

// clamdBinary is Debian's clamd: on PATH, else /usr/sbin (not on a
// non-root PATH).
func clamdBinary(tb testing.TB) string {
	if _, err := exec.LookPath("clamd"); err != nil {
		if _, err := os.Stat("/usr/sbin/clamd"); err == nil {
			return "/usr/sbin/clamd"
		}
	}
	return Binary(tb, "clamd")
}

// ClamdConfig is a clamd.conf for a clamd in the foreground on addr:port
// with the signatures of db, streams and files up to streamMax bytes, and
// an alert (Heuristics.Limits.Exceeded.*) for content past a limit, as
// every shipped configuration has.
func ClamdConfig(db, host string, port int, streamMax int64) string {
	return fmt.Sprintf(`DatabaseDirectory %s
TCPSocket %d
TCPAddr %s
Foreground yes
StreamMaxLength %d
MaxScanSize %d
MaxFileSize %d
AlertExceedsMax yes
`, db, port, host, streamMax, 4*streamMax, streamMax)
}

// Start starts clamd and waits until PING answers PONG (loading the
// database takes a few seconds).
func (c *Clamd) Start() {
	c.tb.Helper()
	c.Process.Start()
	deadline := time.Now().Add(60 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		if last = ClamdPing(c.Addr); last == nil {
			return
		}
		if c.Exited() {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.tb.Fatalf("testenv: clamd on %s did not answer PING: %v\n%s", c.Addr, last, c.Output())
}

// ClamdPing sends zPING to clamd at addr and expects PONG.
func ClamdPing(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.Write([]byte("zPING\x00")); err != nil {
		return err
	}
	buf := make([]byte, 16)
	n, _ := conn.Read(buf)
	if got := bytes.TrimRight(buf[:n], "\x00\n"); string(got) != "PONG" {
		return fmt.Errorf("PING answered %q", got)
	}
	return nil
}

// String names clamd in test logs.
func (c *Clamd) String() string { return "clamd " + c.Addr }
