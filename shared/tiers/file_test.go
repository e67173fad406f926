package tiers

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mintgate/mintgate/shared/bucket"
)

func TestLiveTiers(t *testing.T) {
	defaults, err := Parse(Default)
	if err != nil {
		t.Fatal(err)
	}
	env, err := ParseTenants("acme:tenant=1000:20;globex:user=10:1", defaults)
	if err != nil {
		t.Fatal(err)
	}
	base := Set{Default: defaults, Tenants: env}
	path := filepath.Join(t.TempDir(), "tiers.yaml")
	if _, err := NewLive(base, path); err == nil {
		t.Error("a missing file at start: no error")
	}
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"acme":{"user":"60:1"},"initech":{"anonymous_all":"7:7/60s"}}`)
	l, err := NewLive(base, path)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		tenant, tier string
		want         bucket.Limit
	}{
		{"acme", User, bucket.Limit{Capacity: 60, Rate: 1}},      // the file's
		{"acme", Tenant, bucket.Limit{Capacity: 1000, Rate: 20}}, // the variable's, kept
		{"globex", User, bucket.Limit{Capacity: 10, Rate: 1}},    // the variable's
		{"initech", AnonymousAll, bucket.Limit{Capacity: 7, Rate: 7.0 / 60}},
		{"other", User, defaults[User]},
	} {
		if got, _ := l.Tiers().For(c.tenant, c.tier); got != c.want {
			t.Errorf("%s %s: %+v, want %+v", c.tenant, c.tier, got, c.want)
		}
	}

	for _, bad := range []string{`[1,2]`, `{"acme":{"gold":"1:1"}}`, `{"ac me":{"user":"1:1"}}`, `{"acme":{"user":"1"}}`, `{"acme":{"user":"0:1"}}`} {
		write(bad)
		if changed, err := l.reload(); changed || err == nil {
			t.Errorf("%s: changed %v, err %v; want an error and no change", bad, changed, err)
		}
		if got, _ := l.Tiers().For("acme", User); got.Capacity != 60 {
			t.Errorf("%s replaced the last good tiers: acme user %+v", bad, got)
		}
	}
	write("acme:\n  user: 5:0.1\n")
	if changed, err := l.reload(); !changed || err != nil {
		t.Fatalf("a good YAML file: changed %v, err %v", changed, err)
	}
	if changed, err := l.reload(); changed || err != nil {
		t.Errorf("the same file again: changed %v, err %v; want neither", changed, err)
	}
	if got, _ := l.Tiers().For("acme", User); got != (bucket.Limit{Capacity: 5, Rate: 0.1}) {
		t.Errorf("acme user %+v after the YAML file", got)
	}
	if s := l.Tiers().String(); !strings.Contains(s, "acme") {
		t.Errorf("String %q", s)
	}
}
