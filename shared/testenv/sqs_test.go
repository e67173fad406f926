package testenv

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// fauxqs listens on 127.0.0.1 only, never on every interface (it binds
// 0.0.0.0 unless deploy/local/fauxqs-loopback.mjs is preloaded): the
// kernel's socket table has its listener on 127.0.0.1 and no other.
func TestFauxqsListensOnLoopbackOnly(t *testing.T) {
	f := StartFauxqs(t)
	p, err := strconv.Atoi(f.Endpoint[strings.LastIndex(f.Endpoint, ":")+1:])
	if err != nil {
		t.Fatal(err)
	}
	listeners := map[string]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Skipf("no socket table: %v", err)
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fields := strings.Fields(line)
			// local_address is ADDR:PORT in hex; state 0A is LISTEN.
			if len(fields) > 3 && fields[3] == "0A" && strings.HasSuffix(fields[1], fmt.Sprintf(":%04X", p)) {
				listeners[fields[1]] = true
			}
		}
	}
	want := fmt.Sprintf("0100007F:%04X", p) // 127.0.0.1, little-endian
	if len(listeners) != 1 || !listeners[want] {
		t.Errorf("fauxqs on port %d listens on %v, want only %s (127.0.0.1)", p, listeners, want)
	}
}
