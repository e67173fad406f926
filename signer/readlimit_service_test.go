package main

import (
	"context"
	"math"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mintgate/mintgate/shared/testenv"
	"github.com/mintgate/mintgate/signer/internal/apierr"
	"github.com/mintgate/mintgate/signer/internal/identity"
)

// redisCalls is how many commands Redis ran, by its INFO commandstats, but
// the INFO that asks and the connection set-up of new clients.
func redisCalls(t *testing.T, s *signer) int64 {
	t.Helper()
	info, err := s.rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for name, calls := range testenv.CommandCalls(info) {
		switch name {
		case "info", "hello", "client|setinfo", "select", "auth":
		default:
			n += calls
		}
	}
	return n
}

// TestReadFloodsAreBoundedPerAddress (issue 17): GET /uploads/quota,
// GET /uploads/{urlId} and /readyz each cost Redis a round trip and were
// not limited, so one address could make the signer send Redis as many
// commands as it sent requests. Now 300 of each from one address reach
// Redis only as often as the address's in-process bucket allows (a burst
// of 30, 10 a second); the rest are 429 too_many_requests with Retry-After
// and never reach Redis.
func TestReadFloodsAreBoundedPerAddress(t *testing.T) {
	st := newStack(t)
	s := start(t, st.env(t), withoutRedisClock)
	auth := map[string]string{"Authorization": "Bearer " + s.token("acme", "alice")}
	const flood = 300

	before := redisCalls(t, s)
	began := time.Now()
	allowed, limited := 0, 0
	for _, path := range []string{"/uploads/quota", "/uploads/" + uuid.NewString(), "/readyz"} {
		for range flood {
			r := s.do(http.MethodGet, path, auth, "")
			switch r.status {
			case http.StatusTooManyRequests:
				limited++
				if r.code() != apierr.CodeTooManyReads {
					t.Fatalf("%s: 429 %s", path, r.raw)
				}
				if ra, err := strconv.Atoi(r.header.Get(apierr.HeaderRetryAfter)); err != nil || ra < 1 {
					t.Fatalf("%s: Retry-After %q", path, r.header.Get(apierr.HeaderRetryAfter))
				}
			case http.StatusOK, http.StatusNotFound:
				allowed++
			default:
				t.Fatalf("%s: %d %s", path, r.status, r.raw)
			}
		}
	}
	elapsed := time.Since(began)
	calls := redisCalls(t, s) - before

	// One bucket per address across the three routes: its burst plus what
	// refilled while the flood ran.
	maxAllowed := 30 + int(math.Ceil(10*elapsed.Seconds())) + 1
	// A status read is three commands (two markers and the grant record),
	// a quota read one HMGET per bucket (two for a user), /readyz one PING.
	maxCalls := int64(3 * maxAllowed)
	t.Logf("%d requests in %v: %d answered, %d limited, %d Redis commands", 3*flood, elapsed, allowed, limited, calls)
	if allowed > maxAllowed {
		t.Errorf("%d reads answered in %v, want at most %d", allowed, elapsed, maxAllowed)
	}
	if calls > maxCalls {
		t.Errorf("%d Redis commands for %d requests, want at most %d", calls, 3*flood, maxCalls)
	}

	// The address is the trust model's: X-Forwarded-For from an untrusted
	// peer names no fresh bucket.
	r := s.do(http.MethodGet, "/uploads/quota", map[string]string{"Authorization": auth["Authorization"], identity.HeaderForwardedFor: "198.51.100.7"}, "")
	if r.status != http.StatusTooManyRequests {
		t.Errorf("X-Forwarded-For believed from an untrusted peer: %d", r.status)
	}
}

// Behind a trusted proxy each client address has its own read bucket, an
// IPv6 client its /64's: a flood from one leaves the others served.
func TestReadLimitFollowsTheClientIPTrustModel(t *testing.T) {
	st := newStack(t)
	env := st.env(t)
	env["MINTGATE_IP_SOURCE"] = "xff"
	env["MINTGATE_TRUSTED_PROXIES"] = "127.0.0.1"
	env["MINTGATE_READ_LIMIT"] = "5:5/60s"
	s := start(t, env, withoutRedisClock)
	auth := "Bearer " + s.token("acme", "alice")
	read := func(client string) int {
		return s.do(http.MethodGet, "/uploads/quota", map[string]string{"Authorization": auth, identity.HeaderForwardedFor: client}, "").status
	}
	for i := range 5 {
		if got := read("2001:db8:1:2::10"); got != http.StatusOK {
			t.Fatalf("read %d: %d", i+1, got)
		}
	}
	for client, want := range map[string]int{
		"2001:db8:1:2::99": http.StatusTooManyRequests, // the same /64
		"2001:db8:1:3::10": http.StatusOK,
		"198.51.100.7":     http.StatusOK,
	} {
		if got := read(client); got != want {
			t.Errorf("%s: %d, want %d", client, got, want)
		}
	}
}
