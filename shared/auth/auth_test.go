package auth_test

import (
	"net/netip"
	"testing"

	"github.com/mintgate/mintgate/shared/auth"
)

// A trusted proxy range wide enough to hold other workloads (a cluster's
// pod range, a VPC, everything) is wide; a subnet of proxies, a single
// address or a CDN's public ranges are not.
func TestWideProxyRange(t *testing.T) {
	for p, wide := range map[string]bool{
		"10.0.0.0/8":         true, // the old k8s base: every pod of the cluster
		"172.16.0.0/12":      true,
		"192.168.0.0/16":     true,
		"10.42.0.0/23":       true,
		"0.0.0.0/0":          true,
		"::/0":               true,
		"fd00::/8":           true,
		"fd12:3456::/48":     true,
		"127.0.0.0/8":        true,
		"10.42.7.0/24":       false,
		"10.42.7.19/32":      false,
		"fd12:3456:0:1::/64": false,
		"173.245.48.0/20":    false, // Cloudflare's
		"104.16.0.0/13":      false,
		"2400:cb00::/32":     false,
	} {
		if got := auth.WideProxyRange(netip.MustParsePrefix(p)); got != wide {
			t.Errorf("WideProxyRange(%s) = %v, want %v", p, got, wide)
		}
	}
}
