package tiers_test

import (
	"strings"
	"testing"

	"github.com/mintgate/mintgate/shared/config"
	"github.com/mintgate/mintgate/shared/tiers"
)

func env(m map[string]string) *config.Env {
	return config.New(func(k string) string { return m[k] })
}

func TestDefaultTiers(t *testing.T) {
	table, err := tiers.Parse(tiers.Default)
	if err != nil {
		t.Fatal(err)
	}
	a := table[tiers.Anonymous]
	if a.Capacity != 5 || a.Window() != 60 {
		t.Errorf("anonymous %+v", a)
	}
	if u := table[tiers.User]; u.Capacity != 30 || u.Rate != 0.5 || u.Window() != 60 {
		t.Errorf("user %+v", u)
	}
	if tn := table[tiers.Tenant]; tn.Capacity != 600 || tn.Rate != 10 {
		t.Errorf("tenant %+v", tn)
	}
}

func TestTierForms(t *testing.T) {
	for _, bad := range []string{"anonymous=5:0,user=1:1,tenant=1:1", "anonymous=x:1,user=1:1,tenant=1:1", "anonymous=5:5/0s,user=1:1,tenant=1:1", "anonymous=5,user=1:1,tenant=1:1"} {
		if _, err := tiers.Parse(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestTenantTiers(t *testing.T) {
	defaults, err := tiers.Parse(tiers.Default)
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		tenant, tier string
		capacity     float64
		rate         float64
	}
	good := []struct {
		in   string
		want []want
	}{
		{"", []want{{"acme", "user", 30, 0.5}, {"acme", "tenant", 600, 10}}},
		{"acme:user=60:1,tenant=1200:20;bigco:tenant=6000:100", []want{
			{"acme", "user", 60, 1}, {"acme", "tenant", 1200, 20}, {"acme", "anonymous", 5, 5.0 / 60},
			{"bigco", "tenant", 6000, 100}, {"bigco", "user", 30, 0.5},
			{"other", "user", 30, 0.5}, {"other", "tenant", 600, 10},
		}},
		{" acme : anonymous=10:10/60s , ; ", []want{{"acme", "anonymous", 10, 10.0 / 60}, {"acme", "user", 30, 0.5}}},
		{"Big_Co-2:user=2:1/1h", []want{{"Big_Co-2", "user", 2, 1.0 / 3600}}},
	}
	for _, tc := range good {
		e := env(map[string]string{"MINTGATE_TENANT_TIERS": tc.in})
		set := tiers.ReadTenants(e, "MINTGATE_TENANT_TIERS", defaults)
		if err := e.Err(); err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		for _, w := range tc.want {
			l, ok := set.For(w.tenant, w.tier)
			if !ok || l.Capacity != w.capacity || l.Rate != w.rate {
				t.Errorf("%q: For(%s, %s) = %+v, %v; want capacity %v, rate %v", tc.in, w.tenant, w.tier, l, ok, w.capacity, w.rate)
			}
		}
		if _, ok := set.For("acme", "gold"); ok {
			t.Errorf("%q: an undefined tier was found", tc.in)
		}
	}

	bad := map[string]string{
		"missing tenant":         "user=60:1",
		"no colon":               "acme",
		"no tiers":               "acme:",
		"empty tenant":           ":user=60:1",
		"tenant with brace":      "ac{me}:user=60:1",
		"tenant too long":        strings.Repeat("a", 65) + ":user=60:1",
		"tenant twice":           "acme:user=60:1;acme:tenant=1200:20",
		"tier twice":             "acme:user=60:1,user=70:1",
		"undefined tier":         "acme:gold=60:1",
		"bad item":               "acme:user=60",
		"capacity not a number":  "acme:user=lots:1",
		"capacity below one":     "acme:user=0.5:1",
		"zero refill":            "acme:user=60:0",
		"bad refill duration":    "acme:user=60:1/0s",
		"second tenant bad item": "acme:user=60:1;bigco:tenant",
	}
	for name, in := range bad {
		if _, err := tiers.ParseTenants(in, defaults); err == nil {
			t.Errorf("%s: %q accepted", name, in)
		}
		e := env(map[string]string{"MINTGATE_TENANT_TIERS": in})
		set := tiers.ReadTenants(e, "MINTGATE_TENANT_TIERS", defaults)
		if err := e.Err(); err == nil || !strings.Contains(err.Error(), "MINTGATE_TENANT_TIERS") {
			t.Errorf("%s: %q: error %v does not name MINTGATE_TENANT_TIERS", name, in, err)
		}
		if l, _ := set.For("acme", tiers.User); l != defaults[tiers.User] {
			t.Errorf("%s: a rejected value still overrides: %+v", name, l)
		}
	}
}

// An override names only tiers of MINTGATE_TIERS, including custom ones.
func TestTenantTiersFollowTheDefaults(t *testing.T) {
	defaults, err := tiers.Parse("anonymous=5:0.5,user=30:0.5,tenant=600:10,gold=100:1")
	if err != nil {
		t.Fatal(err)
	}
	set := tiers.ReadTenants(env(map[string]string{"MINTGATE_TENANT_TIERS": "acme:gold=200:2"}), "MINTGATE_TENANT_TIERS", defaults)
	if l, ok := set.For("acme", "gold"); !ok || l.Capacity != 200 {
		t.Errorf("acme gold %+v, %v", l, ok)
	}
	if l, ok := set.For("bigco", "gold"); !ok || l.Capacity != 100 {
		t.Errorf("bigco gold %+v, %v", l, ok)
	}
	if got, want := set.String(), "anonymous=5:0.5,gold=100:1,tenant=600:10,user=30:0.5 acme:gold=200:2"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

// anonymous_all (docs/configuration.md): the bucket every anonymous caller of a tenant
// also spends from. Named in MINTGATE_TIERS or a tenant's override it is
// that; otherwise a quarter of the tenant's own tenant tier.
func TestAnonymousAllTier(t *testing.T) {
	cases := []struct {
		name, tiers, overrides string
		tenant                 string
		capacity, rate         float64
	}{
		{"derived from the default tenant tier", tiers.Default, "", "acme", 150, 2.5},
		{"derived from a tenant's override", tiers.Default, "bigco:tenant=6000:100", "bigco", 1500, 25},
		{"others keep the default's quarter", tiers.Default, "bigco:tenant=6000:100", "acme", 150, 2.5},
		{"at least one token", "anonymous=5:5/60s,user=30:0.5,tenant=2:0.1", "", "acme", 1, 0.025},
		{"named in MINTGATE_TIERS", tiers.Default + ",anonymous_all=40:1", "", "acme", 40, 1},
		{"named, whatever a tenant's tenant tier", tiers.Default + ",anonymous_all=40:1", "bigco:tenant=6000:100", "bigco", 40, 1},
		{"named in a tenant's override only", tiers.Default, "bigco:anonymous_all=10:10/60s", "bigco", 10, 10.0 / 60},
		{"the named override wins", tiers.Default + ",anonymous_all=40:1", "bigco:anonymous_all=10:1", "bigco", 10, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := env(map[string]string{"MINTGATE_TIERS": tc.tiers, "MINTGATE_TENANT_TIERS": tc.overrides})
			set := tiers.ReadTenants(e, "MINTGATE_TENANT_TIERS", tiers.Read(e, "MINTGATE_TIERS", tiers.Default))
			if err := e.Err(); err != nil {
				t.Fatal(err)
			}
			l, ok := set.For(tc.tenant, tiers.AnonymousAll)
			if !ok || l.Capacity != tc.capacity || l.Rate != tc.rate || l.Validate() != nil {
				t.Errorf("For(%s, anonymous_all) = %+v, %v; want capacity %v, rate %v", tc.tenant, l, ok, tc.capacity, tc.rate)
			}
		})
	}
	if _, err := tiers.Parse(tiers.Default + ",anonymous_all=0:1"); err == nil {
		t.Error("anonymous_all with capacity 0 accepted")
	}
}

// The tier variables read as one section: their defaults, and a bad value
// named by its variable.
func TestLimitsSection(t *testing.T) {
	e := env(nil)
	limits := tiers.ReadLimits(e)
	if err := e.Err(); err != nil {
		t.Fatal(err)
	}
	if limits.TiersFile != "" || limits.Tiers.Default[tiers.Tenant].Capacity != 600 {
		t.Errorf("defaults: %+v", limits)
	}
	for _, tc := range []struct{ name, value string }{
		{"MINTGATE_TIERS", "user=30:0.5"},
		{"MINTGATE_TENANT_TIERS", "acme:gold=1:1"},
	} {
		e := env(map[string]string{tc.name: tc.value})
		tiers.ReadLimits(e)
		if err := e.Err(); err == nil || !strings.Contains(err.Error(), tc.name) {
			t.Errorf("%s=%q: error %v does not name it", tc.name, tc.value, err)
		}
	}
}

// Tiers of bytes take binary suffixes, in the capacity and the refill, and
// are optional: unset, a sign spends no bytes.
func TestBytesTiers(t *testing.T) {
	tb, err := tiers.Parse("anonymous=5:5/60s,user=30:0.5,tenant=600:10,user_bytes=2GiB:2GiB/24h,tenant_bytes=100GiB:1024")
	if err != nil {
		t.Fatal(err)
	}
	if u := tb[tiers.UserBytes]; u.Capacity != 2<<30 || u.Rate != float64(2<<30)/86400 {
		t.Errorf("user_bytes %+v", u)
	}
	if tn := tb[tiers.TenantBytes]; tn.Capacity != 100<<30 || tn.Rate != 1024 {
		t.Errorf("tenant_bytes %+v", tn)
	}
	set := tiers.Set{Default: tb}
	bs := set.ByteBuckets("acme", "u:alice", tiers.User, 4<<20)
	if len(bs) != 2 || bs[0].Key != "rl:{t:acme}:bytes:u:alice" || bs[1].Key != "rl:{t:acme}:bytes:tenant" || bs[0].Units != 4<<20 {
		t.Errorf("byte buckets of a user: %+v", bs)
	}
	if bs := set.ByteBuckets("acme", "a:x", tiers.Anonymous, 1); len(bs) != 1 || bs[0].Key != "rl:{t:acme}:bytes:tenant" {
		t.Errorf("byte buckets of an anonymous caller without anonymous_bytes: %+v", bs)
	}
	if bs := (tiers.Set{Default: mustParse(t, tiers.Default)}).ByteBuckets("acme", "u:alice", tiers.User, 1); len(bs) != 0 {
		t.Errorf("without tiers of bytes: %+v", bs)
	}
	for _, bad := range []string{"user_bytes=2GB:1", "other_bytes=1MiB:1", "user_bytes=1MiB:x/1h"} {
		if _, err := tiers.Parse(tiers.Default + "," + bad); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
	if _, err := tiers.Parse("anonymous=5MiB:1,user=30:0.5,tenant=600:10"); err == nil {
		t.Error("a suffix on a tier of requests: accepted")
	}
	over, err := tiers.ParseTenants("acme:tenant_bytes=10MiB:1", mustParse(t, tiers.Default))
	if err != nil || over["acme"][tiers.TenantBytes].Capacity != 10<<20 {
		t.Errorf("a tenant's own tier of bytes: %v %v", over, err)
	}
}

func mustParse(t *testing.T, s string) tiers.Table {
	t.Helper()
	tb, err := tiers.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return tb
}
