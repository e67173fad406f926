package quota

import (
	"maps"
	"time"
)

// MaxCancelled is how many nonces a tombstone keeps.
const MaxCancelled = maxCancelled

// Entry is key's state in t as Redis would hold it — a string's value, or a
// hash's fields — and its time to live by t's clock; ok is false for a
// missing or expired key.
func (t *Twin) Entry(key string) (str string, hash map[string]string, ttl time.Duration, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := t.live(key)
	if k == nil {
		return "", nil, 0, false
	}
	return k.str, maps.Clone(k.hash), time.Duration(k.expires-t.clock().UnixMilli()) * time.Millisecond, true
}

// Set is SET key value PX ttl, as the completer sets a done marker.
func (t *Twin) Set(key, value string, ttl time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.set(key, value, ttl)
}
