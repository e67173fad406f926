package config

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"sync/atomic"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/mintgate/mintgate/shared/keys"
)

// TierFilePoll is how often LiveTiers.Watch reads its file again.
//
// It reads rather than waits for inotify: a Kubernetes ConfigMap volume
// swaps a symlink to a new directory, an editor renames a new file over
// the old one, `kubectl cp` writes in place — a read of a small file each
// second sees every one of them, where a watch on the file misses the
// renames and a watch on the directory needs each case handled.
const TierFilePoll = time.Second

// LiveTiers is MINTGATE_TIERS with MINTGATE_TENANT_TIERS' overrides and,
// on top, those of MINTGATE_TENANT_TIERS_FILE, re-read while the service
// runs. A file that cannot be read or parsed changes nothing: the last
// good overrides stay. It is safe for concurrent use.
type LiveTiers struct {
	base TierSet
	path string
	cur  atomic.Pointer[TierSet]
	last []byte // the file's bytes the current set was built from
}

// NewLiveTiers reads the file at path (none: base alone, never changing).
// A file that is missing or bad at start is an error: a service must not
// start on limits other than its operator wrote.
func NewLiveTiers(base TierSet, path string) (*LiveTiers, error) {
	l := &LiveTiers{base: base, path: path}
	l.cur.Store(&base)
	if path == "" {
		return l, nil
	}
	if _, err := l.reload(); err != nil {
		return nil, fmt.Errorf("MINTGATE_TENANT_TIERS_FILE: %w", err)
	}
	return l, nil
}

// Tiers is the set in force now.
func (l *LiveTiers) Tiers() TierSet { return *l.cur.Load() }

// Watch re-reads the file every TierFilePoll until ctx ends. After each
// read that found the file changed, report gets nil (applied) or why the
// last good set stays.
func (l *LiveTiers) Watch(ctx context.Context, report func(TierSet, error)) {
	if l.path == "" {
		return
	}
	t := time.NewTicker(TierFilePoll)
	defer t.Stop()
	failing := "" // the last error reported: a file gone for a minute is one error, not sixty
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		changed, err := l.reload()
		switch {
		case err != nil && err.Error() != failing:
			failing = err.Error()
			report(l.Tiers(), err)
		case changed:
			failing = ""
			report(l.Tiers(), nil)
		}
	}
}

// reload reads the file and, if its bytes changed and parse, puts the new
// set in force. A bad file is reported once per change, not every poll.
func (l *LiveTiers) reload() (changed bool, err error) {
	b, err := os.ReadFile(l.path)
	if err != nil {
		return false, fmt.Errorf("read %s: %w", l.path, err)
	}
	if l.last != nil && bytes.Equal(b, l.last) {
		return false, nil
	}
	l.last = b
	over, err := ParseTenantTiersFile(b, l.base.Default)
	if err != nil {
		return false, fmt.Errorf("%s: %w", l.path, err)
	}
	set := TierSet{Default: l.base.Default, Tenants: maps.Clone(l.base.Tenants)}
	if set.Tenants == nil {
		set.Tenants = map[string]Tiers{}
	}
	for tenant, tiers := range over {
		merged := maps.Clone(set.Tenants[tenant])
		if merged == nil {
			merged = Tiers{}
		}
		maps.Copy(merged, tiers)
		set.Tenants[tenant] = merged
	}
	l.cur.Store(&set)
	return true, nil
}

// ParseTenantTiersFile reads MINTGATE_TENANT_TIERS_FILE's content: a JSON
// object (or the same in YAML) of tenant → tier → "<capacity>:<refill>",
// refill as in MINTGATE_TIERS, e.g. {"acme":{"user":"60:1","tenant":"1200:20"}}.
// Tiers are those of defaults and anonymous_all.
func ParseTenantTiersFile(b []byte, defaults Tiers) (map[string]Tiers, error) {
	var raw map[string]map[string]string
	if err := yaml.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("want an object of tenant → tier → \"capacity:refill\": %w", err)
	}
	out := make(map[string]Tiers, len(raw))
	for tenant, tiers := range raw {
		if !keys.ValidTenant(tenant) {
			return nil, fmt.Errorf("%q is not a tenant id ([A-Za-z0-9_-]{1,64})", tenant)
		}
		t := Tiers{}
		for name, spec := range tiers {
			if _, ok := defaults[name]; !ok && name != TierAnonymousAll {
				return nil, fmt.Errorf("tenant %q: unknown tier %q", tenant, name)
			}
			_, lim, err := parseTierItem(name + "=" + spec)
			if err != nil {
				return nil, fmt.Errorf("tenant %q: %w", tenant, err)
			}
			t[name] = lim
		}
		out[tenant] = t
	}
	return out, nil
}
