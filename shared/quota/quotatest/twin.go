// Package quotatest is a double of quota.Store for tests, in the manner of
// net/http/httptest: Twin runs every script's logic in Go, in memory, and a
// differential test (shared/quota's diff_test.go) holds the two equal.
package quotatest

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/quota"
)

// Twin is quota.Store in Go, in memory: the same calls give the same replies
// and leave the same stored state as the scripts on Redis — bucket hashes
// (t, ts) by bucket.Step, idempotency and grant records, markers and their
// values. Its methods are the Store's, so one can stand in for the other;
// ctx is unused, and the only errors are the Store's refusals of invalid
// calls. It is safe for concurrent use.
//
// Keys expire by the clock given to NewTwin, as Redis expires them by its
// own; now in each call is the caller's clock for the buckets and the
// markers' values, as with a Store. Keys are typed as the scripts use them;
// what Redis would answer WRONGTYPE to is not modelled.
type Twin struct {
	mu    sync.Mutex
	clock func() time.Time
	keys  map[string]*twinKey
}

type twinKey struct {
	str     string            // a string's value (markers)
	hash    map[string]string // a hash's fields (buckets, records); nil for a string
	zset    map[string]int64  // a sorted set's members and scores (live grants)
	expires int64             // ms by the Twin's clock; the key is gone after it
}

// NewTwin returns an empty Twin whose keys expire by clock (time.Now when nil).
func NewTwin(clock func() time.Time) *Twin {
	if clock == nil {
		clock = time.Now
	}
	return &Twin{clock: clock, keys: make(map[string]*twinKey)}
}

// Spend is Store.Spend.
func (t *Twin) Spend(_ context.Context, now time.Time, a quota.Ask, inFlight time.Duration) (quota.Decision, error) {
	if err := quota.CheckSpend(a, inFlight); err != nil {
		return quota.Decision{}, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.spend(now, a, inFlight), nil
}

// spend is spend_fn.lua's spend(), under t.mu.
func (t *Twin) spend(now time.Time, a quota.Ask, inFlight time.Duration) quota.Decision {
	if !a.Until.IsZero() && t.clock().UnixMilli() > a.Until.UnixMilli() {
		return quota.Decision{Outcome: quota.Late}
	}
	switch state, ok := t.field(a.Idem, "state"); {
	case state == "cancelled":
		if t.cancelled(a.Idem, a.Nonce) {
			return quota.Decision{Outcome: quota.Cancelled}
		}
	case ok:
		if fp, ok := t.field(a.Idem, "fp"); !ok || fp != a.Fingerprint {
			return quota.Decision{Outcome: quota.Reused}
		}
		if state == "done" {
			body, _ := t.field(a.Idem, "body")
			return quota.Decision{Outcome: quota.Replay, Body: []byte(body)}
		}
		return quota.Decision{Outcome: quota.InProgress}
	}
	if l := a.Live; l != nil {
		if wait, full := t.liveFull(now, a.Tenant, l); full {
			return quota.Decision{Outcome: quota.LiveFull, Result: bucket.Result{RetryAfter: wait, Blocked: -1}}
		}
	}
	res := bucket.Step(now, 1, a.Buckets, t.loadBucket, t.saveBucket)
	if res.Allowed {
		delete(t.keys, a.Idem)
		t.hset(a.Idem, inFlight, "state", "pending", "fp", a.Fingerprint, "nonce", a.Nonce)
		if l := a.Live; l != nil {
			k := t.live(l.Key)
			if k == nil || k.zset == nil {
				k = &twinKey{zset: map[string]int64{}}
				t.keys[l.Key] = k
			}
			k.zset[a.Nonce] = l.Until.UnixMilli()
			k.expires = max(k.expires, t.clock().UnixMilli()+l.Until.UnixMilli()-now.UnixMilli())
		}
	}
	if res.Allowed {
		return quota.Decision{Outcome: quota.Allowed, Result: res}
	}
	return quota.Decision{Outcome: quota.Denied, Result: res}
}

// liveFull prunes l's set as spend_fn.lua does — members past their life
// by now, and those whose done or refunded marker exists — and reports
// whether it still holds l.Max, and how long until its first member ends.
func (t *Twin) liveFull(now time.Time, tenant string, l *quota.Live) (time.Duration, bool) {
	k := t.live(l.Key)
	if k == nil || k.zset == nil {
		return 0, false
	}
	ms := now.UnixMilli()
	first := int64(-1)
	for id, until := range k.zset {
		if until <= ms || t.live(keys.Done(tenant, id)) != nil || t.live(keys.Refunded(tenant, id)) != nil {
			delete(k.zset, id)
			continue
		}
		if first < 0 || until < first {
			first = until
		}
	}
	if len(k.zset) < l.Max {
		return 0, false
	}
	secs := (first - ms + 999) / 1000
	return time.Duration(max(secs, 1)) * time.Second, true
}

// Undo is Store.Undo.
func (t *Twin) Undo(_ context.Context, now time.Time, a quota.Ask, urlID string) (bool, error) {
	if err := quota.CheckUndo(a, urlID); err != nil {
		return false, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.inFlight(a) || t.own(a, "done") {
		delete(t.keys, a.Idem)
	}
	return t.refund(now, quota.Due{Tenant: a.Tenant, URLID: urlID, Buckets: a.Buckets}, false) == quota.Refunded, nil
}

// Finish is Store.Finish.
func (t *Twin) Finish(_ context.Context, a quota.Ask, f quota.Finished) error {
	if err := quota.CheckFinish(a, f); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.finish(a, f)
	return nil
}

// FinishOwn is Store.FinishOwn.
func (t *Twin) FinishOwn(_ context.Context, a quota.Ask, f quota.Finished) (bool, error) {
	if err := quota.CheckFinish(a, f); err != nil {
		return false, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	done := t.inFlight(a)
	if done {
		t.hset(a.Idem, f.RecordTTL, "state", "done", "body", string(f.Body))
	}
	t.grantRecord(a, f)
	return done, nil
}

// Cancel is Store.Cancel.
func (t *Twin) Cancel(_ context.Context, now time.Time, a quota.Ask) (bool, error) {
	if err := quota.CheckCancel(a); err != nil {
		return false, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch state, ok := t.field(a.Idem, "state"); {
	case t.inFlight(a):
		bucket.Step(now, -1, a.Buckets, t.loadBucket, t.saveBucket)
		delete(t.keys, a.Idem)
		t.hset(a.Idem, quota.CancelTTL, "state", "cancelled", "nonce", a.Nonce, "refunded", a.Nonce)
		return true, nil
	case state == "cancelled":
		if t.cancelled(a.Idem, a.Nonce) {
			refunded, ok := t.field(a.Idem, "refunded")
			return ok && refunded == a.Nonce, nil
		}
		nonces, _ := t.field(a.Idem, "nonce")
		list := append(strings.Fields(nonces), a.Nonce)
		t.hset(a.Idem, quota.CancelTTL, "nonce", strings.Join(list[max(0, len(list)-quota.MaxCancelled):], " "))
	case ok:
		// Another request's in-flight mark or done record.
	default:
		t.hset(a.Idem, quota.CancelTTL, "state", "cancelled", "nonce", a.Nonce)
	}
	return false, nil
}

// Refund is Store.Refund: the grants one after the other, in order.
func (t *Twin) Refund(_ context.Context, now time.Time, ds []quota.Due) ([]quota.RefundOutcome, error) {
	if err := quota.CheckRefund(ds); err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]quota.RefundOutcome, len(ds))
	for i, d := range ds {
		out[i] = t.refund(now, d, true)
	}
	return out, nil
}

// Status is Store.Status.
func (t *Twin) Status(_ context.Context, tenant, urlID string) (quota.Status, error) {
	if err := quota.CheckStatus(tenant, urlID); err != nil {
		return quota.Status{}, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	expiresAt, _ := t.field(keys.Grant(tenant, urlID), "expiresAt")
	subject, _ := t.field(keys.Grant(tenant, urlID), "subject")
	mp, _ := t.field(keys.Grant(tenant, urlID), "multipart")
	done := t.live(keys.Done(tenant, urlID))
	st := quota.Status{Done: done != nil, Refunded: t.live(keys.Refunded(tenant, urlID)) != nil, Subject: subject, Multipart: mp}
	if done != nil {
		st.DoneValue = done.str
	}
	if ms, err := strconv.ParseInt(expiresAt, 10, 64); err == nil {
		st.ExpiresAt, st.Found = time.UnixMilli(ms).UTC(), true
	}
	return st, nil
}

// inFlight reports whether a's key holds a's own in-flight mark: pending,
// with its fingerprint and its nonce.
func (t *Twin) inFlight(a quota.Ask) bool { return t.own(a, "pending") }

// own reports whether a's idempotency record is in state and a's own: its
// fingerprint and nonce.
func (t *Twin) own(a quota.Ask, state string) bool {
	st, _ := t.field(a.Idem, "state")
	fp, _ := t.field(a.Idem, "fp")
	nonce, ok := t.field(a.Idem, "nonce")
	return st == state && fp == a.Fingerprint && ok && nonce == a.Nonce
}

// cancelled reports whether the tombstone at key names nonce.
func (t *Twin) cancelled(key, nonce string) bool {
	nonces, _ := t.field(key, "nonce")
	return slices.Contains(strings.Fields(nonces), nonce)
}

// refund is one grant's step of refund.lua (sweep set: a done marker is
// made to live MarkerTTL at least), and undo.lua's after the key.
func (t *Twin) refund(now time.Time, d quota.Due, sweep bool) quota.RefundOutcome {
	switch k := t.live(keys.Done(d.Tenant, d.URLID)); {
	case k != nil:
		if at := t.clock().UnixMilli() + quota.MarkerTTL.Milliseconds(); sweep && k.expires < at {
			k.expires = at
		}
		return quota.Done
	case t.live(keys.Refunded(d.Tenant, d.URLID)) != nil:
		return quota.Already
	}
	credited := []float64{}
	if len(d.Buckets) > 0 {
		credited = bucket.Credit(now, d.Buckets, t.loadBucket, t.saveBucket)
	}
	t.set(keys.Refunded(d.Tenant, d.URLID), quota.CreditedRecord(quota.RefundRecord(now, d.Buckets), credited), quota.RefundedTTL)
	return quota.Refunded
}

// untaken is complete.lua's test for a refund record not taken back: a
// JSON object with its time and buckets and no take-back.
func untaken(v string) bool {
	var r struct {
		At      *float64         `json:"at"`
		Buckets *json.RawMessage `json:"buckets"`
		Taken   *json.RawMessage `json:"taken"`
	}
	return json.Unmarshal([]byte(v), &r) == nil && r.At != nil && r.Buckets != nil && r.Taken == nil
}

// Complete is Store.Complete: complete.lua, which never needs a second run
// here, the Twin reading the refund record under its own lock.
func (t *Twin) Complete(_ context.Context, now time.Time, c quota.Completion) (quota.Completed, error) {
	if err := quota.CheckComplete(c); err != nil {
		return quota.Completed{}, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	done := keys.Done(c.Tenant, c.URLID)
	var got quota.Completed
	if k := t.live(done); k != nil {
		got.Previous, got.Existed = k.str, true
	}
	if !c.First || !got.Existed {
		t.set(done, c.Value, markerTTL(c))
	} else if k := t.keys[done]; k.expires < t.clock().UnixMilli()+markerTTL(c).Milliseconds() {
		k.expires = t.clock().UnixMilli() + markerTTL(c).Milliseconds()
	}
	refunded := keys.Refunded(c.Tenant, c.URLID)
	k := t.live(refunded)
	if k == nil || !untaken(k.str) {
		return got, nil
	}
	bs, err := quota.ParseRefundRecord(c.Tenant, k.str)
	if err != nil {
		return quota.Completed{}, err
	}
	at, _ := quota.RefundedAt(k.str)
	if len(bs) > 0 {
		bucket.TakeBack(now, bs, quota.RefundCredits(k.str), t.loadBucket, t.saveBucket)
	}
	k.str = quota.TakenRecord(at.UnixMilli(), now)
	got.TookBack = true
	return got, nil
}

// markerTTL is the done marker's TTL Complete sets: c.TTL, MarkerTTL at the
// least.
func markerTTL(c quota.Completion) time.Duration { return max(c.TTL, quota.MarkerTTL) }

func (t *Twin) loadBucket(key string) (bucket.Stored, bool) {
	tok, ok := t.field(key, "t")
	stamp, _ := t.field(key, "ts")
	ts, err := strconv.ParseInt(stamp, 10, 64)
	if !ok || err != nil {
		return bucket.Stored{}, false
	}
	return bucket.Stored{T: tok, TS: ts}, true
}

func (t *Twin) saveBucket(key string, s bucket.Stored, ttl time.Duration, extend bool) {
	var kept int64
	if k := t.live(key); extend && k != nil {
		kept = k.expires
	}
	t.hset(key, ttl, "t", s.T, "ts", strconv.FormatInt(s.TS, 10))
	if k := t.keys[key]; k.expires < kept {
		k.expires = kept
	}
}

// live is key unless it is missing or expired by the Twin's clock (Redis
// keeps a key through its expiry millisecond).
func (t *Twin) live(key string) *twinKey {
	k := t.keys[key]
	if k != nil && t.clock().UnixMilli() > k.expires {
		delete(t.keys, key)
		return nil
	}
	return k
}

func (t *Twin) field(key, name string) (string, bool) {
	k := t.live(key)
	if k == nil {
		return "", false
	}
	v, ok := k.hash[name]
	return v, ok
}

// hset is HSET key fields… then PEXPIRE key ttl.
func (t *Twin) hset(key string, ttl time.Duration, fields ...string) {
	k := t.live(key)
	if k == nil || k.hash == nil {
		k = &twinKey{hash: make(map[string]string)}
		t.keys[key] = k
	}
	for i := 0; i+1 < len(fields); i += 2 {
		k.hash[fields[i]] = fields[i+1]
	}
	k.expires = t.clock().UnixMilli() + ttl.Milliseconds()
}

// set is SET key value PX ttl.
func (t *Twin) set(key, value string, ttl time.Duration) {
	t.keys[key] = &twinKey{str: value, expires: t.clock().UnixMilli() + ttl.Milliseconds()}
}

// SpendBatch is Store.SpendBatch: the Spends one after another, atomically.
// It reads its clock for each Spend's Until where the script reads Redis's
// once: the two differ only for an Until within the batch's own run.
func (t *Twin) SpendBatch(_ context.Context, ss []quota.Spending) ([]quota.Spent, error) {
	if err := quota.CheckSpendBatch(ss); err != nil {
		return nil, err
	}
	if len(ss) == 0 {
		return nil, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]quota.Spent, len(ss))
	for i, sp := range ss {
		out[i].Decision = t.spend(sp.Now, sp.Ask, sp.InFlight)
	}
	return out, nil
}

// FinishBatch is Store.FinishBatch: the Finishes one after another,
// atomically.
func (t *Twin) FinishBatch(_ context.Context, fs []quota.Finishing) ([]error, error) {
	if err := quota.CheckFinishBatch(fs); err != nil || len(fs) == 0 {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, f := range fs {
		t.finish(f.Ask, f.Finished)
	}
	return make([]error, len(fs)), nil
}

// finish is one Finish on t; under t.mu.
func (t *Twin) finish(a quota.Ask, f quota.Finished) {
	t.hset(a.Idem, f.RecordTTL, "state", "done", "fp", a.Fingerprint, "nonce", a.Nonce, "body", string(f.Body))
	t.grantRecord(a, f)
}

// grantRecord writes f's grant record; under t.mu.
func (t *Twin) grantRecord(a quota.Ask, f quota.Finished) {
	t.hset(keys.Grant(a.Tenant, f.URLID), f.GrantTTL, "expiresAt", strconv.FormatInt(f.ExpiresAt.UnixMilli(), 10), "subject", f.Subject)
	if f.ContentType != "" {
		t.hset(keys.Grant(a.Tenant, f.URLID), f.GrantTTL, "contentType", f.ContentType, "contentLength", strconv.FormatInt(f.ContentLength, 10))
	}
	if f.Multipart != "" {
		t.hset(keys.Grant(a.Tenant, f.URLID), f.GrantTTL, "multipart", f.Multipart)
	}
}

// Peek is Store.Peek.
func (t *Twin) Peek(_ context.Context, now time.Time, tenant string, bs []bucket.Bucket) ([]bucket.Result, error) {
	if err := quota.CheckPeek(tenant, bs); err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return quota.Peeked(now, bs, t.loadBucket), nil
}

// Refill is Store.Refill.
func (t *Twin) Refill(_ context.Context, tenant, key string) error {
	if err := quota.CheckRefill(tenant, key); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.keys, key)
	return nil
}

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
