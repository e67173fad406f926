package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mintgate/mintgate/shared/ledger"
	"github.com/mintgate/mintgate/signer/internal/request"
)

// benchTiers are so large that no bench sign is ever refused: the
// benchmark measures issuing a URL, not a 429.
const benchTiers = "anonymous=1e9:1e9,user=1e9:1e9,tenant=1e9:1e9"

// benchByteTiers add tiers of bytes as large: ledger=none/bytes measures
// what spending bytes beside the tokens costs a sign.
const benchByteTiers = benchTiers + ",user_bytes=1e15:1e15,tenant_bytes=1e15:1e15"

// benchConcurrency is how many signs run at once in the parallel
// sub-benchmarks, whatever GOMAXPROCS is.
const benchConcurrency = 16

// nopRecorder is NOT a mode the signer offers: it acknowledges every grant
// at once, so ledger=none is the baseline that shows what the JetStream
// ledger costs a sign.
type nopRecorder struct{}

func (nopRecorder) Record(context.Context, ledger.Grant) error { return nil }

// withRealClock gives the signer the wall clock, as in production.
func withRealClock() option { return func(d *deps) { d.now = time.Now } }

// benchKeys makes every Idempotency-Key of the process distinct.
var benchKeys atomic.Int64

// BenchmarkSign is POST /uploads/sign through the signer's real HTTP server
// (in-process, over loopback) with a real redis-server: validation, the sign
// script, presigning, the ledger and the completing script. ns/op is wall
// time per issued URL; in the parallel runs it is the inverse of throughput.
//
//	go test -run '^$' -bench BenchmarkSign -benchtime 3s ./signer/
func BenchmarkSign(b *testing.B) {
	for _, ledger := range []string{"jetstream", "none", "none/bytes"} {
		b.Run("ledger="+ledger, func(b *testing.B) {
			// The stack's nats-server syncs every write (sync_interval:
			// always), as production does.
			env := newStack(b).env(b)
			env["MINTGATE_TIERS"] = benchTiers
			if ledger == "none/bytes" {
				env["MINTGATE_TIERS"] = benchByteTiers
			}
			opts := []option{withRealClock()}
			if strings.HasPrefix(ledger, "none") {
				opts = append(opts, withRecorder(nopRecorder{}))
			}
			s := start(b, env, opts...)
			client := &http.Client{
				Timeout:   10 * time.Second,
				Transport: &http.Transport{MaxIdleConnsPerHost: 4 * benchConcurrency},
			}
			b.Cleanup(client.CloseIdleConnections)

			b.Run("serial", func(b *testing.B) {
				tok := s.token("acme", "bench")
				b.ResetTimer()
				for range b.N {
					if err := benchSign(client, s.base, tok); err != nil {
						b.Fatal(err)
					}
				}
				reportSigns(b)
			})
			b.Run(fmt.Sprintf("parallel=%d", benchConcurrency), func(b *testing.B) {
				var users atomic.Int64
				b.SetParallelism((benchConcurrency + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					// One user per goroutine; they share the tenant bucket.
					tok := s.token("acme", "bench-"+strconv.FormatInt(users.Add(1), 10))
					for pb.Next() {
						if err := benchSign(client, s.base, tok); err != nil {
							b.Error(err)
							return
						}
					}
				})
				reportSigns(b)
			})
		})
	}
}

// benchSign posts one sign with a fresh key and wants a 201.
func benchSign(client *http.Client, base, token string) error {
	req, err := http.NewRequest(http.MethodPost, base+"/uploads/sign", strings.NewReader(pngBody))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set(request.HeaderIdempotencyKey, "bench-"+strconv.FormatInt(benchKeys.Add(1), 10))
	res, err := client.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	if res.StatusCode != http.StatusCreated {
		return fmt.Errorf("sign: %d %s", res.StatusCode, raw)
	}
	return nil
}

// reportSigns adds the throughput the ns/op stands for.
func reportSigns(b *testing.B) {
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(b.N)/s, "signs/s")
	}
}
