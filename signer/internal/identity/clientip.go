package identity

import (
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/mintgate/mintgate/shared/auth"
)

// ClientIP finds the caller's address by the configured trust model
// (MINTGATE_IP_SOURCE). Only anonymous callers need it: their bucket is
// keyed by a hash of it.
type ClientIP struct {
	source  string
	trusted []netip.Prefix
}

// Of returns the client address of r, never an error: when a header cannot
// be trusted or parsed, the nearest address we can vouch for is used, which
// at worst puts a spoofer in a shared bucket rather than a fresh one.
func (ip ClientIP) Of(r *http.Request) netip.Addr {
	peer := remoteAddr(r.RemoteAddr)
	switch ip.source {
	case auth.IPCF:
		if !ip.isTrusted(peer) {
			return peer // anyone can write the header; only the edge is believed
		}
		if a, err := netip.ParseAddr(strings.TrimSpace(r.Header.Get(HeaderCFConnectingIP))); err == nil {
			return a.Unmap()
		}
		return peer
	case auth.IPXFF:
		return ip.fromForwardedFor(peer, r.Header.Values(HeaderForwardedFor))
	default:
		return peer
	}
}

// fromForwardedFor walks the chain from the socket peer leftwards, past
// every hop inside a trusted proxy range; the first hop outside them is the
// client. Entries further left were written by the client and prove nothing.
//
// This is not echo.ExtractIPFromXFFHeader, which walks the same way (with
// TrustLoopback, TrustLinkLocal and TrustPrivateNet off and a TrustIPRange
// per prefix) but gives up on the whole header at an entry it cannot parse
// and answers the socket peer, where garbage left of a trusted hop leaves
// the client here at the last address a trusted proxy vouched for, the one
// nearest the real client (TestClientIPTrustModels, "xff garbage left of
// a trusted hop"). Every other case of that test echo answers alike.
func (ip ClientIP) fromForwardedFor(peer netip.Addr, headers []string) netip.Addr {
	if !ip.isTrusted(peer) {
		return peer
	}
	var hops []string
	for _, h := range headers {
		hops = append(hops, strings.Split(h, ",")...)
	}
	client := peer
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			// Garbage left of a trusted hop: keep the last address a
			// trusted proxy vouched for.
			return client
		}
		client = a.Unmap()
		if !ip.isTrusted(client) {
			return client
		}
	}
	return client
}

func (ip ClientIP) isTrusted(a netip.Addr) bool {
	for _, p := range ip.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// remoteAddr parses a socket address ("ip:port", or a bare ip in tests).
func remoteAddr(s string) netip.Addr {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap()
	}
	host, _, err := net.SplitHostPort(s)
	if err != nil {
		host = s
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap()
	}
	return netip.Addr{}
}
