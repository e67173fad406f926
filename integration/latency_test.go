//go:build load

package integration

import (
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mintgate/mintgate/shared/keys"
)

// Load measurements: they print a report and assert nothing about speed.
//
//	go test -tags load -count=1 -run TestPutToDoneLatency -v ./integration/

const (
	latencyUploads     = 200
	latencyConcurrency = 8
	latencyPoll        = 2 * time.Millisecond
	latencyWithin      = 60 * time.Second // give up on one upload after this
)

// TestPutToDoneLatency runs latencyUploads uploads, latencyConcurrency at a
// time, each sign → PUT with the returned headers → poll Redis for the done
// marker every latencyPoll. It reports, from the client's side, the sign
// latency and the time from the PUT's 200 to the marker being readable
// (S3 event → bridge → SQS → completer → Redis SET, plus up to one poll).
func TestPutToDoneLatency(t *testing.T) {
	s := newStack(t, stackOptions{Tiers: "anonymous=5:5/60s,user=1e6:1e6,tenant=1e6:1e6"})
	rdb := s.redis(t)
	ctx := ctxT(t)
	body := []byte("\x89PNG\r\n\x1a\n-latency")

	// Each worker is one browser with a kept-alive connection; the shared
	// client would otherwise keep only two idle connections per host.
	saved := httpc.Transport
	httpc.Transport = &http.Transport{MaxIdleConnsPerHost: 2 * latencyConcurrency}
	t.Cleanup(func() { httpc.Transport = saved })

	jobs := make(chan int, latencyUploads)
	for i := range latencyUploads {
		jobs <- i
	}
	close(jobs)
	var (
		mu           sync.Mutex
		signs, dones []time.Duration
	)
	began := time.Now()
	t.Run("uploads", func(t *testing.T) {
		for w := range latencyConcurrency {
			t.Run(fmt.Sprintf("worker%d", w), func(t *testing.T) {
				t.Parallel()
				tok := s.token(t, "acme", fmt.Sprintf("load-%d", w))
				for range jobs {
					t0 := time.Now()
					g := s.mustSign(t, tok, len(body))
					signed := time.Since(t0)
					if code := put(t, g, body); code != http.StatusOK {
						t.Fatalf("PUT %s: %d", g.Key, code)
					}
					put200 := time.Now()
					done := keys.Done("acme", g.URLID)
					for {
						n, err := rdb.Exists(ctx, done).Result()
						if err != nil {
							t.Fatalf("poll %s: %v", done, err)
						}
						if n == 1 {
							break
						}
						if time.Since(put200) > latencyWithin {
							t.Fatalf("upload %s: no done marker %v after its PUT", g.URLID, latencyWithin)
						}
						time.Sleep(latencyPoll)
					}
					took := time.Since(put200)
					mu.Lock()
					signs, dones = append(signs, signed), append(dones, took)
					mu.Unlock()
				}
			})
		}
	})
	wall := time.Since(began)
	if len(dones) != latencyUploads {
		t.Fatalf("%d of %d uploads reached done", len(dones), latencyUploads)
	}
	slices.Sort(signs)
	slices.Sort(dones)
	t.Logf("%d uploads, %d at a time, in %v (%.0f uploads/s); done marker polled every %v",
		len(dones), latencyConcurrency, wall.Round(time.Millisecond), float64(len(dones))/wall.Seconds(), latencyPoll)
	t.Logf("PUT 200 → done marker: p50 %v  p90 %v  p99 %v  max %v",
		pct(dones, 50), pct(dones, 90), pct(dones, 99), dones[len(dones)-1].Round(10*time.Microsecond))
	t.Logf("sign (client-side):    p50 %v  p99 %v  max %v",
		pct(signs, 50), pct(signs, 99), signs[len(signs)-1].Round(10*time.Microsecond))
}

// pct is the nearest-rank percentile p of sorted d.
func pct(d []time.Duration, p int) time.Duration {
	i := (len(d)*p + 99) / 100 // ceil(n·p/100), 1-based
	return d[max(i, 1)-1].Round(10 * time.Microsecond)
}
