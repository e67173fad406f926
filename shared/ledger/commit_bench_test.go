package ledger

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mintgate/mintgate/shared/testenv"
)

// BenchmarkRecord is the signer's ledger path: parallel Records of fresh
// grants through one Ledger, on a nats-server with JetStream on file
// storage. grants/msg is how many one ledger message carried.
// Run: go test -run '^$' -bench Record -benchmem ./shared/ledger/
func BenchmarkRecord(b *testing.B) {
	srv := testenv.StartNATS(b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, js := testenv.JetStream(b, srv.URL())
	if _, err := EnsureStream(ctx, js, Config{}); err != nil {
		b.Fatal(err)
	}
	l, err := Dial(ctx, srv.URL(), Config{Secret: testSecret})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	var n atomic.Int64
	exp := time.Now().Add(time.Hour)
	b.SetParallelism(32) // callers per core: group commit needs company
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := l.Record(context.Background(), testGrant(fmt.Sprintf("b-%d", n.Add(1)), exp)); err != nil {
				b.Errorf("Record: %v", err)
				return
			}
		}
	})
	b.StopTimer()
	msgs := ledgerMsgs(b, l)
	b.ReportMetric(float64(n.Load())/float64(max(1, msgs)), "grants/msg")
}

// ledgerMsgs is how many messages the ledger's stream holds.
func ledgerMsgs(tb testing.TB, l *Client) uint64 {
	tb.Helper()
	s, err := l.js.Stream(context.Background(), l.cfg.Stream)
	if err != nil {
		tb.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	return info.State.Msgs
}
