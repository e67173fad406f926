package verdict_test

import (
	"net/netip"
	"testing"

	"github.com/mintgate/mintgate/signer/internal/verdict"
)

// A wait's address is an IPv4 caller's own, an IPv6 caller's /64.
func TestAddr(t *testing.T) {
	for in, want := range map[string]string{
		"203.0.113.7":          "203.0.113.7",
		"::ffff:203.0.113.7":   "203.0.113.7",
		"2001:db8:1:2::1":      "2001:db8:1:2::/64",
		"2001:db8:1:2:ffff::9": "2001:db8:1:2::/64",
		"2001:db8:1:3::1":      "2001:db8:1:3::/64",
	} {
		if got := verdict.Addr(netip.MustParseAddr(in)); got != want {
			t.Errorf("Addr(%s) = %q, want %q", in, got, want)
		}
	}
}

// Waits are bounded per address and in all; a wait that leaves gives its
// place back.
func TestEnterBoundsWaits(t *testing.T) {
	h := verdict.New(2, 3, make(chan struct{}))
	a1, a2 := h.Enter("a", "u1"), h.Enter("a", "u2")
	if a1 == nil || a2 == nil {
		t.Fatal("the first two waits of an address refused")
	}
	if h.Enter("a", "u3") != nil {
		t.Error("a third wait from one address admitted")
	}
	b := h.Enter("b", "u1")
	if b == nil {
		t.Fatal("another address refused")
	}
	if h.Enter("c", "u1") != nil {
		t.Error("a wait past the total admitted")
	}
	if h.Waiting() != 3 {
		t.Errorf("Waiting %d, want 3", h.Waiting())
	}
	a1.Leave()
	if h.Enter("a", "u4") == nil {
		t.Error("a place given back was not taken")
	}
	_ = b
}

// Wake wakes every wait for its urlId and no other, and never blocks on
// one already woken.
func TestWakeWakesTheUploadsWaits(t *testing.T) {
	h := verdict.New(10, 10, make(chan struct{}))
	w1, w2, other := h.Enter("a", "u1"), h.Enter("b", "u1"), h.Enter("a", "u2")
	h.Wake("u1")
	h.Wake("u1")
	for i, w := range []*verdict.Wait{w1, w2} {
		select {
		case <-w.Wake:
		default:
			t.Errorf("wait %d for u1 not woken", i)
		}
	}
	select {
	case <-other.Wake:
		t.Error("a wait for another upload woken")
	default:
	}
	w1.Leave()
	h.Wake("u1") // after a leave, no panic and w2 woken again
	select {
	case <-w2.Wake:
	default:
		t.Error("w2 not woken the second time")
	}
}
