//go:build load

// The scale report: what a nats-server (sync_interval: always) costs with
// many grants pending, and how long it takes to come back after a SIGKILL.
// It prints numbers and asserts only that nothing was lost.
//
//	go test -tags load -run TestPendingScale -v ./shared/ledger/ -pending 1000000
package ledger

import (
	"context"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mintgate/mintgate/shared/testenv"
)

var pendingGrants = flag.Int("pending", 100_000, "grants left pending for the scale report")

func TestPendingScale(t *testing.T) {
	srv := testenv.StartNATS(t)
	l := dial(t, srv.URL(), Config{Grace: time.Hour})
	_, js := connect(t, srv.URL())
	n := *pendingGrants
	rssBefore := rssKiB(t, srv.PID())

	// As the signers would: many concurrent signs, group-committed.
	const callers = 512
	var next, failed atomic.Int64
	expires := time.Now().Add(24 * time.Hour) // pending for the whole run
	start := time.Now()
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				g := testGrant(fmt.Sprintf("p-%08d", i), expires)
				g.Subject = "u:user-" + strconv.Itoa(i%10000)
				if err := l.Record(context.Background(), g); err != nil {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	msgs := streamMsgs(t, js)
	rss := rssKiB(t, srv.PID())
	disk := dirBytes(t, srv.StoreDir)
	t.Logf("SCALE recorded %d grants in %v (%.0f/s, %d errors) as %d messages (%.0f grants each)",
		n, took.Round(time.Millisecond), float64(n)/took.Seconds(), failed.Load(), msgs, float64(n)/float64(msgs))
	t.Logf("SCALE nats-server RSS %d MiB (idle %d MiB), store %d MiB on disk", rss/1024, rssBefore/1024, disk>>20)

	srv.Kill()
	restart := time.Now()
	srv.Start()
	_, js2 := connect(t, srv.URL())
	var back uint64
	for time.Since(restart) < 5*time.Minute {
		s, err := js2.Stream(context.Background(), DefaultStream)
		if err == nil {
			info, err := s.Info(context.Background())
			if err == nil && info.State.Msgs == msgs {
				back = info.State.Msgs
				break
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("SCALE after SIGKILL: stream answering with all %d messages in %v; RSS %d MiB",
		back, time.Since(restart).Round(time.Millisecond), rssKiB(t, srv.PID())/1024)
	if back != msgs {
		t.Errorf("after the restart the stream holds %d messages, want %d", back, msgs)
	}
}

func rssKiB(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kib, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return kib
		}
	}
	return 0
}

func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var total int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				total += info.Size()
			}
		}
		return nil
	})
	return total
}
