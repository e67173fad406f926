package main

import (
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mintgate/mintgate/shared/testenv"
)

// BenchmarkSignTracing is BenchmarkSign's parallel run (JetStream ledger)
// with tracing off (no OTEL_* variable: no middleware, no Redis hook) and
// on (every sign sampled, exported over OTLP/HTTP to a real endpoint:
// Jaeger when it is built, else the test's own receiver). cpu-µs/sign is
// the whole test process's CPU (the signer, in-process, and this
// benchmark's HTTP client; not redis-server's or nats-server's) per sign.
//
//	go test -run '^$' -bench BenchmarkSignTracing -benchtime 5s ./signer/
func BenchmarkSignTracing(b *testing.B) {
	for _, mode := range []string{"off", "on"} {
		b.Run("tracing="+mode, func(b *testing.B) {
			env := newStack(b).env(b)
			env["MINTGATE_TIERS"] = benchTiers
			if mode == "on" {
				env["OTEL_EXPORTER_OTLP_ENDPOINT"] = testenv.StartTraces(b).Endpoint()
				env["OTEL_TRACES_SAMPLER"] = "always_on"
			}
			s := start(b, env, withRealClock())
			client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4 * benchConcurrency}}
			b.Cleanup(client.CloseIdleConnections)
			var users atomic.Int64
			b.SetParallelism((benchConcurrency + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
			before := cpuTime()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				tok := s.token("acme", "bench-"+strconv.FormatInt(users.Add(1), 10))
				for pb.Next() {
					if err := benchSign(client, s.base, tok); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64((cpuTime()-before).Microseconds())/float64(b.N), "cpu-µs/sign")
			reportSigns(b)
		})
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(fmt.Sprint("getrusage: ", err))
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
