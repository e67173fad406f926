package quota_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/quota"
	"github.com/mintgate/mintgate/shared/quota/quotatest"
	"github.com/mintgate/mintgate/shared/testenv"
)

// env is one behaviour case on one backend: a tenant of its own and a clock.
type env struct {
	t      *testing.T
	b      backend
	now    time.Time
	tenant string
}

var ctx = context.Background()

// ask is user's sign request with idempotency key idem: the user's bucket
// and the tenant's.
func (e *env) ask(user, idem string) quota.Ask {
	sub := keys.UserSubject(user)
	return e.request(sub, idem, bucket.Bucket{Key: keys.Bucket(e.tenant, sub), Limit: userLimit})
}

// anon is an anonymous sign request: the address's bucket, the tenant's and
// the tenant's anonymous_all bucket.
func (e *env) anon(ipHash, idem string) quota.Ask {
	sub := keys.AnonSubject(ipHash)
	a := e.request(sub, idem, bucket.Bucket{Key: keys.Bucket(e.tenant, sub), Limit: anonLimit})
	a.Buckets = append(a.Buckets, bucket.Bucket{Key: anonAllKey(e.tenant), Limit: anonAllLimit})
	return a
}

func (e *env) request(subject, idem string, caller bucket.Bucket) quota.Ask {
	return quota.Ask{
		Tenant:      e.tenant,
		Idem:        keys.Idempotency(e.tenant, subject, idem),
		Fingerprint: "fp:" + idem,
		Nonce:       "n:" + idem,
		Buckets:     []bucket.Bucket{caller, {Key: keys.TenantBucket(e.tenant), Limit: tenantLimit}},
	}
}

// anonAllKey is the tenant's anonymous_all bucket (shared/keys has no name for
// it yet).
func anonAllKey(tenant string) string { return "rl:{t:" + tenant + "}:sign:anon" }

func due(a quota.Ask, urlID string) quota.Due {
	return quota.Due{Tenant: a.Tenant, URLID: urlID, Buckets: a.Buckets}
}

func (e *env) spend(a quota.Ask) quota.Decision {
	e.t.Helper()
	d, err := e.b.Spend(ctx, e.now, a, inFlight)
	if err != nil {
		e.t.Fatalf("spend %s: %v", a.Idem, err)
	}
	return d
}

// batch spends asks in one SpendBatch, each at e.now.
func (e *env) batch(asks ...quota.Ask) []quota.Spent {
	e.t.Helper()
	ss := make([]quota.Spending, len(asks))
	for i, a := range asks {
		ss[i] = quota.Spending{Now: e.now, Ask: a, InFlight: inFlight}
	}
	got, err := e.b.SpendBatch(ctx, ss)
	if err != nil || len(got) != len(asks) {
		e.t.Fatalf("batch of %d: %v %v", len(asks), got, err)
	}
	return got
}

// spendN spends n tokens of user's, with keys k1…kn.
func (e *env) spendN(user string, n int) {
	e.t.Helper()
	for i := 1; i <= n; i++ {
		if d := e.spend(e.ask(user, fmt.Sprintf("k%d", i))); d.Outcome != quota.Allowed {
			e.t.Fatalf("spend %d of %s: %+v", i, user, d)
		}
	}
}

func (e *env) undo(a quota.Ask, urlID string) bool {
	e.t.Helper()
	ok, err := e.b.Undo(ctx, e.now, a, urlID)
	if err != nil {
		e.t.Fatalf("undo %s: %v", urlID, err)
	}
	return ok
}

func (e *env) finished(urlID, body string) quota.Finished {
	return quota.Finished{URLID: urlID, Subject: "u:alice", Body: []byte(body), ExpiresAt: e.now.Add(2 * time.Minute),
		RecordTTL: 2 * time.Minute, GrantTTL: time.Hour}
}

func (e *env) finish(a quota.Ask, urlID, body string) {
	e.t.Helper()
	if err := e.b.Finish(ctx, a, e.finished(urlID, body)); err != nil {
		e.t.Fatalf("finish %s: %v", urlID, err)
	}
}

// wantFreed checks that a's undone request left its key free: no record,
// and a retry is a new request, charged as one (30 − 1 − 1 + 1 left).
func (e *env) wantFreed(a quota.Ask) {
	e.t.Helper()
	if got := e.key(a.Idem); got.ok {
		e.t.Errorf("%s holds %+v, want nothing", a.Idem, got)
	}
	if d := e.spend(retry(a, "n:again")); d.Outcome != quota.Allowed || d.Result.Remaining != 29 {
		e.t.Errorf("retry: %+v, want allowed with 29 left", d)
	}
}

func (e *env) finishOwn(a quota.Ask, urlID, body string) bool {
	e.t.Helper()
	done, err := e.b.FinishOwn(ctx, a, e.finished(urlID, body))
	if err != nil {
		e.t.Fatalf("finish own %s: %v", urlID, err)
	}
	return done
}

func (e *env) cancel(a quota.Ask) bool {
	e.t.Helper()
	ok, err := e.b.Cancel(ctx, e.now, a)
	if err != nil {
		e.t.Fatalf("cancel %s %s: %v", a.Idem, a.Nonce, err)
	}
	return ok
}

// retry is a's request sent again with the same key: a new nonce.
func retry(a quota.Ask, nonce string) quota.Ask {
	a.Nonce = nonce
	return a
}

// tombstone is a cancelled record's fields: the nonces it names and, when
// its Cancel gave a token back, whose.
func tombstone(nonces, refunded string) map[string]string {
	m := map[string]string{"state": "cancelled", "nonce": nonces}
	if refunded != "" {
		m["refunded"] = refunded
	}
	return m
}

// wantRecord checks key holds exactly fields, with a TTL of ttl give or
// take the few seconds a test runs.
func (e *env) wantRecord(key string, fields map[string]string, ttl time.Duration) {
	e.t.Helper()
	got := e.key(key)
	if !got.ok || !maps.Equal(got.hash, fields) || got.ttl <= ttl-5*time.Second || got.ttl > ttl {
		e.t.Errorf("%s holds %+v, want %v with TTL %v", key, got, fields, ttl)
	}
}

func (e *env) refund(ds ...quota.Due) []quota.RefundOutcome {
	e.t.Helper()
	out, err := e.b.Refund(ctx, e.now, ds)
	if err != nil {
		e.t.Fatalf("refund: %v", err)
	}
	return out
}

func (e *env) status(urlID string) quota.Status {
	e.t.Helper()
	s, err := e.b.Status(ctx, e.tenant, urlID)
	if err != nil {
		e.t.Fatalf("status %s: %v", urlID, err)
	}
	return s
}

func (e *env) done(urlID string) { e.b.set(e.t, keys.Done(e.tenant, urlID), "1", 15*time.Minute) }

func (e *env) key(k string) stored { return e.b.get(e.t, k)[0] }

// tokens is what a bucket stores: its field t.
func (e *env) tokens(b bucket.Bucket) string { return e.key(b.Key).hash["t"] }

// wantTokens checks each bucket of a holds the given tokens.
func (e *env) wantTokens(a quota.Ask, want ...string) {
	e.t.Helper()
	for i, w := range want {
		if got := e.tokens(a.Buckets[i]); got != w {
			e.t.Errorf("%s holds %q tokens, want %q", a.Buckets[i].Key, got, w)
		}
	}
}

func (e *env) wantOutcomes(got []quota.RefundOutcome, want ...quota.RefundOutcome) {
	e.t.Helper()
	if !reflect.DeepEqual(got, want) {
		e.t.Errorf("refund outcomes %v, want %v", got, want)
	}
}

var cases = []struct {
	op, name string
	run      func(e *env)
}{
	{"spend", "live grants: the bound refuses, and frees a slot for a grant done, refunded or past its life", func(e *env) {
		live := func(a quota.Ask, until time.Duration) quota.Ask {
			a.Live = &quota.Live{Key: keys.LiveGrants(e.tenant, keys.UserSubject("alice")), Max: 3, Until: e.now.Add(until)}
			return a
		}
		for i, until := range []time.Duration{time.Minute, 2 * time.Minute, 3 * time.Minute} {
			if d := e.spend(live(e.ask("alice", fmt.Sprintf("l%d", i)), until)); d.Outcome != quota.Allowed {
				e.t.Fatalf("live grant %d: %v", i, d.Outcome)
			}
		}
		d := e.spend(live(e.ask("alice", "l3"), time.Minute))
		if d.Outcome != quota.LiveFull || d.Result.RetryAfter != time.Minute {
			e.t.Fatalf("fourth live grant: %+v, want LiveFull retrying in 1m", d)
		}
		e.wantTokens(e.ask("alice", "l3"), "27.000000", "597.000000")
		e.done("n:l1") // the grant of l1 completed: its slot frees
		if d := e.spend(live(e.ask("alice", "l4"), time.Minute)); d.Outcome != quota.Allowed {
			e.t.Fatalf("after a grant completed: %v", d.Outcome)
		}
		if d := e.spend(live(e.ask("alice", "l5"), time.Minute)); d.Outcome != quota.LiveFull {
			e.t.Fatalf("full again: %v", d.Outcome)
		}
		e.b.set(e.t, keys.Refunded(e.tenant, "n:l2"), "{}", time.Hour) // and one refunded
		if d := e.spend(live(e.ask("alice", "l6"), time.Minute)); d.Outcome != quota.Allowed {
			e.t.Fatalf("after a grant was refunded: %v", d.Outcome)
		}
		e.now = e.now.Add(90 * time.Second) // l0, l4 and l6 (1 minute) are past their life
		if d := e.spend(live(e.ask("alice", "l7"), time.Minute)); d.Outcome != quota.Allowed {
			e.t.Fatalf("after grants expired: %v", d.Outcome)
		}
	}},
	{"spend", "bytes: a bucket of bytes takes the sign's size, all or nothing with its token", func(e *env) {
		a := e.ask("alice", "b1")
		bytes := bucket.Bucket{Key: keys.ByteBucket(e.tenant, keys.UserSubject("alice")), Limit: bucket.Limit{Capacity: 10 << 20, Rate: 1}, Units: 4 << 20}
		a.Buckets = append(a.Buckets, bytes)
		for i := range 2 {
			a.Idem, a.Nonce = keys.Idempotency(e.tenant, "u:alice", fmt.Sprintf("b%d", i)), fmt.Sprintf("nb%d", i)
			if d := e.spend(a); d.Outcome != quota.Allowed || d.Result.BytesLeft[0] != int64(10<<20-(i+1)*(4<<20)) {
				e.t.Fatalf("4 MiB #%d: %+v", i, d)
			}
		}
		a.Idem, a.Nonce = keys.Idempotency(e.tenant, "u:alice", "b2"), "nb2"
		if d := e.spend(a); d.Outcome != quota.Denied || d.Result.Blocked != 2 {
			e.t.Fatalf("third 4 MiB: %+v, want denied by the bucket of bytes", d)
		}
		e.wantTokens(e.ask("alice", "b2"), "28.000000", "598.000000")
		if got := e.tokens(bytes); got != fmt.Sprintf("%d.000000", 2<<20) {
			e.t.Fatalf("bytes left %s", got)
		}
		e.refund(quota.Due{Tenant: e.tenant, URLID: "nb0", Buckets: a.Buckets})
		if got := e.tokens(bytes); got != fmt.Sprintf("%d.000000", 6<<20) {
			e.t.Fatalf("bytes after a refund %s, want 6 MiB", got)
		}
		// Its upload lands after all: the refund is taken back, bytes too.
		got, err := e.b.Complete(ctx, e.now, quota.Completion{Tenant: e.tenant, URLID: "nb0", Value: "1", TTL: time.Minute, First: true})
		if err != nil || !got.TookBack {
			e.t.Fatalf("complete after the refund: %+v %v", got, err)
		}
		if got := e.tokens(bytes); got != fmt.Sprintf("%d.000000", 2<<20) {
			e.t.Fatalf("bytes after the take-back %s, want 2 MiB", got)
		}
	}},
	{"spend", "allowed spends from every bucket and marks the key in flight", func(e *env) {
		a := e.ask("alice", "k1")
		d := e.spend(a)
		if d.Outcome != quota.Allowed || d.Result.Remaining != 29 || d.Result.Limit != 30 || d.Result.Scarcest != 0 {
			e.t.Fatalf("decision %+v", d)
		}
		e.wantTokens(a, "29.000000", "599.000000")
		e.wantRecord(a.Idem, map[string]string{"state": "pending", "fp": a.Fingerprint, "nonce": a.Nonce}, inFlight)
	}},
	{"batch", "mixed outcomes in one batch, each seeing the writes of those before it", func(e *env) {
		done := e.ask("alice", "kd")
		e.spend(done)
		e.finish(done, "u1", `{"u":1}`)
		for i := 1; i <= 5; i++ { // the address's bucket (5) runs dry
			e.spend(e.anon("x1", fmt.Sprintf("a%d", i)))
		}
		k1 := e.ask("alice", "k1")
		late := e.ask("alice", "k2")
		late.Until = time.Now().Add(-time.Hour)
		other := k1
		other.Fingerprint, other.Nonce = "fp:other", "n:other"
		k3 := e.ask("alice", "k3")
		k3.Until = time.Now().Add(time.Hour)
		asks := []quota.Ask{k1, retry(k1, "n:again"), retry(done, "n:replay"), e.anon("x1", "a6"), late, other, k3}
		want := []quota.Outcome{quota.Allowed, quota.InProgress, quota.Replay, quota.Denied, quota.Late, quota.Reused, quota.Allowed}
		got := e.batch(asks...)
		for i, w := range want {
			if got[i].Err != nil || got[i].Decision.Outcome != w {
				e.t.Errorf("spend %d (%s): %+v, want %v", i, asks[i].Idem, got[i], w)
			}
		}
		if string(got[2].Decision.Body) != `{"u":1}` {
			e.t.Errorf("replay body %q", got[2].Decision.Body)
		}
		if r := got[6].Decision.Result; r.Remaining != 27 {
			e.t.Errorf("the last spend saw %d tokens left, want 27: %+v", r.Remaining, r)
		}
		if r := got[3].Decision.Result; r.Allowed || r.Blocked != 0 {
			e.t.Errorf("denied spend: %+v", r)
		}
		e.wantTokens(k1, "27.000000", "592.000000") // the tenant: kd, a1…a5, k1, k3
		e.wantRecord(k1.Idem, map[string]string{"state": "pending", "fp": k1.Fingerprint, "nonce": k1.Nonce}, inFlight)
		if k := e.key(late.Idem); k.ok {
			e.t.Errorf("a late spend left the record %+v", k)
		}
	}},
	{"batch", "a batch of one is a Spend; the same request twice is allowed then pending; an empty batch is nothing", func(e *env) {
		a := e.ask("alice", "k1")
		if got := e.batch(a); got[0].Decision.Outcome != quota.Allowed || got[0].Decision.Result.Remaining != 29 {
			e.t.Fatalf("batch of one: %+v", got)
		}
		b := e.ask("bob", "k1")
		if got := e.batch(b, b); got[0].Decision.Outcome != quota.Allowed || got[1].Decision.Outcome != quota.InProgress {
			e.t.Fatalf("the same request twice: %+v", got)
		}
		e.wantTokens(b, "29.000000", "598.000000")
		if got, err := e.b.SpendBatch(ctx, nil); err != nil || len(got) != 0 {
			e.t.Fatalf("empty batch: %v %v", got, err)
		}
	}},
	{"spend", "late: a Spend that runs after its Until touches nothing, not even a replay", func(e *env) {
		// Until is by the server's clock (the Twin's is the wall clock):
		// an hour either way is past or future on both.
		a := e.ask("alice", "k1")
		late, soon := a, a
		late.Until, soon.Until = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
		if d := e.spend(late); d.Outcome != quota.Late {
			e.t.Fatalf("spend after its Until: %+v, want late", d)
		}
		if k := e.key(a.Idem); k.hash != nil || k.str != "" {
			e.t.Errorf("a late spend left the record %+v", k)
		}
		e.wantTokens(a, "", "")
		if d := e.spend(soon); d.Outcome != quota.Allowed {
			e.t.Fatalf("spend before its Until: %+v, want allowed", d)
		}
		e.finish(a, "u1", "{}")
		if d := e.spend(late); d.Outcome != quota.Late {
			e.t.Errorf("a late replay: %+v, want late", d)
		}
		e.wantTokens(a, "29.000000", "599.000000")
	}},

	{"peek", "reads every bucket alone, spends nothing and writes nothing", func(e *env) {
		a := e.ask("alice", "k1")
		res, err := e.b.Peek(ctx, e.now, e.tenant, a.Buckets)
		if err != nil || len(res) != 2 || res[0].Remaining != 30 || res[1].Remaining != 600 {
			e.t.Fatalf("peek of full buckets: %+v %v", res, err)
		}
		if k := e.key(a.Buckets[0].Key); k.ok {
			e.t.Errorf("a peek wrote the bucket: %+v", k)
		}
		e.spend(a)
		before := e.b.get(e.t, a.Buckets[0].Key, a.Buckets[1].Key)
		for range 2 {
			res, err = e.b.Peek(ctx, e.now.Add(time.Second), e.tenant, a.Buckets)
			if err != nil {
				e.t.Fatal(err)
			}
		}
		for i, k := range e.b.get(e.t, a.Buckets[0].Key, a.Buckets[1].Key) {
			if !maps.Equal(k.hash, before[i].hash) {
				e.t.Errorf("two peeks changed %s: %v, was %v", a.Buckets[i].Key, k.hash, before[i].hash)
			}
		}
		// A second later: 29.5 tokens for the user, the tenant full again.
		if res[0].Remaining != 29 || res[0].Limit != 30 || res[0].Reset != time.Second || res[1].Remaining != 600 || res[1].Limit != 600 {
			e.t.Errorf("peek after a spend: %+v", res)
		}
	}},

	{"spend", "pending while the first request is in flight", func(e *env) {
		a := e.ask("alice", "k1")
		e.spend(a)
		if d := e.spend(a); d.Outcome != quota.InProgress {
			e.t.Fatalf("second spend %+v", d)
		}
		e.wantTokens(a, "29.000000", "599.000000")
	}},
	{"spend", "reused: the same key for another request", func(e *env) {
		a := e.ask("alice", "k1")
		other := a
		other.Fingerprint = "fp:other"
		e.spend(a)
		if d := e.spend(other); d.Outcome != quota.Reused {
			e.t.Fatalf("in flight: %+v", d)
		}
		e.finish(a, "u1", `{"url":"x"}`)
		if d := e.spend(other); d.Outcome != quota.Reused {
			e.t.Fatalf("completed: %+v", d)
		}
		e.wantTokens(a, "29.000000")
	}},
	{"spend", "replay: the stored body, no token", func(e *env) {
		a := e.ask("alice", "k1")
		e.spend(a)
		e.finish(a, "u1", `{"url":"x"}`)
		d := e.spend(a)
		if d.Outcome != quota.Replay || string(d.Body) != `{"url":"x"}` {
			e.t.Fatalf("decision %+v", d)
		}
		e.wantTokens(a, "29.000000", "599.000000")
		e.wantRecord(a.Idem, map[string]string{"state": "done", "fp": a.Fingerprint, "nonce": a.Nonce, "body": `{"url":"x"}`}, 2*time.Minute)
	}},
	{"spend", "denial leaves every bucket's tokens and the key alone", func(e *env) {
		small := bucket.Limit{Capacity: 2, Rate: 0.01}
		withSmall := func(a quota.Ask) quota.Ask {
			a.Buckets = []bucket.Bucket{a.Buckets[0], {Key: a.Buckets[1].Key, Limit: small}}
			return a
		}
		e.spend(withSmall(e.ask("alice", "k1")))
		e.spend(withSmall(e.ask("alice", "k2")))
		bob := withSmall(e.ask("bob", "k1"))
		d := e.spend(bob)
		if d.Outcome != quota.Denied || d.Result.Blocked != 1 || d.Result.RetryAfter != 100*time.Second {
			e.t.Fatalf("decision %+v", d)
		}
		e.wantTokens(bob, "30.000000", "0.000000")
		if rec := e.key(bob.Idem); rec.ok {
			e.t.Errorf("a denied request holds its key: %+v", rec)
		}
	}},
	{"spend", "three buckets: anonymous_all blocks every address", func(e *env) {
		ip1, ip2 := e.anon("ip1", "k1"), e.anon("ip2", "k1")
		tiny := bucket.Limit{Capacity: 1, Rate: 0.01}
		ip1.Buckets[2].Limit, ip2.Buckets[2].Limit = tiny, tiny
		if d := e.spend(ip1); d.Outcome != quota.Allowed || d.Result.Scarcest != 2 {
			e.t.Fatalf("first address: %+v", d)
		}
		if d := e.spend(ip2); d.Outcome != quota.Denied || d.Result.Blocked != 2 {
			e.t.Fatalf("second address: %+v", d)
		}
		e.wantTokens(ip2, "5.000000", "599.000000", "0.000000")
	}},

	{"undo", "gives the token back, frees the key, marks the grant", func(e *env) {
		a := e.ask("alice", "k1")
		e.spend(a)
		if !e.undo(a, "u1") {
			e.t.Fatal("undo did not refund")
		}
		e.wantTokens(a, "30.000000", "600.000000")
		if rec := e.key(a.Idem); rec.ok {
			e.t.Errorf("key not freed: %+v", rec)
		}
		m := e.key(keys.Refunded(e.tenant, "u1"))
		var rec struct {
			At      int64 `json:"at"`
			Buckets []struct {
				Key string `json:"key"`
			} `json:"buckets"`
		}
		if err := json.Unmarshal([]byte(m.str), &rec); err != nil || rec.At != e.now.UnixMilli() || len(rec.Buckets) != len(a.Buckets) || rec.Buckets[0].Key != a.Buckets[0].Key ||
			m.ttl <= quota.RefundedTTL-5*time.Second || m.ttl > quota.RefundedTTL {
			e.t.Errorf("refunded marker %+v, want the refund record: the refund time in ms and the buckets credited (%v)", m, err)
		}
		if d := e.spend(a); d.Outcome != quota.Allowed {
			e.t.Errorf("retry after undo: %+v", d)
		}
	}},
	{"undo", "twice credits once", func(e *env) {
		e.spendN("alice", 3)
		a := e.ask("alice", "k3")
		if !e.undo(a, "u3") || e.undo(a, "u3") {
			e.t.Fatal("want refunded, then not")
		}
		e.wantTokens(a, "28.000000", "598.000000")
	}},
	{"undo", "then the sweeper's refund credits once", func(e *env) {
		e.spendN("alice", 3)
		a := e.ask("alice", "k3")
		e.undo(a, "u3")
		e.wantOutcomes(e.refund(due(a, "u3")), quota.Already)
		e.wantTokens(a, "28.000000", "598.000000")
	}},
	{"undo", "after the sweeper's refund credits nothing but frees the key", func(e *env) {
		e.spendN("alice", 3)
		a := e.ask("alice", "k3")
		e.wantOutcomes(e.refund(due(a, "u3")), quota.Refunded)
		if e.undo(a, "u3") {
			e.t.Error("undo refunded a grant the sweeper refunded")
		}
		e.wantTokens(a, "28.000000", "598.000000")
		if rec := e.key(a.Idem); rec.ok {
			e.t.Errorf("key not freed: %+v", rec)
		}
	}},
	{"undo", "after the upload landed credits nothing", func(e *env) {
		e.spendN("alice", 3)
		a := e.ask("alice", "k3")
		e.done("u3")
		if e.undo(a, "u3") {
			e.t.Error("undo refunded a landed upload")
		}
		e.wantTokens(a, "27.000000", "597.000000")
		if m := e.key(keys.Refunded(e.tenant, "u3")); m.ok {
			e.t.Errorf("refunded marker on a landed upload: %+v", m)
		}
	}},
	{"undo", "keeps a key another request holds", func(e *env) {
		a := e.ask("alice", "k1")
		e.spend(a)
		other := a
		other.Fingerprint = "fp:other"
		e.undo(other, "u1")
		if rec := e.key(a.Idem); rec.hash["fp"] != a.Fingerprint {
			e.t.Errorf("key freed for another request: %+v", rec)
		}
	}},
	{"undo", "keeps a key a retry of the same request holds", func(e *env) {
		a := e.ask("alice", "k1")
		e.spend(a)
		// The first request's undo comes late: its mark expired and a retry
		// (same fingerprint, its own nonce) holds the key now.
		e.undo(retry(a, "n:first"), "u1")
		e.wantRecord(a.Idem, map[string]string{"state": "pending", "fp": a.Fingerprint, "nonce": a.Nonce}, inFlight)
	}},

	{"cancel", "after the spend ran: every token back, a tombstone, and the spend run again takes nothing", func(e *env) {
		e.spendN("alice", 3)
		a := e.anon("ip1", "k4")
		e.spend(a)
		e.wantTokens(a, "4.000000", "596.000000", "149.000000")
		if !e.cancel(a) {
			e.t.Fatal("cancel did not refund")
		}
		e.wantTokens(a, "5.000000", "597.000000", "150.000000")
		e.wantRecord(a.Idem, tombstone(a.Nonce, a.Nonce), quota.CancelTTL)
		if d := e.spend(a); d.Outcome != quota.Cancelled {
			e.t.Errorf("spend after its cancel: %+v", d)
		}
		e.wantTokens(a, "5.000000", "597.000000", "150.000000")
		e.wantRecord(a.Idem, tombstone(a.Nonce, a.Nonce), quota.CancelTTL)
	}},
	{"cancel", "before the spend ran: a tombstone the spend finds, and takes nothing", func(e *env) {
		a := e.ask("alice", "k1")
		if e.cancel(a) {
			e.t.Error("cancel refunded a spend that never ran")
		}
		e.wantRecord(a.Idem, tombstone(a.Nonce, ""), quota.CancelTTL)
		if d := e.spend(a); d.Outcome != quota.Cancelled {
			e.t.Fatalf("late spend: %+v", d)
		}
		for _, b := range a.Buckets {
			if st := e.key(b.Key); st.ok {
				e.t.Errorf("late spend touched %s: %+v", b.Key, st)
			}
		}
		e.wantRecord(a.Idem, tombstone(a.Nonce, ""), quota.CancelTTL)
	}},
	{"cancel", "retried, answers as the first did and gives back once", func(e *env) {
		e.spendN("alice", 3)
		ran, never := e.ask("alice", "k3"), e.ask("alice", "k9")
		for try := range 2 {
			if !e.cancel(ran) {
				e.t.Errorf("cancel %d of a spend that ran: not refunded", try+1)
			}
			if e.cancel(never) {
				e.t.Errorf("cancel %d of a spend that never ran: refunded", try+1)
			}
		}
		e.wantTokens(ran, "28.000000", "598.000000")
		e.wantRecord(ran.Idem, tombstone(ran.Nonce, ran.Nonce), quota.CancelTTL)
		e.wantRecord(never.Idem, tombstone(never.Nonce, ""), quota.CancelTTL)
	}},
	{"cancel", "a retry with another nonce passes the tombstone, and the late spend then takes nothing", func(e *env) {
		a := e.ask("alice", "k1")
		e.spend(a)
		e.cancel(a)
		again := retry(a, "n:retry")
		if d := e.spend(again); d.Outcome != quota.Allowed || d.Result.Remaining != 29 {
			e.t.Fatalf("retry: %+v", d)
		}
		e.wantRecord(a.Idem, map[string]string{"state": "pending", "fp": a.Fingerprint, "nonce": again.Nonce}, inFlight)
		if d := e.spend(a); d.Outcome != quota.InProgress {
			e.t.Errorf("first request's spend while the retry is in flight: %+v", d)
		}
		e.finish(again, "u1", `{"url":"x"}`)
		if d := e.spend(a); d.Outcome != quota.Replay {
			e.t.Errorf("first request's spend once the retry completed: %+v", d)
		}
		e.wantTokens(a, "29.000000", "599.000000")
	}},
	{"cancel", "leaves another request's record alone", func(e *env) {
		a := e.ask("alice", "k1")
		e.spend(a)
		otherFP := a
		otherFP.Fingerprint = "fp:other"
		for _, other := range []quota.Ask{retry(a, "n:other"), otherFP} {
			if e.cancel(other) {
				e.t.Errorf("cancel of %s %s refunded another request", other.Fingerprint, other.Nonce)
			}
		}
		e.wantRecord(a.Idem, map[string]string{"state": "pending", "fp": a.Fingerprint, "nonce": a.Nonce}, inFlight)
		e.finish(a, "u1", "{}")
		if e.cancel(retry(a, "n:other")) || e.cancel(a) {
			e.t.Error("cancel of a completed request refunded")
		}
		e.wantRecord(a.Idem, map[string]string{"state": "done", "fp": a.Fingerprint, "nonce": a.Nonce, "body": "{}"}, 2*time.Minute)
		e.wantTokens(a, "29.000000", "599.000000")
	}},
	{"cancel", "a client's retries cut by one stall: every late spend takes nothing", func(e *env) {
		// Three requests with one key, each a 503 while Redis stalled; their
		// Spends and Cancels run in any order when it resumes.
		a := e.ask("alice", "k1")
		r1, r2, r3 := retry(a, "n:1"), retry(a, "n:2"), retry(a, "n:3")
		e.cancel(r1)
		e.cancel(r2)
		e.wantRecord(a.Idem, tombstone("n:1 n:2", ""), quota.CancelTTL)
		for _, r := range []quota.Ask{r2, r1} {
			if d := e.spend(r); d.Outcome != quota.Cancelled {
				e.t.Errorf("late spend %s: %+v", r.Nonce, d)
			}
		}
		if d := e.spend(r3); d.Outcome != quota.Allowed {
			e.t.Fatalf("spend %s: %+v", r3.Nonce, d)
		}
		if !e.cancel(r3) || e.cancel(r1) {
			e.t.Error("want the third refunded, the first not")
		}
		e.wantRecord(a.Idem, tombstone("n:3 n:1", "n:3"), quota.CancelTTL)
		e.wantTokens(a, "30.000000", "600.000000")
	}},
	{"cancel", "a tombstone keeps the newest nonces", func(e *env) {
		a := e.ask("alice", "k1")
		var names []string
		for i := range quota.MaxCancelled + 2 {
			r := retry(a, fmt.Sprintf("n:%d", i))
			e.cancel(r)
			names = append(names, r.Nonce)
		}
		e.wantRecord(a.Idem, tombstone(strings.Join(names[2:], " "), ""), quota.CancelTTL)
		if d := e.spend(retry(a, "n:2")); d.Outcome != quota.Cancelled {
			e.t.Errorf("a kept nonce: %+v", d)
		}
		if d := e.spend(retry(a, "n:0")); d.Outcome != quota.Allowed {
			e.t.Errorf("a nonce past the bound: %+v", d)
		}
	}},
	{"cancel", "a denied spend leaves the tombstone", func(e *env) {
		one := func(a quota.Ask) quota.Ask {
			a.Buckets = []bucket.Bucket{{Key: a.Buckets[0].Key, Limit: bucket.Limit{Capacity: 1, Rate: 0.01}}, a.Buckets[1]}
			return a
		}
		e.spend(one(e.ask("alice", "k1")))
		a := one(e.ask("alice", "k2"))
		e.cancel(a)
		if d := e.spend(retry(a, "n:retry")); d.Outcome != quota.Denied {
			e.t.Fatalf("retry: %+v", d)
		}
		e.wantRecord(a.Idem, tombstone(a.Nonce, ""), quota.CancelTTL)
		if d := e.spend(a); d.Outcome != quota.Cancelled {
			e.t.Errorf("late spend: %+v", d)
		}
	}},

	{"finish own", "over its own in-flight mark: done, and replayed", func(e *env) {
		a := e.ask("alice", "k1")
		e.spend(a)
		if done := e.finishOwn(a, "u1", `{"u":1}`); !done {
			e.t.Errorf("finish own over its own mark: not done")
		}
		e.wantRecord(a.Idem, map[string]string{"state": "done", "fp": a.Fingerprint, "nonce": a.Nonce, "body": `{"u":1}`}, 2*time.Minute)
		if s := e.status("u1"); !s.Found || s.Refunded {
			e.t.Errorf("grant record: %+v", s)
		}
		if d := e.spend(retry(a, "n:again")); d.Outcome != quota.Replay || string(d.Body) != `{"u":1}` {
			e.t.Errorf("replay: %+v", d)
		}
	}},

	{"finish own", "after its request's undo: no done record, nothing replays the grant given back", func(e *env) {
		// The request gave up on its FinishOwn (Redis stalled) and undid the
		// grant; the FinishOwn ran only then.
		a := e.ask("alice", "k1")
		e.spend(a)
		if !e.undo(a, "u1") {
			e.t.Fatalf("undo refunded nothing")
		}
		if done := e.finishOwn(a, "u1", `{"u":1}`); done {
			e.t.Errorf("finish own after the undo: done")
		}
		if s := e.status("u1"); !s.Refunded {
			e.t.Errorf("status: %+v, want refunded", s)
		}
		e.wantFreed(a)
	}},

	{"undo", "after its request's finish own ran: the done record goes, nothing replays", func(e *env) {
		// The FinishOwn ran, but its reply was lost: the request undid.
		a := e.ask("alice", "k1")
		e.spend(a)
		e.finishOwn(a, "u1", `{"u":1}`)
		if !e.undo(a, "u1") {
			e.t.Fatalf("undo refunded nothing")
		}
		e.wantFreed(a)
	}},

	{"undo", "another request's done record stays", func(e *env) {
		a := e.ask("alice", "k1")
		e.spend(a)
		e.finish(a, "u1", `{"u":1}`)
		e.undo(retry(a, "n:other"), "u2")
		e.wantRecord(a.Idem, map[string]string{"state": "done", "fp": a.Fingerprint, "nonce": a.Nonce, "body": `{"u":1}`}, 2*time.Minute)
	}},

	{"finish own", "over another request's record: left as it is, the grant record written", func(e *env) {
		a := e.ask("alice", "k1")
		other := retry(a, "n:other")
		e.spend(other)
		if done := e.finishOwn(a, "u1", `{"u":1}`); done {
			e.t.Errorf("finish own over another's mark: done")
		}
		e.wantRecord(a.Idem, map[string]string{"state": "pending", "fp": a.Fingerprint, "nonce": "n:other"}, inFlight)
		if s := e.status("u1"); !s.Found {
			e.t.Errorf("grant record not written: %+v", s)
		}
	}},

	{"finish", "over a tombstone: done, and the cancelled retry's late spend spends nothing", func(e *env) {
		// The first request's in-flight mark expired before its Finish, and
		// a retry was cancelled on the key meanwhile: its Spend may yet run.
		// The URL leaves, paid for; the key is done with its body, and the
		// retry's Spend, when it runs, replays that body (the same request)
		// and takes nothing.
		a := e.ask("alice", "k1")
		e.cancel(retry(a, "n:retry"))
		e.wantRecord(a.Idem, tombstone("n:retry", ""), quota.CancelTTL)
		e.finish(a, "u1", "{}")
		e.wantRecord(a.Idem, map[string]string{"state": "done", "fp": a.Fingerprint, "nonce": a.Nonce, "body": "{}"}, 2*time.Minute)
		if s := e.status("u1"); !s.Found {
			e.t.Errorf("grant record not written: %+v", s)
		}
		if d := e.spend(retry(a, "n:retry")); d.Outcome != quota.Replay || string(d.Body) != "{}" {
			e.t.Errorf("late spend: %+v", d)
		}
		// The late spend took nothing: the next request sees 29 of 30 left.
		if d := e.spend(e.ask("alice", "k2")); d.Outcome != quota.Allowed || d.Result.Remaining != 29 {
			e.t.Errorf("the next spend: %+v, want 29 left", d)
		}
	}},

	{"finish", "a batch: each record done with its own body, a tombstone too, every grant record written", func(e *env) {
		a, b, c := e.ask("alice", "k1"), e.ask("alice", "k2"), e.ask("bob", "k1")
		e.spend(a)
		e.spend(c)
		// b's in-flight mark expired and a retry of it was cancelled.
		e.cancel(retry(b, "n:retry"))
		fs := []quota.Finishing{
			{Ask: a, Finished: e.finished("u1", `{"u":1}`)},
			{Ask: b, Finished: e.finished("u2", `{"u":2}`)},
			{Ask: c, Finished: e.finished("u3", `{"u":3}`)},
			{Ask: a, Finished: e.finished("u1", `{"u":1}`)}, // a retried Finish: the same write again
		}
		got, err := e.b.FinishBatch(ctx, fs)
		if err != nil || len(got) != len(fs) {
			e.t.Fatalf("finish batch: %v %v", got, err)
		}
		for i, err := range got {
			if err != nil {
				e.t.Errorf("finish %d: %v", i, err)
			}
		}
		e.wantRecord(a.Idem, map[string]string{"state": "done", "fp": a.Fingerprint, "nonce": a.Nonce, "body": `{"u":1}`}, 2*time.Minute)
		e.wantRecord(b.Idem, map[string]string{"state": "done", "fp": b.Fingerprint, "nonce": b.Nonce, "body": `{"u":2}`}, 2*time.Minute)
		e.wantRecord(c.Idem, map[string]string{"state": "done", "fp": c.Fingerprint, "nonce": c.Nonce, "body": `{"u":3}`}, 2*time.Minute)
		for _, id := range []string{"u1", "u2", "u3"} {
			if s := e.status(id); !s.Found {
				e.t.Errorf("grant record %s not written: %+v", id, s)
			}
		}
		if d := e.spend(retry(a, "n:again")); d.Outcome != quota.Replay || string(d.Body) != `{"u":1}` {
			e.t.Errorf("replay: %+v", d)
		}
		if d := e.spend(retry(b, "n:retry")); d.Outcome != quota.Replay || string(d.Body) != `{"u":2}` {
			e.t.Errorf("late spend: %+v", d)
		}
		if got, err := e.b.FinishBatch(ctx, nil); err != nil || len(got) != 0 {
			e.t.Fatalf("empty batch: %v %v", got, err)
		}
	}},

	{"refund", "capped by the issuing tier", func(e *env) {
		a := e.ask("alice", "k1")
		e.spend(a)
		e.wantOutcomes(e.refund(due(a, "u1"), due(a, "u2")), quota.Refunded, quota.Refunded)
		e.wantTokens(a, "30.000000", "600.000000")
		// Into full buckets (no keys: full whatever their shape) a refund
		// writes nothing, so they stay full.
		other := *e
		other.tenant = e.tenant + "-b"
		c := other.ask("bob", "k1")
		e.wantOutcomes(e.refund(due(c, "u3")), quota.Refunded)
		for _, k := range bucketKeys(c.Buckets) {
			if got := e.key(k); got.ok {
				e.t.Errorf("a refund into a full bucket wrote %s: %+v", k, got)
			}
		}
	}},
	{"refund", "an anonymous grant never above the anonymous capacity", func(e *env) {
		a := e.anon("ip1", "k1")
		e.spend(a)
		e.wantOutcomes(e.refund(due(a, "u1"), due(a, "u2")), quota.Refunded, quota.Refunded)
		e.wantTokens(a, "5.000000", "600.000000", "150.000000")
	}},
	{"refund", "the same grant twice in one batch credits once", func(e *env) {
		e.spendN("alice", 3)
		a := e.ask("alice", "k3")
		e.wantOutcomes(e.refund(due(a, "u3"), due(a, "u3")), quota.Refunded, quota.Already)
		e.wantTokens(a, "28.000000", "598.000000")
		e.wantOutcomes(e.refund(due(a, "u3")), quota.Already)
	}},
	{"refund", "grants sharing buckets in one batch each count", func(e *env) {
		e.spendN("alice", 3)
		e.spendN("bob", 2)
		alice, bob := e.ask("alice", "k1"), e.ask("bob", "k1")
		e.wantOutcomes(e.refund(due(alice, "u1"), due(bob, "u4"), due(alice, "u2")), quota.Refunded, quota.Refunded, quota.Refunded)
		e.wantTokens(alice, "29.000000", "598.000000")
		e.wantTokens(bob, "29.000000")
	}},
	{"refund", "a landed upload credits nothing", func(e *env) {
		e.spendN("alice", 3)
		a := e.ask("alice", "k3")
		e.done("u3")
		e.wantOutcomes(e.refund(due(a, "u3"), due(a, "u2")), quota.Done, quota.Refunded)
		e.wantTokens(a, "28.000000", "598.000000")
	}},
	{"refund", "at the grant's own shape, never shortening the key's expiry", func(e *env) {
		// A caller whose tier is 2:2/1h spent both tokens; a sweeper
		// started with the default tiers refunds with the grant's shape.
		small := bucket.Limit{Capacity: 2, Rate: 2.0 / 3600}
		a := e.request(keys.UserSubject("shape"), "k1", bucket.Bucket{Key: keys.Bucket(e.tenant, keys.UserSubject("shape")), Limit: small})
		e.spend(a)
		e.spend(retry(a, "n:2"))
		before := e.key(a.Buckets[0].Key).ttl
		e.wantOutcomes(e.refund(due(a, "u1"), due(a, "u2")), quota.Refunded, quota.Refunded)
		e.wantTokens(a, "2.000000")
		if got := e.key(a.Buckets[0].Key).ttl; got < before-5*time.Second {
			e.t.Errorf("refund cut the bucket's expiry from %v to %v", before, got)
		}
		// A refund at a smaller shape than the bucket holds lowers nothing,
		// whether the bucket is full (no key) or holds more than the shape.
		big := e.ask("big", "k1")
		e.wantOutcomes(e.refund(due(big, "u4")), quota.Refunded)
		if k := e.key(big.Buckets[0].Key); k.ok {
			e.t.Errorf("a refund into a full bucket wrote %+v", k)
		}
		e.spend(big)
		shrunk := due(big, "u3")
		shrunk.Buckets[0].Limit = small
		e.wantOutcomes(e.refund(shrunk), quota.Refunded)
		e.wantTokens(big, "29.000000")
	}},
	{"refund", "a done marker found lives as long as a refunded marker", func(e *env) {
		a := e.ask("alice", "k1")
		e.done("u1")
		e.wantOutcomes(e.refund(due(a, "u1")), quota.Done)
		if m := e.key(keys.Done(e.tenant, "u1")); m.ttl < quota.MarkerTTL-5*time.Second {
			e.t.Errorf("done marker TTL %v after the sweep, want MarkerTTL", m.ttl)
		}
	}},
	{"complete", "a refund is taken back once when its upload lands after it", func(e *env) {
		e.spendN("alice", 3)
		a := e.ask("alice", "k3")
		e.wantOutcomes(e.refund(due(a, "u3")), quota.Refunded)
		e.wantTokens(a, "28.000000", "598.000000")
		c := quota.Completion{Tenant: e.tenant, URLID: "u3", Value: "1", TTL: 15 * time.Minute, First: true}
		got, err := e.b.Complete(ctx, e.now, c)
		if err != nil || !got.TookBack || got.Existed {
			e.t.Fatalf("complete after the refund: %+v %v", got, err)
		}
		e.wantTokens(a, "27.000000", "597.000000")
		if m := e.key(keys.Done(e.tenant, "u3")); m.str != "1" || m.ttl < quota.MarkerTTL-5*time.Second {
			e.t.Errorf("done marker %+v, want 1 for MarkerTTL", m)
		}
		again, err := e.b.Complete(ctx, e.now, c)
		if err != nil || again.TookBack || !again.Existed || again.Previous != "1" {
			e.t.Errorf("complete repeated: %+v %v", again, err)
		}
		e.wantTokens(a, "27.000000", "597.000000")
		e.wantOutcomes(e.refund(due(a, "u3")), quota.Done)
		if s := e.status("u3"); !s.Done {
			e.t.Errorf("status %+v, want done", s)
		}
	}},
	{"complete", "taking back may leave a bucket owing", func(e *env) {
		small := bucket.Limit{Capacity: 1, Rate: 1.0 / 60}
		sub := keys.UserSubject("owes")
		a := e.request(sub, "k1", bucket.Bucket{Key: keys.Bucket(e.tenant, sub), Limit: small})
		e.spend(a)
		e.wantOutcomes(e.refund(due(a, "u1")), quota.Refunded)
		e.spend(e.request(sub, "k2", a.Buckets[0])) // the refunded token, spent again
		got, err := e.b.Complete(ctx, e.now, quota.Completion{Tenant: e.tenant, URLID: "u1", Value: "1", TTL: time.Minute, First: true})
		if err != nil || !got.TookBack {
			e.t.Fatalf("complete: %+v %v", got, err)
		}
		e.wantTokens(a, "-1.000000")
		// It owes a token: the key lives until the bucket is full again,
		// two minutes at this rate.
		if k := e.key(a.Buckets[0].Key); k.ttl < 2*time.Minute-5*time.Second {
			e.t.Errorf("owing bucket's TTL %v, want 2m", k.ttl)
		}
		if d := e.spend(e.request(sub, "k3", a.Buckets[0])); d.Outcome != quota.Denied || d.Result.Remaining != 0 || d.Result.RetryAfter != 2*time.Minute {
			e.t.Errorf("spend while owing: %+v", d)
		}
	}},
	{"refund", "after a tier cut a refund gives back one token, not the old tier's refill", func(e *env) {
		sub := keys.UserSubject("cut")
		key := keys.Bucket(e.tenant, sub)
		g := e.request(sub, "k0", bucket.Bucket{Key: key, Limit: bucket.Limit{Capacity: 30, Rate: 10}})
		e.spend(g)
		// The tier is cut to 5 tokens, refilling almost never; the caller
		// drains them.
		cut := bucket.Bucket{Key: key, Limit: bucket.Limit{Capacity: 5, Rate: 0.0001}}
		e.now = e.now.Add(time.Second)
		for i := range 5 {
			if d := e.spend(e.request(sub, fmt.Sprintf("k%d", i+1), cut)); d.Outcome != quota.Allowed {
				e.t.Fatalf("spend %d after the cut: %+v", i+1, d)
			}
		}
		// The grant issued under 30:10 is refunded two seconds later: one
		// token back, not 30:10's twenty seconds of refill.
		e.now = e.now.Add(2 * time.Second)
		e.wantOutcomes(e.refund(due(g, "u0")), quota.Refunded)
		allowed := 0
		for i := range 4 {
			if d := e.spend(e.request(sub, fmt.Sprintf("k%d", i+6), cut)); d.Outcome == quota.Allowed {
				allowed++
			}
		}
		if allowed != 1 {
			e.t.Errorf("after the refund %d signs allowed, want 1", allowed)
		}
	}},
	{"complete", "a take-back charges what its refund credited: nothing where it credited nothing", func(e *env) {
		a := e.ask("alice", "k1")
		e.spend(a)
		e.wantOutcomes(e.refund(due(a, "u1")), quota.Refunded) // 29 → 30: credited 1
		e.wantOutcomes(e.refund(due(a, "u2")), quota.Refunded) // full: credited nothing
		if rec := e.key(keys.Refunded(e.tenant, "u2")).str; !strings.Contains(rec, `"credited":[0.000000,0.000000]`) {
			e.t.Errorf("refund into a full bucket records %s, want nothing credited", rec)
		}
		complete := func(urlID string) {
			got, err := e.b.Complete(ctx, e.now, quota.Completion{Tenant: e.tenant, URLID: urlID, Value: "1", TTL: time.Minute, First: true})
			if err != nil || !got.TookBack {
				e.t.Fatalf("complete %s: %+v %v", urlID, got, err)
			}
		}
		complete("u2")
		e.wantTokens(a, "30.000000", "600.000000")
		complete("u1")
		e.wantTokens(a, "29.000000", "599.000000")
		// A refund into buckets whose keys are gone (full buckets) credits
		// nothing, and its take-back leaves them full.
		gone := e.ask("gone", "k1")
		e.wantOutcomes(e.refund(due(gone, "u3")), quota.Refunded)
		complete("u3")
		if k := e.key(gone.Buckets[0].Key); k.ok {
			e.t.Errorf("take-back of nothing wrote %s: %+v", gone.Buckets[0].Key, k)
		}
	}},
	{"refund", "a refund of no buckets only ends the grant", func(e *env) {
		a := e.ask("alice", "k1")
		e.spend(a)
		e.wantOutcomes(e.refund(quota.Due{Tenant: e.tenant, URLID: "u1"}), quota.Refunded)
		e.wantOutcomes(e.refund(due(a, "u1")), quota.Already)
		e.wantTokens(a, "29.000000", "599.000000")
		got, err := e.b.Complete(ctx, e.now, quota.Completion{Tenant: e.tenant, URLID: "u1", Value: "1", TTL: time.Minute, First: true})
		if err != nil || !got.TookBack {
			e.t.Fatalf("complete: %+v %v", got, err)
		}
		e.wantTokens(a, "29.000000", "599.000000")
	}},
	{"complete", "no refund, nothing taken", func(e *env) {
		e.spendN("alice", 1)
		a := e.ask("alice", "k1")
		got, err := e.b.Complete(ctx, e.now, quota.Completion{Tenant: e.tenant, URLID: "u1", Value: "pending", TTL: time.Minute, First: true})
		if err != nil || got.TookBack || got.Existed {
			e.t.Fatalf("complete: %+v %v", got, err)
		}
		e.wantTokens(a, "29.000000", "599.000000")
		e.wantOutcomes(e.refund(due(a, "u1")), quota.Done)
	}},
	{"refund", "outcomes in input order over tenants", func(e *env) {
		other := *e
		other.tenant = e.tenant + "-b"
		a, b := e.ask("alice", "k1"), other.ask("alice", "k1")
		e.spendN("alice", 2)
		other.spendN("alice", 2)
		other.done("u2")
		e.undo(a, "u1")
		got := e.refund(due(b, "u2"), due(a, "u1"), due(b, "u1"), due(a, "u2"))
		e.wantOutcomes(got, quota.Done, quota.Already, quota.Refunded, quota.Refunded)
		e.wantTokens(a, "30.000000", "600.000000")
		other.wantTokens(b, "29.000000", "599.000000")
	}},
	{"refund", "a tenant's batch larger than one script call, after a flush", func(e *env) {
		e.spendN("alice", 3)
		a := e.ask("alice", "k1")
		// u0…u299 twice: the repeats cross the calls' boundaries.
		var ds []quota.Due
		var want []quota.RefundOutcome
		for round, o := range []quota.RefundOutcome{quota.Refunded, quota.Already} {
			for i := range 300 {
				ds = append(ds, due(a, fmt.Sprintf("u%d", (i+round*7)%300)))
				want = append(want, o)
			}
		}
		e.done("u5")
		want[5], want[300+298] = quota.Done, quota.Done // u5 is 300+298 in the second round
		e.b.flush(e.t)
		e.wantOutcomes(e.refund(ds...), want...)
		e.wantTokens(a, "30.000000", "600.000000")
	}},
	{"refund", "an empty batch", func(e *env) {
		e.wantOutcomes(e.refund(), []quota.RefundOutcome{}...)
	}},

	{"status", "unknown grant", func(e *env) {
		if s := e.status("u1"); s != (quota.Status{}) {
			e.t.Errorf("status %+v", s)
		}
	}},
	{"status", "finished, landed, refunded", func(e *env) {
		a := e.ask("alice", "k1")
		e.spend(a)
		e.finish(a, "u1", "{}")
		want := quota.Status{Found: true, ExpiresAt: time.UnixMilli(e.now.Add(2 * time.Minute).UnixMilli()).UTC(), Subject: "u:alice"}
		if s := e.status("u1"); s != want {
			e.t.Errorf("finished: %+v, want %+v", s, want)
		}
		e.done("u1")
		if s := e.status("u1"); !s.Done || s.Refunded {
			e.t.Errorf("landed: %+v", s)
		}
		e.refund(due(a, "u2"))
		if s := e.status("u2"); !s.Refunded || s.Done || s.Found {
			e.t.Errorf("refunded: %+v", s)
		}
	}},

	{"all", "SCRIPT FLUSH between calls is invisible", func(e *env) {
		other := *e
		other.tenant = e.tenant + "-b"
		a := e.ask("alice", "k1")
		e.spend(a)
		e.b.flush(e.t)
		e.undo(a, "u1")
		e.b.flush(e.t)
		e.spend(a)
		e.b.flush(e.t)
		e.finish(a, "u2", "{}")
		e.b.flush(e.t)
		b := e.ask("bob", "k1")
		e.cancel(b)
		e.b.flush(e.t)
		if d := e.spend(b); d.Outcome != quota.Cancelled {
			e.t.Errorf("spend after cancel and flush: %+v", d)
		}
		e.b.flush(e.t)
		e.wantOutcomes(e.refund(due(a, "u1"), due(other.ask("bob", "k1"), "u1"), due(a, "u3")), quota.Already, quota.Refunded, quota.Refunded)
		e.b.flush(e.t)
		if d := e.spend(a); d.Outcome != quota.Replay {
			e.t.Errorf("replay after flush: %+v", d)
		}
		e.wantTokens(a, "30.000000", "600.000000")
	}},
}

// TestBehaviour runs every case on a redis-server, on a three-master
// cluster (unless -short) and on the Twin.
func TestBehaviour(t *testing.T) {
	srvs := servers(t)
	for i, c := range cases {
		for _, name := range []string{"redis", "cluster", "twin"} {
			t.Run(c.op+"/"+c.name+"/"+name, func(t *testing.T) {
				var b backend
				switch rdb, ok := srvs[name]; {
				case name == "twin":
					b = twinBackend()
				case ok:
					b = redisBackend(name, rdb)
				default:
					t.Skip("no cluster in -short")
				}
				c.run(&env{t: t, b: b, now: time.UnixMilli(1_700_000_000_000), tenant: fmt.Sprintf("case%d", i)})
			})
		}
	}
}

// TestClusterBatchAcrossMasters: one Refund over tenants that live on three
// different masters goes out as one pipeline split per node, with no
// CROSSSLOT, and again after every node's script cache was flushed.
func TestClusterBatchAcrossMasters(t *testing.T) {
	if testing.Short() {
		t.Skip("no cluster in -short")
	}
	cl := startCluster(t).(*redis.ClusterClient)
	var tenants []string
	seen := map[string]bool{}
	for i := 0; len(tenants) < 3; i++ {
		tn := fmt.Sprintf("spread%d", i)
		m, err := cl.MasterForKey(ctx, keys.TenantBucket(tn))
		if err != nil {
			t.Fatal(err)
		}
		if addr := m.Options().Addr; !seen[addr] {
			seen[addr] = true
			tenants = append(tenants, tn)
		}
	}
	b := redisBackend("cluster", cl)
	var ds []quota.Due
	var want []quota.RefundOutcome
	for _, tn := range tenants {
		e := &env{t: t, b: b, now: time.UnixMilli(1_700_000_000_000), tenant: tn}
		e.spendN("alice", 2)
		ds = append(ds, due(e.ask("alice", "k1"), "u1"), due(e.ask("alice", "k2"), "u2"), due(e.ask("alice", "k1"), "u1"))
		want = append(want, quota.Refunded, quota.Refunded, quota.Already)
	}
	b.flush(t)
	got, err := b.Refund(ctx, time.UnixMilli(1_700_000_000_000), ds)
	if err != nil {
		t.Fatalf("refund over %v: %v", tenants, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
	for _, tn := range tenants {
		e := &env{t: t, b: b, tenant: tn}
		e.wantTokens(e.ask("alice", "k1"), "30.000000", "600.000000")
	}
}

// TestRedisDown: every operation fails with an error that is
// ErrUnavailable and bucket.ErrUnavailable, and works again after a restart.
func TestRedisDown(t *testing.T) {
	srv := testenv.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	defer rdb.Close()
	e := &env{t: t, b: redisBackend("redis", rdb), now: time.UnixMilli(1_700_000_000_000), tenant: "down"}
	a := e.ask("alice", "k1")
	ops := map[string]func() error{
		"spend": func() error { _, err := e.b.Spend(ctx, e.now, a, inFlight); return err },
		"undo":  func() error { _, err := e.b.Undo(ctx, e.now, a, "u1"); return err },
		"finish": func() error {
			return e.b.Finish(ctx, a, quota.Finished{URLID: "u1", RecordTTL: time.Minute, GrantTTL: time.Minute})
		},
		"refund": func() error { _, err := e.b.Refund(ctx, e.now, []quota.Due{due(a, "u1")}); return err },
		"cancel": func() error { _, err := e.b.Cancel(ctx, e.now, a); return err },
		"status": func() error { _, err := e.b.Status(ctx, e.tenant, "u1"); return err },
	}
	srv.Stop()
	for name, op := range ops {
		if err := op(); !errors.Is(err, quota.ErrUnavailable) || !errors.Is(err, bucket.ErrUnavailable) {
			t.Errorf("%s with Redis down: %v, want ErrUnavailable", name, err)
		}
	}
	srv.Start()
	for name, op := range ops {
		if err := op(); err != nil {
			t.Errorf("%s after restart: %v", name, err)
		}
	}
}

// TestBatchSpendFails: a Spend of a batch whose commands fail (here a
// WRONGTYPE: its idempotency key holds a string) answers its own error, a
// reply of Redis as a single Spend's would be, and the Spends around it
// keep theirs, each seeing the writes of the one before.
func TestBatchSpendFails(t *testing.T) {
	onWrongType(t, "wrongtype", func(t *testing.T, e *env, bad quota.Ask) {
		_, single := e.b.Spend(ctx, e.now, bad, inFlight)
		got := e.batch(e.ask("alice", "k1"), bad, e.ask("alice", "k2"))
		var re redis.Error
		if !errors.Is(got[1].Err, quota.ErrUnavailable) || !errors.As(got[1].Err, &re) || !strings.Contains(got[1].Err.Error(), "WRONGTYPE") {
			t.Errorf("the failing spend: %+v", got[1])
		}
		if !errors.As(single, &re) {
			t.Errorf("the same spend alone: %v, want a reply of Redis", single)
		}
		if got[0].Decision.Outcome != quota.Allowed || got[2].Decision.Outcome != quota.Allowed || got[2].Decision.Result.Remaining != 28 {
			t.Errorf("the spends around it: %+v, %+v", got[0], got[2])
		}
	})
}

// onWrongType runs check on every server with an env of tenant and a
// request bad whose idempotency key holds a string, so that its script's
// commands fail with WRONGTYPE.
func onWrongType(t *testing.T, tenant string, check func(t *testing.T, e *env, bad quota.Ask)) {
	for name, rdb := range servers(t) {
		t.Run(name, func(t *testing.T) {
			e := &env{t: t, b: redisBackend(name, rdb), now: time.UnixMilli(1_700_000_000_000), tenant: tenant}
			bad := e.ask("bob", "k1")
			e.b.set(t, bad.Idem, "not a hash", time.Minute)
			check(t, e, bad)
		})
	}
}

// TestRefusals: calls no script could run safely are refused alike by the
// Store and the Twin, before anything is touched, and are not
// ErrUnavailable: no retry fixes them.
func TestRefusals(t *testing.T) {
	rdb := startRedis(t)
	good := (&env{tenant: "ok"}).ask("alice", "k1")
	bad := []struct {
		name  string
		spoil func(a *quota.Ask)
		due   bool // a Due built from the spoiled Ask is refused too
	}{
		{"invalid tenant", func(a *quota.Ask) { a.Tenant = "a}b" }, true},
		// A Due of no buckets is a marker-only refund (a multipart DELETE
		// that charged no bytes): TestBehaviour's "a refund of no buckets".
		{"no buckets", func(a *quota.Ask) { a.Buckets = nil }, false},
		{"bucket of another tenant", func(a *quota.Ask) { a.Buckets = (&env{tenant: "other"}).ask("alice", "k1").Buckets }, true},
		{"bucket shape impossible", func(a *quota.Ask) { a.Buckets = []bucket.Bucket{{Key: a.Buckets[0].Key}} }, true},
		{"no fingerprint", func(a *quota.Ask) { a.Fingerprint = "" }, false},
		{"no nonce", func(a *quota.Ask) { a.Nonce = "" }, false},
		{"nonce with a space", func(a *quota.Ask) { a.Nonce = "n 1" }, false},
		{"nonce too long", func(a *quota.Ask) { a.Nonce = strings.Repeat("n", 65) }, false},
		{"idempotency key of another tenant", func(a *quota.Ask) { a.Idem = keys.Idempotency("other", "u:alice", "k1") }, false},
	}
	now := time.UnixMilli(1_700_000_000_000)
	for _, b := range []backend{redisBackend("redis", rdb), twinBackend()} {
		for _, c := range bad {
			a := good
			c.spoil(&a)
			_, err := b.Spend(ctx, now, a, inFlight)
			if err == nil || errors.Is(err, bucket.ErrUnavailable) {
				t.Errorf("%s: spend with %s: %v, want a refusal", b.name, c.name, err)
			}
			_, err = b.Cancel(ctx, now, a)
			if err == nil || errors.Is(err, bucket.ErrUnavailable) {
				t.Errorf("%s: cancel with %s: %v, want a refusal", b.name, c.name, err)
			}
			if !c.due {
				continue
			}
			// The good grant first: a refused batch applies none of it.
			_, err = b.Refund(ctx, now, []quota.Due{due(good, "u1"), due(a, "u2")})
			if err == nil || errors.Is(err, bucket.ErrUnavailable) {
				t.Errorf("%s: refund with %s: %v, want a refusal", b.name, c.name, err)
			}
		}
		if st := b.get(t, good.Buckets[0].Key, good.Idem)[0]; st.ok {
			t.Errorf("%s: a refused call touched %s: %+v", b.name, good.Buckets[0].Key, st)
		}
		if _, err := b.Spend(ctx, time.Now(), good, 0); err == nil {
			t.Errorf("%s: spend with no in-flight TTL: no error", b.name)
		}
		if err := b.Finish(ctx, good, quota.Finished{URLID: "u1", RecordTTL: time.Minute}); err == nil {
			t.Errorf("%s: finish with no grant TTL: no error", b.name)
		}
		if _, err := b.Status(ctx, "", "u1"); err == nil {
			t.Errorf("%s: status of no tenant: no error", b.name)
		}
	}
}

// TestTwinExpiry: the Twin's keys expire by its clock, as Redis's do by the
// server's: an in-flight key frees itself, an idle bucket is full again.
func TestTwinExpiry(t *testing.T) {
	clock := time.UnixMilli(1_700_000_000_000)
	tw := quotatest.NewTwin(func() time.Time { return clock })
	a := (&env{tenant: "exp"}).ask("alice", "k1")
	if d, _ := tw.Spend(ctx, clock, a, inFlight); d.Outcome != quota.Allowed {
		t.Fatalf("spend: %+v", d)
	}
	clock = clock.Add(inFlight) // Redis keeps a key through its last millisecond
	if d, _ := tw.Spend(ctx, clock, a, inFlight); d.Outcome != quota.InProgress {
		t.Fatalf("at the TTL: %+v", d)
	}
	clock = clock.Add(time.Millisecond)
	if d, _ := tw.Spend(ctx, clock, a, inFlight); d.Outcome != quota.Allowed || d.Result.Remaining != 29 {
		t.Fatalf("after the TTL: %+v", d)
	}
	if _, _, _, ok := tw.Entry(keys.Refunded("exp", "u1")); ok {
		t.Fatal("marker from nowhere")
	}
	if _, err := tw.Undo(ctx, clock, a, "u1"); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(quota.RefundedTTL + time.Millisecond)
	if out, _ := tw.Refund(ctx, clock, []quota.Due{due(a, "u1")}); out[0] != quota.Refunded {
		t.Fatalf("after the marker expired: %v", out)
	}
	// A tombstone lasts CancelTTL, then its request's Spend is a new one.
	if _, err := tw.Cancel(ctx, clock, a); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(quota.CancelTTL)
	if d, _ := tw.Spend(ctx, clock, a, inFlight); d.Outcome != quota.Cancelled {
		t.Fatalf("at the tombstone's TTL: %+v", d)
	}
	clock = clock.Add(time.Millisecond)
	if d, _ := tw.Spend(ctx, clock, a, inFlight); d.Outcome != quota.Allowed {
		t.Fatalf("after the tombstone's TTL: %+v", d)
	}
}

// TestClock: the estimate of Redis's clock puts Until just before the
// deadline it converts (the server shares this host's clock), and a Spend
// run against it is late once the deadline has passed, allowed before.
func TestClock(t *testing.T) {
	var c quota.Clock
	if u := c.Until(time.Now().Add(time.Second)); !u.IsZero() {
		t.Errorf("Until before any Sync: %v, want zero", u)
	}
	srv := testenv.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	if err := c.Sync(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Second)
	if u := c.Until(deadline); u.After(deadline) || deadline.Sub(u) > 100*time.Millisecond {
		t.Errorf("Until(%v) = %v: want just before it (%s)", deadline, u, c.String())
	}
	if u := c.Until(time.Time{}); !u.IsZero() {
		t.Errorf("Until of no deadline: %v, want zero", u)
	}

	q := quota.New(rdb)
	e := &env{t: t, now: time.Now(), tenant: "clock"}
	a := e.ask("alice", "k1")
	a.Until = c.Until(time.Now().Add(-time.Millisecond))
	if d, err := q.Spend(ctx, e.now, a, inFlight); err != nil || d.Outcome != quota.Late {
		t.Errorf("spend whose deadline passed: %+v %v, want late", d, err)
	}
	a.Until = c.Until(time.Now().Add(time.Second))
	if d, err := q.Spend(ctx, e.now, a, inFlight); err != nil || d.Outcome != quota.Allowed {
		t.Errorf("spend before its deadline: %+v %v, want allowed", d, err)
	}

	// A server that is gone keeps the last estimate.
	srv.Stop()
	if err := c.Sync(ctx, rdb); !errors.Is(err, quota.ErrUnavailable) {
		t.Errorf("Sync with Redis down: %v, want ErrUnavailable", err)
	}
	if u := c.Until(deadline); u.IsZero() {
		t.Error("a failed Sync dropped the estimate")
	}
}

// scarce is a tenant bucket that does not refill while a test runs.
var scarce = bucket.Limit{Capacity: 40, Rate: 0.001}

// coalesceAsk is caller i of tenant tn: a user of its own and the scarce
// tenant bucket.
func coalesceAsk(tn string, i int) quota.Ask {
	sub := keys.UserSubject(fmt.Sprintf("u%d", i))
	return quota.Ask{
		Tenant: tn, Idem: keys.Idempotency(tn, sub, "k"), Fingerprint: "fp", Nonce: fmt.Sprintf("n%d", i),
		Buckets: []bucket.Bucket{{Key: keys.Bucket(tn, sub), Limit: userLimit}, {Key: keys.TenantBucket(tn), Limit: scarce}},
	}
}

// TestCoalescerConcurrent: 200 callers over 3 tenants at once, each of a
// user of its own, all on a tenant bucket of 40: exactly 40 allowed per
// tenant, the rest denied, as sequential Spends would give, the tenant
// buckets empty and an in-flight mark for each allowed spend alone — and
// the calls carried several Spends each. Some callers send their request
// twice (another nonce): exactly one of the two is allowed or denied, the
// other pending or denied as sequence dictates.
func TestCoalescerConcurrent(t *testing.T) {
	rdb := startRedis(t)
	c := quota.NewCoalescer(quota.New(rdb), 0, 0)
	tenants := []string{"co-a", "co-b", "co-c"}
	now := time.UnixMilli(1_700_000_000_000)
	const callers = 200
	type answer struct {
		tn  string
		a   quota.Ask
		d   quota.Decision
		err error
	}
	out := make(chan answer, callers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			tn := tenants[i%len(tenants)]
			a := coalesceAsk(tn, i)
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			a.Until = time.Now().Add(time.Hour)
			<-start
			d, err := c.Spend(cctx, now, a, inFlight)
			out <- answer{tn, a, d, err}
		})
	}
	close(start)
	wg.Wait()
	close(out)
	allowed := map[string]int{}
	st := redisBackend("redis", rdb)
	for r := range out {
		if r.err != nil {
			t.Fatalf("%s: %v", r.a.Idem, r.err)
		}
		rec := st.get(t, r.a.Idem)[0]
		switch r.d.Outcome {
		case quota.Allowed:
			allowed[r.tn]++
			if rec.hash["nonce"] != r.a.Nonce {
				t.Errorf("allowed %s holds %+v", r.a.Idem, rec)
			}
		case quota.Denied:
			if rec.ok || r.d.Result.Blocked != 1 {
				t.Errorf("denied %s: %+v, record %+v", r.a.Idem, r.d, rec)
			}
		default:
			t.Errorf("%s: %+v", r.a.Idem, r.d)
		}
	}
	for _, tn := range tenants {
		if allowed[tn] != int(scarce.Capacity) {
			t.Errorf("tenant %s: %d allowed, want %v", tn, allowed[tn], scarce.Capacity)
		}
		if got := st.get(t, keys.TenantBucket(tn))[0].hash["t"]; got != "0.000000" {
			t.Errorf("tenant %s's bucket holds %q", tn, got)
		}
	}
	calls, spends := c.Stats()
	t.Logf("%d spends in %d calls", spends, calls)
	if spends != callers || calls >= spends {
		t.Errorf("%d spends in %d calls: nothing was gathered", spends, calls)
	}
}

// TestCoalescerSameKey: concurrent callers sending the same request (one
// key, one fingerprint, nonces of their own): exactly one is allowed, the
// others pending, one token spent.
func TestCoalescerSameKey(t *testing.T) {
	rdb := startRedis(t)
	c := quota.NewCoalescer(quota.New(rdb), time.Millisecond, 8)
	now := time.UnixMilli(1_700_000_000_000)
	var mu sync.Mutex
	got := map[quota.Outcome]int{}
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			a := coalesceAsk("same", 0)
			a.Nonce = fmt.Sprintf("n%d", i)
			d, err := c.Spend(ctx, now, a, inFlight)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			got[d.Outcome]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if got[quota.Allowed] != 1 || got[quota.InProgress] != 49 {
		t.Errorf("outcomes %v, want 1 allowed and 49 pending", got)
	}
	if tok := redisBackend("redis", rdb).get(t, keys.TenantBucket("same"))[0].hash["t"]; tok != "39.000000" {
		t.Errorf("tenant bucket holds %q, want 39", tok)
	}
}

// TestCoalescerGaveUp: a caller whose ctx ended before its Spend left is
// not sent, and answers an ErrUnavailable wrapping its ctx's error.
func TestCoalescerGaveUp(t *testing.T) {
	rdb := startRedis(t)
	c := quota.NewCoalescer(quota.New(rdb), 0, 0)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	a := coalesceAsk("gone", 1)
	if _, err := c.Spend(cctx, time.Now(), a, inFlight); !errors.Is(err, quota.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Fatalf("spend with its ctx done: %v", err)
	}
	time.Sleep(50 * time.Millisecond)
	if n := rdb.Exists(ctx, a.Idem, keys.TenantBucket("gone")).Val(); n != 0 {
		t.Errorf("a spend given up before it left touched %d keys", n)
	}
	if _, err := c.Spend(ctx, time.Now(), quota.Ask{Tenant: "gone"}, inFlight); err == nil || errors.Is(err, quota.ErrUnavailable) {
		t.Errorf("an invalid ask: %v, want a refusal", err)
	}
}

// TestCoalescerRedisStalled: with Redis paused, every caller fails by its
// own deadline with an error that says its Spend may still run (no reply,
// no dial error), none hangs; when Redis resumes, the Spends it then runs
// are late and take nothing. With Redis stopped, every caller fails too.
func TestCoalescerRedisStalled(t *testing.T) {
	srv := testenv.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, PoolSize: 8})
	defer rdb.Close()
	c := quota.NewCoalescer(quota.New(rdb), 0, 0)
	run := func(name string, tenants int) []error {
		const callers = 60
		errs := make([]error, callers)
		var wg sync.WaitGroup
		start := time.Now()
		for i := range callers {
			wg.Go(func() {
				cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				defer cancel()
				a := coalesceAsk(fmt.Sprintf("%s-%d", name, i%tenants), i)
				dl, _ := cctx.Deadline()
				a.Until = dl
				_, errs[i] = c.Spend(cctx, time.Now(), a, inFlight)
			})
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: callers still waiting after 5s", name)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%s: callers took %v", name, d)
		}
		for i, err := range errs {
			if !errors.Is(err, quota.ErrUnavailable) || !errors.Is(err, bucket.ErrUnavailable) {
				t.Errorf("%s: caller %d: %v, want ErrUnavailable", name, i, err)
			}
		}
		return errs
	}
	// Warm the pool so that the stalled spends are written, not dialled.
	if _, err := c.Spend(ctx, time.Now(), coalesceAsk("warm", 0), inFlight); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	stopped(t, srv)
	for i, err := range run("paused", 3) {
		var re redis.Error
		if errors.As(err, &re) {
			t.Errorf("paused: caller %d: %v is a reply of Redis", i, err)
		}
	}
	srv.Resume()
	time.Sleep(100 * time.Millisecond)
	for i := range 3 {
		if k := keys.TenantBucket(fmt.Sprintf("paused-%d", i)); rdb.Exists(ctx, k).Val() != 0 {
			t.Errorf("a stalled spend ran after its Until: %s holds %v", k, rdb.HGetAll(ctx, k).Val())
		}
	}
	srv.Stop()
	run("stopped", 3)
	srv.Start()
	// go-redis answers its last dial error without dialling while its
	// pool recovers from the outage (it redials in the background, about
	// once a second): serving again means within a few seconds, as a
	// service's readiness probe would see it.
	var (
		d   quota.Decision
		err error
	)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if d, err = c.Spend(ctx, time.Now(), coalesceAsk(fmt.Sprintf("again-%d", time.Now().UnixNano()), 0), inFlight); err == nil {
			break
		}
	}
	if err != nil || d.Outcome != quota.Allowed {
		t.Errorf("after restart: %+v %v", d, err)
	}
}

// stopped waits until the kernel has stopped srv (SIGSTOP is delivered
// asynchronously), so that no Spend sent next slips through.
func stopped(t *testing.T, srv *testenv.Redis) {
	t.Helper()
	t.Cleanup(srv.Resume)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", srv.PID()))
		if err != nil {
			t.Fatal(err)
		}
		// pid (comm) state …: the state follows the last ')'.
		if f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:])); len(f) > 0 && f[0] == "T" {
			return
		}
	}
	t.Fatal("redis-server did not stop")
}
