package config

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/mintgate/mintgate/shared/bucket"
)

// The tiers every service expects in MINTGATE_TIERS.
const (
	TierAnonymous = "anonymous"
	TierUser      = "user"
	TierTenant    = "tenant"
)

// DefaultTiers is SPEC §1's table.
const DefaultTiers = "anonymous=5:5/60s,user=30:0.5,tenant=600:10"

// Tiers maps a tier name to its bucket shape.
type Tiers map[string]bucket.Limit

// ParseTiers reads "name=capacity:refill,…" where refill is tokens per second
// ("0.5") or tokens per duration ("5/60s"). The anonymous, user and tenant
// tiers must all be present.
func ParseTiers(s string) (Tiers, error) {
	tiers := Tiers{}
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, spec, ok := strings.Cut(item, "=")
		capS, refill, ok2 := strings.Cut(spec, ":")
		if !ok || !ok2 || name == "" {
			return nil, fmt.Errorf("%q: want name=capacity:refill", item)
		}
		if _, dup := tiers[name]; dup {
			return nil, fmt.Errorf("tier %q given twice", name)
		}
		capacity, err := strconv.ParseFloat(capS, 64)
		if err != nil {
			return nil, fmt.Errorf("tier %q: capacity %q is not a number", name, capS)
		}
		rate, err := parseRate(refill)
		if err != nil {
			return nil, fmt.Errorf("tier %q: %w", name, err)
		}
		l := bucket.Limit{Capacity: capacity, Rate: rate}
		if err := l.Validate(); err != nil {
			return nil, fmt.Errorf("tier %q: %w", name, err)
		}
		tiers[name] = l
	}
	for _, need := range []string{TierAnonymous, TierUser, TierTenant} {
		if _, ok := tiers[need]; !ok {
			return nil, fmt.Errorf("tier %q is missing", need)
		}
	}
	return tiers, nil
}

func parseRate(s string) (float64, error) {
	n, per, hasPer := strings.Cut(s, "/")
	tokens, err := strconv.ParseFloat(n, 64)
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

// String writes the tiers back in the form ParseTiers reads.
func (t Tiers) String() string {
	names := make([]string, 0, len(t))
	for n := range t {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s=%g:%g", n, t[n].Capacity, t[n].Rate)
	}
	return strings.Join(parts, ",")
}

// Tiers reads MINTGATE_TIERS-style variables.
func (e *Env) Tiers(name, def string) Tiers {
	t, err := ParseTiers(e.String(name, def))
	if err != nil {
		e.Fail(name, "%v", err)
		t, _ = ParseTiers(DefaultTiers)
	}
	return t
}
