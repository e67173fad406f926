package identity

import (
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/mintgate/mintgate/shared/auth"
)

func TestClientIPTrustModels(t *testing.T) {
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8:ffff::/48")}
	cases := []struct {
		name   string
		model  ClientIP
		remote string
		cf     string
		xff    []string
		want   string
	}{
		{"remote ignores headers", ClientIP{source: auth.IPRemote}, "203.0.113.7:5000", "198.51.100.1", []string{"198.51.100.2"}, "203.0.113.7"},
		{"remote unmaps IPv4-in-IPv6", ClientIP{source: auth.IPRemote}, "[::ffff:203.0.113.7]:5000", "", nil, "203.0.113.7"},
		{"remote IPv6", ClientIP{source: auth.IPRemote}, "[2001:db8::1]:443", "", nil, "2001:db8::1"},

		{"cf header without trusted ranges", ClientIP{source: auth.IPCF}, "10.1.1.1:1", "198.51.100.1", nil, "10.1.1.1"},
		{"cf header from a trusted edge", ClientIP{source: auth.IPCF, trusted: proxies}, "10.1.1.1:1", "198.51.100.1", nil, "198.51.100.1"},
		{"cf header from an untrusted peer", ClientIP{source: auth.IPCF, trusted: proxies}, "203.0.113.9:1", "198.51.100.1", nil, "203.0.113.9"},
		{"cf header missing", ClientIP{source: auth.IPCF, trusted: proxies}, "10.1.1.1:1", "", nil, "10.1.1.1"},
		{"cf header garbage", ClientIP{source: auth.IPCF, trusted: proxies}, "10.1.1.1:1", "not-an-ip", nil, "10.1.1.1"},
		{"cf header mapped", ClientIP{source: auth.IPCF, trusted: proxies}, "10.1.1.1:1", "::ffff:198.51.100.1", nil, "198.51.100.1"},

		{"xff one proxy", ClientIP{source: auth.IPXFF, trusted: proxies}, "10.0.0.2:1", "", []string{"198.51.100.1"}, "198.51.100.1"},
		{"xff spoofed leftmost", ClientIP{source: auth.IPXFF, trusted: proxies}, "10.0.0.2:1", "", []string{"1.2.3.4, 198.51.100.1"}, "198.51.100.1"},
		{"xff two proxies", ClientIP{source: auth.IPXFF, trusted: proxies}, "10.0.0.2:1", "", []string{"6.6.6.6, 198.51.100.1, 10.9.9.9"}, "198.51.100.1"},
		{"xff split over headers", ClientIP{source: auth.IPXFF, trusted: proxies}, "10.0.0.2:1", "", []string{"6.6.6.6", "198.51.100.1, 10.9.9.9"}, "198.51.100.1"},
		{"xff from an untrusted peer", ClientIP{source: auth.IPXFF, trusted: proxies}, "203.0.113.9:1", "", []string{"198.51.100.1"}, "203.0.113.9"},
		{"xff all trusted", ClientIP{source: auth.IPXFF, trusted: proxies}, "10.0.0.2:1", "", []string{"10.3.3.3, 10.4.4.4"}, "10.3.3.3"},
		{"xff missing", ClientIP{source: auth.IPXFF, trusted: proxies}, "10.0.0.2:1", "", nil, "10.0.0.2"},
		{"xff garbage left of a trusted hop", ClientIP{source: auth.IPXFF, trusted: proxies}, "10.0.0.2:1", "", []string{"garbage, 10.9.9.9"}, "10.9.9.9"},
		{"xff garbage at the right", ClientIP{source: auth.IPXFF, trusted: proxies}, "10.0.0.2:1", "", []string{"198.51.100.1, garbage"}, "10.0.0.2"},
		{"xff IPv6 proxies", ClientIP{source: auth.IPXFF, trusted: proxies}, "[2001:db8:ffff::1]:1", "", []string{"2001:db8:1::7, 2001:db8:ffff::2"}, "2001:db8:1::7"},
		{"xff mapped entry", ClientIP{source: auth.IPXFF, trusted: proxies}, "10.0.0.2:1", "", []string{"::ffff:198.51.100.1"}, "198.51.100.1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/uploads/sign", nil)
			r.RemoteAddr = tc.remote
			if tc.cf != "" {
				r.Header.Set(HeaderCFConnectingIP, tc.cf)
			}
			for _, v := range tc.xff {
				r.Header.Add(HeaderForwardedFor, v)
			}
			if got := tc.model.Of(r); got.String() != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}
