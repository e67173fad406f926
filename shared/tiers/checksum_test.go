package tiers

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// requireChecksum beside a tenant's tiers: read as a boolean, YAML too;
// anything else refuses the file like a bad tier.
func TestRequireChecksumInTheFile(t *testing.T) {
	base := Set{Default: Table{User: {Capacity: 30}, Tenant: {Capacity: 600}, Anonymous: {Capacity: 10}}}
	path := filepath.Join(t.TempDir(), "tiers.yaml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("acme:\n  user: \"60:1\"\n  requireChecksum: true\nlax:\n  requireChecksum: false\n")
	l, err := NewLive(base, path)
	if err != nil {
		t.Fatal(err)
	}
	set := l.Tiers()
	for _, c := range []struct {
		tenant       string
		global, want bool
	}{{"acme", false, true}, {"lax", true, false}, {"other", true, true}, {"other", false, false}} {
		if got := set.RequiresChecksum(c.tenant, c.global); got != c.want {
			t.Errorf("%s with the global %v: %v, want %v", c.tenant, c.global, got, c.want)
		}
	}
	if lim, _ := set.For("acme", User); lim.Capacity != 60 {
		t.Errorf("acme's user tier %v: requireChecksum beside it changed it", lim)
	}
	for _, bad := range []string{`{"acme":{"requireChecksum":"yes"}}`, `{"acme":{"requireChecksum":"true"}}`, `{"acme":{"requireChecksum":1}}`} {
		write(bad)
		if _, err := NewLive(base, path); err == nil || !strings.Contains(err.Error(), RequireChecksum) {
			t.Errorf("%s: %v, want a refusal naming %s", bad, err, RequireChecksum)
		}
	}
}
