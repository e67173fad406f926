//go:build load

// The load report: how late refunds land after their due time at a given
// grant rate, and how fast the ledger records grants with and without
// sync_interval: always. It prints numbers and asserts nothing.
//
//	go test -tags load -run TestLoadReport -v ./sweeper/ -grants 2000 -rate 500
package main

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/ledger"
	"github.com/mintgate/mintgate/shared/quota"
	"github.com/mintgate/mintgate/shared/streamstest"
	"github.com/mintgate/mintgate/shared/testenv"
	"github.com/mintgate/mintgate/shared/tiers"
)

var (
	loadGrants  = flag.Int("grants", 2000, "grants recorded for the lateness run")
	loadRate    = flag.Int("rate", 500, "grants per second for the lateness run")
	loadRecords = flag.Int("records", 5000, "grants recorded per throughput run")
	loadR3      = flag.Bool("r3", false, "also measure lateness on a three-node cluster with an R3 ledger (sync always)")
	loadGap     = flag.Duration("gap", 0, "the ledger's MinGap for the lateness runs (0: its default, below 0: none)")
)

func TestLoadReport(t *testing.T) {
	ledgerGap = *loadGap
	for _, sync := range []bool{true, false} {
		t.Run(fmt.Sprintf("lateness/sync_always=%v", sync), func(t *testing.T) {
			testLateness(t, fmt.Sprintf("R1 sync_always=%v", sync), newStackWith(t, false, testenv.NATSOptions{NoSyncAlways: !sync}))
		})
	}
	if *loadR3 {
		t.Run("lateness/r3", func(t *testing.T) { testLateness(t, "R3 sync_always=true", newClusterStack(t)) })
	}
	for _, sync := range []bool{true, false} {
		for _, workers := range []int{1, 16, 64, 512} {
			t.Run(fmt.Sprintf("record/sync_always=%v/workers=%d", sync, workers), func(t *testing.T) {
				recordThroughput(t, sync, workers)
			})
		}
	}
}

// newClusterStack is newStack on a three-node nats-server cluster (sync
// always) holding the ledger as an R3 stream, as production runs it. Its
// nats is nil: tests that kill the server need newStack.
func newClusterStack(t *testing.T) *stack {
	t.Helper()
	c := testenv.StartNATSCluster(t, 3)
	c.WaitJetStream(t, 30*time.Second)
	s := &stack{t: t, redis: testenv.StartRedis(t), natsURL: c.URL(), grace: time.Second}
	return s.dial(3)
}

// testLateness records grants at a steady rate, each due 2 s after it is
// recorded, and reads from each refunded marker when the sweeper applied it.
func testLateness(t *testing.T, ledger string, s *stack) {
	s.start()
	n, rate := *loadGrants, *loadRate
	due := make([]time.Time, n)

	// When JetStream fired each schedule: the stored time of its due message.
	var mu sync.Mutex
	fired := map[string]time.Time{}
	messages := 0 // due messages: one per batch the signers' group commit made
	nc, err := nats.Connect(s.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	oc, err := js.OrderedConsumer(context.Background(), ledger.DefaultStream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{ledger.SubjectDue}})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := oc.Consume(func(m jetstream.Msg) {
		md, err := m.Metadata()
		if err != nil {
			return
		}
		b, err := ledger.UnsealAny(m.Data(), []byte(testenv.GrantSecret))
		if err != nil {
			return
		}
		mu.Lock()
		for _, g := range b.Grants {
			fired[g.URLID] = md.Timestamp
		}
		messages++
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Stop()
	var failed atomic.Int64
	jobs := make(chan int)
	var wg sync.WaitGroup
	// Enough callers that waiting for batch acks never holds back the offered rate.
	for range 512 {
		wg.Go(func() {
			for i := range jobs {
				g := newGrant(fmt.Sprintf("late-%06d", i), tiers.User, fmt.Sprintf("u:%d", i%100), time.Now().Add(time.Second))
				due[i] = g.ExpiresAt.Add(s.grace)
				if err := s.ledger.Record(context.Background(), g); err != nil {
					failed.Add(1)
				}
			}
		})
	}
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	for i := range n {
		time.Sleep(time.Until(start.Add(time.Duration(i) * interval)))
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	offered := float64(n) / time.Since(start).Seconds()
	waitFor(t, 2*time.Minute, "every grant refunded", func() bool { return s.refunded() == n-int(failed.Load()) })

	var late, fire []time.Duration
	early := 0
	for i := range n {
		id := fmt.Sprintf("late-%06d", i)
		v, err := s.rdb.Get(context.Background(), keys.Refunded(tenant, id)).Result()
		at, ok := quota.RefundedAt(v)
		if err != nil || !ok {
			continue
		}
		d := at.Sub(due[i])
		if d < -time.Millisecond { // the marker has millisecond resolution
			early++
		}
		late = append(late, d)
		mu.Lock()
		if f, ok := fired[id]; ok {
			fire = append(fire, f.Sub(due[i]))
		}
		mu.Unlock()
	}
	t.Logf("LATENESS %s, %d grants at %.0f/s offered (%d record errors, %d early)\n"+
		"  refunded after due (sweeper applied): %s\n  fired after due (JetStream stored): %s\n  %d due messages, %.1f grants each",
		ledger, len(late), offered, failed.Load(), early, quantiles(late), quantiles(fire), messages, float64(len(fire))/float64(max(1, messages)))
}

func quantiles(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	slices.Sort(ds)
	q := func(p float64) time.Duration { return ds[int(p*float64(len(ds)-1))].Round(time.Millisecond) }
	return fmt.Sprintf("p50 %v  p90 %v  p99 %v  max %v  (n=%d)", q(0.5), q(0.9), q(0.99), q(1), len(ds))
}

// recordThroughput records grants as fast as workers allow, due far in the
// future so that nothing is delivered meanwhile.
func recordThroughput(t *testing.T, syncAlways bool, workers int) {
	srv := testenv.StartNATSWith(t, testenv.NATSOptions{NoSyncAlways: !syncAlways})
	streamstest.EnsureLedger(t, srv.URL(), ledger.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := ledger.Dial(ctx, srv.URL(), ledger.Config{Grace: time.Hour, Secret: []byte(testenv.GrantSecret)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	n := *loadRecords
	var next, failed atomic.Int64
	lat := make([]time.Duration, n)
	expires := time.Now().Add(time.Hour)
	start := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				t0 := time.Now()
				if err := l.Record(context.Background(), newGrant(fmt.Sprintf("tp-%07d", i), tiers.User, "u:x", expires)); err != nil {
					failed.Add(1)
				}
				lat[i] = time.Since(t0)
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	slices.Sort(lat)
	t.Logf("RECORD sync_always=%v workers=%d: %d grants in %v = %.0f grants/s; latency p50 %v p99 %v; errors %d",
		syncAlways, workers, n, took.Round(time.Millisecond), float64(n)/took.Seconds(),
		lat[n/2].Round(10*time.Microsecond), lat[n*99/100].Round(10*time.Microsecond), failed.Load())
}
