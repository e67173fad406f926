package webhook

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"
)

// ErrPrivateAddress is a connection refused because the address it would
// reach is not public (MINTGATE_WEBHOOK_ALLOW_PRIVATE allows them).
var ErrPrivateAddress = errors.New("not a public address (MINTGATE_WEBHOOK_ALLOW_PRIVATE=true allows it)")

// notPublic are the ranges no webhook may reach besides those netip names
// (loopback, private, link-local, multicast, unspecified): shared address
// space, the IETF's and the documentation's blocks, benchmarking,
// reserved, the IPv4-translated addresses (::ffff:0:a.b.c.d, RFC 2765:
// a SIIT translator hands them to the embedded IPv4 address, and they are
// not the IPv4-mapped form Unmap undoes), NAT64's well-known prefix and
// the local-use one (each embeds an IPv4 address), 6to4
// and Teredo (likewise), the deprecated IPv4-compatible IPv6 addresses
// (::a.b.c.d: a host with a sit tunnel routes ::169.254.169.254 to the
// metadata service) and site-local ones, and the IPv6 documentation block.
var notPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("192.0.2.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("198.51.100.0/24"),
	netip.MustParsePrefix("203.0.113.0/24"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("::ffff:0:0:0/96"),
	netip.MustParsePrefix("64:ff9b::/96"),
	netip.MustParsePrefix("64:ff9b:1::/48"),
	netip.MustParsePrefix("2001::/32"),
	netip.MustParsePrefix("2002::/16"),
	netip.MustParsePrefix("2001:db8::/32"),
	netip.MustParsePrefix("100::/64"),
	netip.MustParsePrefix("::/96"),
	netip.MustParsePrefix("fec0::/10"),
}

// Public reports whether a is an address on the public internet.
func Public(a netip.Addr) bool {
	a = a.Unmap()
	if !a.IsValid() || !a.IsGlobalUnicast() || a.IsPrivate() || a.IsLoopback() ||
		a.IsLinkLocalUnicast() || a.IsMulticast() || a.IsUnspecified() {
		return false
	}
	for _, p := range notPublic {
		if p.Contains(a) {
			return false
		}
	}
	return true
}

// guard is a net.Dialer's Control: it runs after the name was resolved,
// on the very address the socket is about to connect to, so a name that
// resolves to a public address for a check and to a private one for the
// connection (DNS rebinding) is refused all the same.
func guard(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("webhook: connect to %s: %w", address, err)
	}
	if !Public(ap.Addr()) {
		return fmt.Errorf("webhook: connect to %s: %w", ap.Addr(), ErrPrivateAddress)
	}
	return nil
}

// dialer is the dialer of every try, its connect bounded by timeout (a
// try's MINTGATE_WEBHOOK_TIMEOUT): with allowPrivate it connects anywhere,
// else only to public addresses.
func dialer(timeout time.Duration, allowPrivate bool) *net.Dialer {
	d := &net.Dialer{Timeout: timeout}
	if !allowPrivate {
		d.Control = guard
	}
	return d
}
