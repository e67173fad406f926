package checks_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mintgate/mintgate/shared/testenv"
)

// BenchmarkLedgerPublish measures what sync_interval: always costs a
// signer: one acknowledged publish of a grant-sized message to a file-backed
// stream, one at a time (one request) and from 16 goroutines (concurrent
// requests), with the fsync on every write and with the server's default
// (flush every two minutes). docs/production.md quotes its results.
//
//	cd deploy/checks && go test -run '^$' -bench LedgerPublish -benchtime 3s
func BenchmarkLedgerPublish(b *testing.B) {
	for _, sync := range []string{"always", "default"} {
		b.Run("sync="+sync, func(b *testing.B) {
			js := startJetStream(b, sync)
			b.Run("serial", func(b *testing.B) { publishGrants(b, js, 1) })
			b.Run("parallel16", func(b *testing.B) { publishGrants(b, js, 16) })
		})
	}
}

func publishGrants(b *testing.B, js jetstream.JetStream, parallelism int) {
	ctx := context.Background()
	payload := []byte(`{"urlId":"0b9e6f0e-7f6c-4d3a-9a51-3c1f2a9d8e77","tenant":"acme","tier":"user","subject":"u:1234567890","key":"incoming/acme/0b9e6f0e-7f6c-4d3a-9a51-3c1f2a9d8e77","issuedAt":"2026-01-01T00:00:00Z","expiresAt":"2026-01-01T00:02:00Z"}`)
	var seq atomic.Int64
	b.SetBytes(int64(len(payload)))
	b.SetParallelism(parallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n := seq.Add(1)
			id := b.Name() + "-" + strconv.FormatInt(n, 10)
			if _, err := js.Publish(ctx, "grants.bench."+strconv.FormatInt(n%1024, 10), payload, jetstream.WithMsgID(id)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// startJetStream starts a nats-server whose jetstream block sets
// sync_interval (or leaves the default), with a file-backed stream.
func startJetStream(b *testing.B, sync string) jetstream.JetStream {
	b.Helper()
	dir := b.TempDir()
	port := testenv.FreePort(b)
	conf := fmt.Sprintf("listen: \"127.0.0.1:%d\"\njetstream {\n  store_dir: %q\n", port, filepath.Join(dir, "js"))
	if sync != "default" {
		conf += "  sync_interval: " + sync + "\n"
	}
	conf += "}\n"
	path := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		b.Fatal(err)
	}
	testenv.StartProcess(b, testenv.Binary(b, "nats-server"), nil, "-c", path)

	var nc *nats.Conn
	var err error
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if nc, err = nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", port)); err == nil {
			break
		}
	}
	if err != nil {
		b.Fatalf("nats-server did not start: %v", err)
	}
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{
		Name: "BENCH", Subjects: []string{"grants.>"}, Storage: jetstream.FileStorage,
	}); err != nil {
		b.Fatal(err)
	}
	return js
}
