// Package tiers is the bucket shapes a sign spends from: the tier names,
// the default table (MINTGATE_TIERS), the per-tenant overrides
// (MINTGATE_TENANT_TIERS, and the file MINTGATE_TENANT_TIERS_FILE, re-read
// while a service runs), and which buckets one sign spends from.
package tiers

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/webhook"
)

// The tiers every service expects in MINTGATE_TIERS.
const (
	Anonymous = "anonymous"
	User      = "user"
	Tenant    = "tenant"
)

// The optional tiers of bytes (SPEC §8): what a caller (by its tier) and a
// tenant may upload, as a bucket of bytes that each sign spends its
// contentLength from. Unset, nothing is counted in bytes.
const (
	AnonymousBytes = "anonymous_bytes"
	UserBytes      = "user_bytes"
	TenantBytes    = "tenant_bytes"
)

// bytesTier is whether name is a tier of bytes, whose amounts take binary
// suffixes (10MiB).
func bytesTier(name string) bool { return strings.HasSuffix(name, "_bytes") }

// BytesTierOf is the tier of bytes of a caller of tier (user or anonymous).
func BytesTierOf(tier string) string { return tier + "_bytes" }

// AnonymousAll is the optional tier of the bucket every anonymous
// caller of a tenant also spends from (docs/api.md), so that no number of
// addresses drains the tenant. When MINTGATE_TIERS does not name it, it is
// derived per tenant: a quarter of that tenant's tenant tier.
const AnonymousAll = "anonymous_all"

// anonymousAllShare is the share of the tenant tier a derived anonymous_all
// tier holds: anonymous callers can take at most a quarter of a tenant's
// signing, leaving the rest to its signed-in users.
const anonymousAllShare = 0.25

// Default is the tier table docs/configuration.md gives as the default.
const Default = "anonymous=5:5/60s,user=30:0.5,tenant=600:10"

// Table maps a tier name to its bucket shape.
type Table map[string]bucket.Limit

// Parse reads "name=capacity:refill,…" where refill is tokens per second
// ("0.5") or tokens per duration ("5/60s"). The anonymous, user and tenant
// tiers must all be present; anonymous_all may be (Set.For derives it).
func Parse(s string) (Table, error) {
	tiers, err := parseTierList(s)
	if err != nil {
		return nil, err
	}
	for _, need := range []string{Anonymous, User, Tenant} {
		if _, ok := tiers[need]; !ok {
			return nil, fmt.Errorf("tier %q is missing", need)
		}
	}
	return tiers, nil
}

// parseTierList reads a comma-separated list of tier items, each named once.
func parseTierList(s string) (Table, error) {
	tiers := Table{}
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, l, err := parseTierItem(item)
		if err != nil {
			return nil, err
		}
		if _, dup := tiers[name]; dup {
			return nil, fmt.Errorf("tier %q given twice", name)
		}
		tiers[name] = l
	}
	return tiers, nil
}

// parseTierItem reads one "name=capacity:refill".
func parseTierItem(item string) (string, bucket.Limit, error) {
	name, spec, ok := strings.Cut(item, "=")
	capS, refill, ok2 := strings.Cut(spec, ":")
	if !ok || !ok2 || name == "" {
		return "", bucket.Limit{}, fmt.Errorf("%q: want name=capacity:refill", item)
	}
	if bytesTier(name) && name != AnonymousBytes && name != UserBytes && name != TenantBytes && name != DownloadBytes {
		return "", bucket.Limit{}, fmt.Errorf("tier %q: the tiers of bytes are %s, %s, %s and %s", name, AnonymousBytes, UserBytes, TenantBytes, DownloadBytes)
	}
	capacity, err := parseAmount(capS, bytesTier(name))
	if err != nil {
		return "", bucket.Limit{}, fmt.Errorf("tier %q: capacity %q is not a number%s", name, capS, bytesHint(name))
	}
	rate, err := parseRate(refill, bytesTier(name))
	if err != nil {
		return "", bucket.Limit{}, fmt.Errorf("tier %q: %w", name, err)
	}
	l := bucket.Limit{Capacity: capacity, Rate: rate}
	if err := l.Validate(); err != nil {
		return "", bucket.Limit{}, fmt.Errorf("tier %q: %w", name, err)
	}
	return name, l, nil
}

// binarySuffixes are the units an amount of bytes may carry.
var binarySuffixes = []struct {
	suffix string
	factor float64
}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}

// parseAmount reads a number; of bytes, with one of binarySuffixes or none.
func parseAmount(s string, bytes bool) (float64, error) {
	factor := 1.0
	if bytes {
		for _, u := range binarySuffixes {
			if n, ok := strings.CutSuffix(s, u.suffix); ok {
				s, factor = n, u.factor
				break
			}
		}
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, err
	}
	return v * factor, nil
}

func bytesHint(name string) string {
	if bytesTier(name) {
		return " of bytes (such as 2GiB, 512MiB or 1048576)"
	}
	return ""
}

func parseRate(s string, bytes bool) (float64, error) {
	n, per, hasPer := strings.Cut(s, "/")
	tokens, err := parseAmount(n, bytes)
	if err != nil {
		return 0, fmt.Errorf("refill %q is not a number", s)
	}
	if !hasPer {
		return tokens, nil
	}
	d, err := time.ParseDuration(per)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("refill %q: %q is not a positive duration", s, per)
	}
	return tokens / d.Seconds(), nil
}

// String writes the tiers back in the form Parse reads.
func (t Table) String() string {
	names := t.sorted()
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s=%g:%g", n, t[n].Capacity, t[n].Rate)
	}
	return strings.Join(parts, ",")
}

// Set is the default tiers with per-tenant overrides of some of them
// (MINTGATE_TIERS and MINTGATE_TENANT_TIERS).
type Set struct {
	Default Table
	// Tenants holds, per tenant id, only the tiers that tenant overrides.
	Tenants map[string]Table
	// Checksum holds the tenants whose requireChecksum the file sets
	// (RequiresChecksum).
	Checksum map[string]bool
	// Webhooks holds, per tenant id, the endpoint of its upload events
	// when MINTGATE_TENANT_TIERS_FILE names one (ParseWebhooks).
	Webhooks map[string]webhook.Endpoint
	// TenantDownloads holds the tenants whose file entry says
	// "downloads":"tenant" (DownloadsByTenant).
	TenantDownloads map[string]bool
}

// For is the tenant's limit for tier: its override, else the default. It
// is false when tier is not configured at all. anonymous_all, when neither
// names it, is a quarter of the tenant's own tenant tier (at least one
// token), so a tenant whose tenant tier is overridden gets a matching one.
func (s Set) For(tenant, tier string) (bucket.Limit, bool) {
	if l, ok := s.Tenants[tenant][tier]; ok {
		return l, true
	}
	if l, ok := s.Default[tier]; ok || tier != AnonymousAll {
		return l, ok
	}
	t, ok := s.For(tenant, Tenant)
	return Share(t, anonymousAllShare), ok
}

// Share is share of l: share × its capacity and its refill, the same
// window, holding at least one token, or a small tier would refuse every
// sign. It is how anonymous_all is derived from the tenant tier, and a
// degraded signer's local slice of each tier.
func Share(l bucket.Limit, share float64) bucket.Limit {
	return bucket.Limit{Capacity: max(1, l.Capacity*share), Rate: l.Rate * share}
}

// String writes the defaults in the form Parse reads, then, after a
// space, the overrides in the form ParseTenants reads.
func (s Set) String() string {
	if len(s.Tenants) == 0 {
		return s.Default.String()
	}
	ids := make([]string, 0, len(s.Tenants))
	for id := range s.Tenants {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = id + ":" + s.Tenants[id].String()
	}
	return s.Default.String() + " " + strings.Join(parts, ";")
}

// ParseTenants reads "tenant:name=capacity:refill[,name=…][;tenant:…]":
// per tenant, the tiers it overrides, in Parse's item form. Tenant ids
// must be valid and given once; every tier must be one of defaults.
func ParseTenants(s string, defaults Table) (map[string]Table, error) {
	out := map[string]Table{}
	for entry := range strings.SplitSeq(s, ";") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		id, list, ok := strings.Cut(entry, ":")
		id = strings.TrimSpace(id)
		if !ok {
			return nil, fmt.Errorf("%q: want tenant:name=capacity:refill[,…]", entry)
		}
		if !keys.ValidTenant(id) {
			return nil, fmt.Errorf("%q is not a tenant id ([A-Za-z0-9_-]{1,64})", id)
		}
		if _, dup := out[id]; dup {
			return nil, fmt.Errorf("tenant %q given twice", id)
		}
		tiers, err := parseTierList(list)
		if err != nil {
			return nil, fmt.Errorf("tenant %q: %w", id, err)
		}
		if len(tiers) == 0 {
			return nil, fmt.Errorf("tenant %q: no tiers given", id)
		}
		for name := range tiers {
			// anonymous_all and the tiers of bytes are optional: a tenant
			// may have its own without a default.
			if _, ok := defaults[name]; !ok && name != AnonymousAll && !bytesTier(name) && !downloadTier(name) {
				return nil, fmt.Errorf("tenant %q: tier %q is not defined in MINTGATE_TIERS (%s)", id, name, strings.Join(defaults.sorted(), ", "))
			}
		}
		out[id] = tiers
	}
	return out, nil
}

// sorted is the tier names in order.
func (t Table) sorted() []string {
	names := make([]string, 0, len(t))
	for n := range t {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
