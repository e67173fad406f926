package integration

import (
	"context"
	"math"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/testenv"
)

// TestLedgerStallMintsNothing is the stall of the ledger v2 issue: the
// signer's publishes time out while nats-server is paused, so every sign
// answers 503 and undoes its spend; the publishes still sit in the
// server's socket buffer and are stored when it resumes. When those grants
// fall due, the sweeper must find each already given back and credit
// nothing: before the undo wrote the refunded marker, every one of them
// was refunded a second time (a minted token).
func TestLedgerStallMintsNothing(t *testing.T) {
	s := newStack(t, stackOptions{
		URLTTL: 2 * time.Second, Grace: time.Second, DoneTTL: time.Minute,
		// Room below capacity, and no refill to speak of: any extra credit shows.
		Tiers: "anonymous=5:5/60s,user=1000:1/1h,tenant=100000:1/1h",
	})
	nats, ok := s.NATS.(*testenv.NATS)
	if !ok {
		t.Skip("pausing the server needs a local nats-server process")
	}
	ctx := context.Background()
	rdb := s.redis(t)
	const tenant, user = "acme", "stalled"
	bucket := keys.Bucket(tenant, keys.UserSubject(user))
	tok := s.token(t, tenant, user)
	s.mustSign(t, tok, 5) // the bucket exists
	// A known level below capacity: 500 tokens, stamped now.
	if err := rdb.HSet(ctx, bucket, "t", "500.000000", "ts", time.Now().UnixMilli()).Err(); err != nil {
		t.Fatal(err)
	}

	nats.Pause()
	const n = 8
	var wg sync.WaitGroup
	codes := make(chan int, n)
	for range n {
		wg.Go(func() {
			code, _, _ := s.sign(t, tok, 5)
			codes <- code
		})
	}
	wg.Wait()
	time.Sleep(time.Second) // past every publish timeout
	nats.Resume()
	close(codes)
	for code := range codes {
		if code != http.StatusServiceUnavailable {
			t.Fatalf("sign during the stall: %d, want 503", code)
		}
	}
	if got := tokens(t, rdb, bucket); got != 500 {
		t.Fatalf("after the undone signs the bucket holds %v, want the 500 it had", got)
	}

	// The grants stored on resume were due at once (TTL + grace passed
	// during the stall); the one signed before the stall too.
	eventually(t, 30*time.Second, "the pre-stall grant refunded", func() bool {
		return metric(t, s.SweeperURL, "mintgate_sweeper_refunds_total") >= 1
	})
	time.Sleep(3 * time.Second) // every stored grant is swept, and a second credit would land, by now
	again := metric(t, s.SweeperURL, "mintgate_sweeper_already_refunded_total")
	if again < 1 {
		t.Errorf("no stalled publish was stored after its timeout: the stall was not reproduced")
	}
	// The first URL (unused) is refunded once: +1. Nothing else.
	if got := tokens(t, rdb, bucket); got != 501 {
		t.Errorf("bucket holds %v tokens, want 501: %v minted by the stall", got, got-501)
	}
	if got := metric(t, s.SweeperURL, "mintgate_sweeper_refunds_total"); got != 1 {
		t.Errorf("sweeper refunds %v, want only the pre-stall grant's 1", got)
	}
	t.Logf("%d signs undone during the stall; %v of their grants were stored anyway and swept as already refunded", n, again)
}

// tokens is a bucket's whole tokens.
func tokens(t *testing.T, rdb *redis.Client, key string) float64 {
	t.Helper()
	v, err := rdb.HGet(context.Background(), key, "t").Float64()
	if err != nil {
		t.Fatalf("HGET %s t: %v", key, err)
	}
	return math.Floor(v)
}
