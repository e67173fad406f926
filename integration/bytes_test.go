package integration

import (
	"net/http"
	"testing"
	"time"

	"github.com/mintgate/mintgate/shared/keys"
)

// TestBytesComeBackWithTheRefund: on the full stack, a sign spends its
// contentLength from the caller's bucket of bytes; left unused, its refund
// gives the bytes back with the token, once; an uploaded one keeps them.
func TestBytesComeBackWithTheRefund(t *testing.T) {
	const mib = 1 << 20
	s := newStack(t, stackOptions{URLTTL: 3 * time.Second, Grace: 2 * time.Second,
		Tiers: slowTiers + ",user_bytes=10MiB:1KiB/1h,tenant_bytes=1GiB:1KiB/1h"})
	ctx := ctxT(t)
	rdb := s.redis(t)
	tok := s.token(t, "acme", "bytes")
	bytesLeft := func() float64 {
		v, err := rdb.HGet(ctx, keys.ByteBucket("acme", keys.UserSubject("bytes")), "t").Float64()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	used := s.mustSign(t, tok, 2*mib)
	unused := s.mustSign(t, tok, 4*mib)
	// The refill (1 KiB an hour) adds a few bytes meanwhile: count in KiB.
	if got := bytesLeft(); int(got)/1024 != 4*1024 {
		t.Fatalf("after signing 6 MiB the caller holds %v bytes, want 4 MiB", got)
	}
	if code, _, _ := s.sign(t, tok, 5*mib); code != http.StatusTooManyRequests {
		t.Fatalf("5 MiB more: %d, want 429", code)
	}
	if code := put(t, used, make([]byte, 2*mib)); code != http.StatusOK {
		t.Fatalf("PUT: %d", code)
	}
	s.waitStatus(t, tok, used.URLID, "completed", 30*time.Second)
	s.waitStatus(t, tok, unused.URLID, "refunded", 30*time.Second)
	time.Sleep(time.Until(used.ExpiresAt.Add(3 * time.Second))) // past every due time
	if got := bytesLeft(); int(got)/1024 != 8*1024 {
		t.Fatalf("after the refund the caller holds %v bytes, want 8 MiB (the unused grant's 4 back, once; the upload's 2 kept)", got)
	}
}
