package readlimit_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/tiers"
	"github.com/mintgate/mintgate/signer/internal/apierr"
	"github.com/mintgate/mintgate/signer/internal/identity"
	"github.com/mintgate/mintgate/signer/internal/readlimit"
)

// anon is an anonymous caller: its charged requests go to its address.
var anon = identity.Caller{Tenant: "acme", Subject: "a:0123", Tier: tiers.Anonymous}

// three is a burst of 3 reads that barely refills while a test runs.
var three = bucket.Limit{Capacity: 3, Rate: 0.001}

// reader is a GET from a peer through the limiter's middleware: its status,
// and Retry-After.
func reader(rl *readlimit.Limiter) func(peer string) (int, string) {
	e := echo.New()
	e.HTTPErrorHandler = apierr.Handler(slog.New(slog.NewTextHandler(io.Discard, nil)))
	e.GET("/uploads/quota", func(c echo.Context) error { return c.NoContent(http.StatusOK) }, rl.Middleware())
	return func(peer string) (int, string) {
		r := httptest.NewRequest(http.MethodGet, "/uploads/quota", nil)
		r.RemoteAddr = peer
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, r)
		return rec.Code, rec.Header().Get(apierr.HeaderRetryAfter)
	}
}

// Each address reads its burst, then gets 429 with a Retry-After; another
// address is served, an IPv6 caller's whole /64 shares one bucket.
func TestMiddlewareBoundsEachAddress(t *testing.T) {
	read := reader(readlimit.New(three, true, identity.ClientIP{}))
	steps := []struct {
		peer string
		want int
	}{
		{"203.0.113.7:1", 200}, {"203.0.113.7:2", 200}, {"203.0.113.7:3", 200},
		{"203.0.113.7:4", 429},
		{"203.0.113.8:1", 200},
		{"[2001:db8:1:2::1]:1", 200}, {"[2001:db8:1:2::2]:1", 200}, {"[2001:db8:1:2:ffff::9]:1", 200},
		{"[2001:db8:1:2::3]:1", 429},
		{"[2001:db8:1:3::1]:1", 200},
	}
	for i, s := range steps {
		status, retry := read(s.peer)
		if status != s.want {
			t.Fatalf("step %d from %s: %d, want %d", i, s.peer, status, s.want)
		}
		if n, err := strconv.Atoi(retry); status == 429 && (err != nil || n < 1) {
			t.Errorf("step %d: 429 with Retry-After %q", i, retry)
		}
	}
}

// Off (MINTGATE_READ_LIMIT off), the limiter is nil and lets everything
// through: reads, and charged routes however often they are charged.
func TestOffLetsAllThrough(t *testing.T) {
	rl := readlimit.New(three, false, identity.ClientIP{})
	if rl != nil {
		t.Fatal("an off limiter is not nil")
	}
	read := reader(rl)
	r := httptest.NewRequest(http.MethodPost, "/uploads/sign", nil)
	for i := range 10 {
		if status, _ := read("203.0.113.7:1"); status != 200 {
			t.Fatalf("read %d: %d", i, status)
		}
		rl.Charge(r, anon)
		if err := rl.Admit(r, anon); err != nil {
			t.Fatalf("admit %d: %v", i, err)
		}
	}
}

// Admit spends nothing: a charged route is refused only once what it was
// charged (replays, refusals) empties its address's bucket, and then with
// 429 too_many_requests.
func TestAdmitRefusesOnlyWhatWasCharged(t *testing.T) {
	rl := readlimit.New(three, true, identity.ClientIP{})
	r := httptest.NewRequest(http.MethodPost, "/uploads/sign", nil)
	r.RemoteAddr = "203.0.113.7:1"
	for i := range 10 {
		if err := rl.Admit(r, anon); err != nil {
			t.Fatalf("admit %d refused with nothing charged: %v", i, err)
		}
	}
	for range 3 {
		rl.Charge(r, anon)
	}
	err := rl.Admit(r, anon)
	if err == nil || err.Status != http.StatusTooManyRequests || err.Code != apierr.CodeTooManyReads || err.RetryAfter < 1 {
		t.Fatalf("admit after the burst was charged: %+v", err)
	}
	other := httptest.NewRequest(http.MethodPost, "/uploads/sign", nil)
	other.RemoteAddr = "203.0.113.8:1"
	if err := rl.Admit(other, anon); err != nil {
		t.Errorf("another address refused: %v", err)
	}
}

// An authenticated caller's replays and refusals are charged to that
// caller: one user who empties its bucket leaves another user at the same
// address, and the address's anonymous callers, admitted.
func TestChargedToTheAuthenticatedCaller(t *testing.T) {
	rl := readlimit.New(three, true, identity.ClientIP{})
	r := httptest.NewRequest(http.MethodPost, "/uploads/sign", nil)
	r.RemoteAddr = "203.0.113.7:1"
	alice := identity.Caller{Tenant: "acme", Subject: "u:alice", Tier: tiers.User}
	bob := identity.Caller{Tenant: "acme", Subject: "u:bob", Tier: tiers.User}
	for range 4 {
		rl.Charge(r, alice)
	}
	if err := rl.Admit(r, alice); err == nil || err.Status != http.StatusTooManyRequests {
		t.Fatalf("alice after her burst: %+v, want 429", err)
	}
	if err := rl.Admit(r, bob); err != nil {
		t.Errorf("bob at alice's address refused: %v", err)
	}
	if err := rl.Admit(r, anon); err != nil {
		t.Errorf("an anonymous caller at alice's address refused: %v", err)
	}
}
