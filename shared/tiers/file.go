package tiers

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"gopkg.in/yaml.v3"

	"github.com/mintgate/mintgate/shared/keys"
)

// FilePoll is how often Live.Watch reads its file again.
//
// It reads rather than waits for inotify: a Kubernetes ConfigMap volume
// swaps a symlink to a new directory, an editor renames a new file over
// the old one, `kubectl cp` writes in place — a read of a small file each
// second sees every one of them, where a watch on the file misses the
// renames and a watch on the directory needs each case handled.
const FilePoll = time.Second

// Live is MINTGATE_TIERS with MINTGATE_TENANT_TIERS' overrides and,
// on top, those of MINTGATE_TENANT_TIERS_FILE, re-read while the service
// runs. A file that cannot be read or parsed changes nothing: the last
// good overrides stay. It is safe for concurrent use.
type Live struct {
	base Set
	path string
	cur  atomic.Pointer[Set]
	last []byte // the file's bytes the current set was built from
}

// NewLive reads the file at path (none: base alone, never changing).
// A file that is missing or bad at start is an error: a service must not
// start on limits other than its operator wrote.
func NewLive(base Set, path string) (*Live, error) {
	l := &Live{base: base, path: path}
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
func (l *Live) Tiers() Set { return *l.cur.Load() }

// Watch re-reads the file every FilePoll until ctx ends. After each
// read that found the file changed, report gets nil (applied) or why the
// last good set stays.
func (l *Live) Watch(ctx context.Context, report func(Set, error)) {
	if l.path == "" {
		return
	}
	t := time.NewTicker(FilePoll)
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
func (l *Live) reload() (changed bool, err error) {
	b, err := os.ReadFile(l.path)
	if err != nil {
		return false, fmt.Errorf("read %s: %w", l.path, err)
	}
	if l.last != nil && bytes.Equal(b, l.last) {
		return false, nil
	}
	l.last = b
	over, err := ParseFile(b, l.base.Default)
	if err != nil {
		return false, fmt.Errorf("%s: %w", l.path, err)
	}
	checksum, err := parseRequireChecksum(b)
	if err != nil {
		return false, fmt.Errorf("%s: %w", l.path, err)
	}
	hooks, err := ParseWebhooks(b)
	if err != nil {
		return false, fmt.Errorf("%s: %w", l.path, err)
	}
	downloads, err := parseDownloads(b)
	if err != nil {
		return false, fmt.Errorf("%s: %w", l.path, err)
	}
	set := Set{Default: l.base.Default, Tenants: maps.Clone(l.base.Tenants), Checksum: checksum, Webhooks: hooks, TenantDownloads: downloads}
	if set.Tenants == nil {
		set.Tenants = map[string]Table{}
	}
	for tenant, tiers := range over {
		merged := maps.Clone(set.Tenants[tenant])
		if merged == nil {
			merged = Table{}
		}
		maps.Copy(merged, tiers)
		set.Tenants[tenant] = merged
	}
	l.cur.Store(&set)
	return true, nil
}

// ParseFile reads MINTGATE_TENANT_TIERS_FILE's content: a JSON
// object (or the same in YAML) of tenant → tier → "<capacity>:<refill>",
// refill as in MINTGATE_TIERS, e.g. {"acme":{"user":"60:1","tenant":"1200:20"}}.
// Tiers are those of defaults and anonymous_all; nil defaults takes any
// tier name (the completer, which reads no tiers, checks only the file's
// syntax). A tenant's "webhook" entry is read by ParseWebhooks
// (webhook.go) and skipped here.
func ParseFile(b []byte, defaults Table) (map[string]Table, error) {
	raw, err := parseRaw(b)
	if err != nil {
		return nil, err
	}
	out := make(map[string]Table, len(raw))
	for tenant, entries := range raw {
		t := Table{}
		for name, node := range entries {
			if name == webhookEntry || name == RequireChecksum || name == DownloadsEntry {
				continue // not a tier: ParseWebhooks', parseRequireChecksum's and parseDownloads'
			}
			var spec string
			if err := node.Decode(&spec); err != nil {
				return nil, fmt.Errorf("tenant %q: tier %q: want \"capacity:refill\"", tenant, name)
			}
			if _, ok := defaults[name]; defaults != nil && !ok && name != AnonymousAll && !bytesTier(name) && !downloadTier(name) {
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

// parseRaw reads the file as tenant → entry name → value, each tenant id
// checked.
func parseRaw(b []byte) (map[string]map[string]yaml.Node, error) {
	var raw map[string]map[string]yaml.Node
	if err := yaml.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("want an object of tenant → tier → \"capacity:refill\": %w", err)
	}
	for tenant := range raw {
		if !keys.ValidTenant(tenant) {
			return nil, fmt.Errorf("%q is not a tenant id ([A-Za-z0-9_-]{1,64})", tenant)
		}
	}
	return raw, nil
}

// WatchAndLog starts l's watch of MINTGATE_TENANT_TIERS_FILE until ctx
// ends, logging each reload and counting failed ones in
// mintgate_config_reload_errors_total, registered on reg.
func (l *Live) WatchAndLog(ctx context.Context, reg prometheus.Registerer, log *slog.Logger) {
	failed := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "mintgate_config_reload_errors_total",
		Help: "Re-reads of MINTGATE_TENANT_TIERS_FILE that failed (unreadable or invalid): the last good tenant tiers stay in force.",
	})
	reg.MustRegister(failed)
	go l.Watch(ctx, func(set Set, err error) {
		if err != nil {
			failed.Inc()
			log.Error("tenant tiers file not applied; the last good tiers stay", "err", err)
			return
		}
		log.Info("tenant tiers file applied", "tiers", set.String())
	})
}
