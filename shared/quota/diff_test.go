package quota_test

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/quota"
)

// Bucket shapes the sequences draw from: the default tiers, and small ones so
// that denials and capped refunds are common. The small ones idle for ten
// minutes, so no key expires on the server while a sequence runs.
var (
	userShapes    = []bucket.Limit{userLimit, {Capacity: 3, Rate: 0.2, TTL: 10 * time.Minute}, {Capacity: 2.5, Rate: 0.7, TTL: 10 * time.Minute}}
	anonShapes    = []bucket.Limit{anonLimit, {Capacity: 1, Rate: 0.05, TTL: 10 * time.Minute}}
	tenantShapes  = []bucket.Limit{tenantLimit, {Capacity: 4, Rate: 0.5, TTL: 10 * time.Minute}}
	anonAllShapes = []bucket.Limit{anonAllLimit, {Capacity: 2, Rate: 0.1, TTL: 10 * time.Minute}}
)

// ttlSlack is how far a key's TTL on the server and in the Twin may differ:
// both count down by the wall clock from writes a moment apart.
const ttlSlack = 2 * time.Second

// world is one sequence's small universe, so that keys, fingerprints,
// nonces, grants and buckets repeat: two tenants, two users and two
// addresses each, three idempotency keys per caller, four grants per
// tenant, and the requests asked lately, which come back: a Cancel after
// its Spend or before it, an Undo or Finish of a request whose key a retry
// (another nonce) took over meanwhile.
type world struct {
	r        *rand.Rand
	tenants  []string
	subjects []string
	shape    map[string]bucket.Limit // per tier: user, anonymous, tenant, anonymous_all
	recent   []quota.Ask
	nonces   int
}

func newWorld(r *rand.Rand, seq int) *world {
	pick := func(ls []bucket.Limit) bucket.Limit { return ls[r.IntN(len(ls))] }
	return &world{
		r:        r,
		tenants:  []string{fmt.Sprintf("s%d-a", seq), fmt.Sprintf("s%d-b", seq)},
		subjects: []string{keys.UserSubject("ann"), keys.UserSubject("bo"), keys.AnonSubject("x1"), keys.AnonSubject("x2")},
		shape: map[string]bucket.Limit{
			"user": pick(userShapes), "anonymous": pick(anonShapes), "tenant": pick(tenantShapes), "anonymous_all": pick(anonAllShapes),
		},
	}
}

func (w *world) tenant() string { return w.tenants[w.r.IntN(len(w.tenants))] }
func (w *world) urlID() string  { return fmt.Sprintf("g%d", w.r.IntN(4)) }

// buckets is what a subject's sign spends from, as the signer lays it out.
func (w *world) buckets(tenant, subject string) []bucket.Bucket {
	if subject[0] == 'u' {
		bs := []bucket.Bucket{
			{Key: keys.Bucket(tenant, subject), Limit: w.shape["user"]},
			{Key: keys.TenantBucket(tenant), Limit: w.shape["tenant"]},
		}
		if w.r.IntN(2) == 0 {
			// A bucket of bytes, charged a size of 1 B to 3 MiB.
			bs = append(bs, bucket.Bucket{Key: keys.ByteBucket(tenant, subject), Limit: bytesShape, Units: float64(1 + w.r.Int64N(3<<20))})
		}
		return bs
	}
	return []bucket.Bucket{
		{Key: keys.Bucket(tenant, subject), Limit: w.shape["anonymous"]},
		{Key: keys.TenantBucket(tenant), Limit: w.shape["tenant"]},
		{Key: anonAllKey(tenant), Limit: w.shape["anonymous_all"]},
	}
}

// bytesShape is the world's buckets of bytes: 8 MiB, refilling 1 KiB a second.
var bytesShape = bucket.Limit{Capacity: 8 << 20, Rate: 1024}

// timed is a with its live-grants bound ending 1 to 20 s after now.
func (w *world) timed(a quota.Ask, now time.Time) quota.Ask {
	if a.Live != nil {
		l := *a.Live
		l.Until = now.Add(time.Duration(1+w.r.IntN(20)) * time.Second)
		a.Live = &l
	}
	return a
}

// ask is a request: half the time one asked lately, else a new one — a
// retry of a recent one (its key and fingerprint, a new nonce) or a fresh
// pick. Now and then a nonce repeats on another key: the scripts must
// agree whatever a caller sends.
func (w *world) ask() quota.Ask {
	if len(w.recent) > 0 && w.r.IntN(2) == 0 {
		return w.recent[w.r.IntN(len(w.recent))]
	}
	var a quota.Ask
	if len(w.recent) > 0 && w.r.IntN(3) == 0 {
		a = w.recent[w.r.IntN(len(w.recent))]
	} else {
		tn, sub := w.tenant(), w.subjects[w.r.IntN(len(w.subjects))]
		a = quota.Ask{
			Tenant:      tn,
			Idem:        keys.Idempotency(tn, sub, fmt.Sprintf("k%d", w.r.IntN(3))),
			Fingerprint: fmt.Sprintf("fp%d", w.r.IntN(2)),
			Buckets:     w.buckets(tn, sub),
		}
		if w.r.IntN(3) == 0 { // a bound on the caller's live grants
			a.Live = &quota.Live{Key: keys.LiveGrants(tn, sub), Max: 1 + w.r.IntN(2)}
		}
	}
	// Now and then a deadline, an hour past or ahead (the servers'
	// clocks and the Twin's differ by the run's milliseconds).
	a.Until = time.Time{}
	switch w.r.IntN(12) {
	case 0:
		a.Until = time.Now().Add(-time.Hour)
	case 1:
		a.Until = time.Now().Add(time.Hour)
	}
	w.nonces++
	a.Nonce = fmt.Sprintf("n%d", w.nonces)
	if w.r.IntN(10) == 0 {
		a.Nonce = fmt.Sprintf("n%d", 1+w.r.IntN(w.nonces))
	}
	w.recent = append(w.recent, a)
	if len(w.recent) > 6 {
		w.recent = w.recent[1:]
	}
	return a
}

// batch is 1 to 8 requests of one tenant, as ask makes them, each with a
// clock of its own around now (a batch gathers callers whose clocks were
// read a moment apart, not always in order).
func (w *world) batch(now time.Time) []quota.Spending {
	tn := w.tenant()
	ss := make([]quota.Spending, 1+w.r.IntN(8))
	for i := range ss {
		a := w.ask()
		for a.Tenant != tn {
			a = w.ask()
		}
		at := now.Add(time.Duration(w.r.Int64N(400)-100) * time.Millisecond)
		ss[i] = quota.Spending{Now: at, Ask: w.timed(a, at), InFlight: inFlight}
	}
	return ss
}

// finished is what a's Finish stores: a grant of the world's, a body of
// its own.
func (w *world) finished(a quota.Ask, now time.Time) quota.Finished {
	return quota.Finished{URLID: w.urlID(), Subject: "s" + a.Fingerprint, Body: fmt.Appendf(nil, `{"n":%d}`, w.r.IntN(100)),
		ExpiresAt: now.Add(2 * time.Minute), RecordTTL: 2 * time.Minute, GrantTTL: time.Hour}
}

// due is a due grant; now and then issued under other shapes than the
// world's (a tier changed since, or a sweeper started with other tiers):
// its refund credits at its own shapes.
func (w *world) due() quota.Due {
	tn := w.tenant()
	bs := w.buckets(tn, w.subjects[w.r.IntN(len(w.subjects))])
	if w.r.IntN(3) == 0 {
		all := [][]bucket.Limit{userShapes, anonShapes, tenantShapes, anonAllShapes}
		for i := range bs {
			ls := all[w.r.IntN(len(all))]
			bs[i].Limit = ls[w.r.IntN(len(ls))]
		}
	}
	return quota.Due{Tenant: tn, URLID: w.urlID(), Buckets: bs}
}

// completion is an ObjectCreated for one of the world's grants: the first
// (SET NX) or a later write of its done marker, with a configured TTL
// below or above MarkerTTL.
func (w *world) completion() quota.Completion {
	return quota.Completion{Tenant: w.tenant(), URLID: w.urlID(), Value: []string{"1", "pending"}[w.r.IntN(2)],
		TTL: []time.Duration{15 * time.Minute, 30 * time.Hour}[w.r.IntN(2)], First: w.r.IntN(2) == 0}
}

// tenantKeys is every bucket key of tenant tn, the ones a refund record
// may name.
func (w *world) tenantKeys(tn string) []string {
	ks := []string{keys.TenantBucket(tn), anonAllKey(tn)}
	for _, sub := range w.subjects {
		ks = append(ks, keys.Bucket(tn, sub), keys.ByteBucket(tn, sub))
	}
	return ks
}

// all is every key the world can touch.
func (w *world) all() []string {
	var ks []string
	for _, tn := range w.tenants {
		ks = append(ks, keys.TenantBucket(tn), anonAllKey(tn))
		for _, sub := range w.subjects {
			ks = append(ks, keys.Bucket(tn, sub), keys.ByteBucket(tn, sub))
			for i := range 3 {
				ks = append(ks, keys.Idempotency(tn, sub, fmt.Sprintf("k%d", i)))
			}
		}
		for i := range 4 {
			id := fmt.Sprintf("g%d", i)
			ks = append(ks, keys.Done(tn, id), keys.Refunded(tn, id), keys.Grant(tn, id))
		}
	}
	return ks
}

func grantKeys(tenant, urlID string, bs []bucket.Bucket) []string {
	return append([]string{keys.Done(tenant, urlID), keys.Refunded(tenant, urlID)}, bucketKeys(bs)...)
}

func bucketKeys(bs []bucket.Bucket) []string {
	ks := make([]string, len(bs))
	for i, b := range bs {
		ks[i] = b.Key
	}
	return ks
}

// TestDifferential feeds the scripts and the Twin the same random
// sequences — spends and spend batches, cancels (before their spend, after
// it, of another request's record, twice), undos, finishes and finish
// batches (repeats and tombstones among them), retries with other nonces,
// refund batches with repeats and shared buckets (at the world's shapes or
// at others), completions that take a refund back, done markers set in
// between, script caches flushed, the caller's clock moving back and forth
// — and requires every reply and the stored state of every key touched
// (value and TTL) to be the same.
func TestDifferential(t *testing.T) {
	srvs := servers(t)
	for _, name := range []string{"redis", "cluster"} {
		rdb, ok := srvs[name]
		if !ok {
			continue
		}
		seqs := map[string]int{"redis": 300, "cluster": 60}[name]
		if testing.Short() {
			seqs = 40
		}
		t.Run(name, func(t *testing.T) {
			lua := redisBackend(name, rdb)
			for seq := range seqs {
				differ(t, lua, seq)
			}
		})
	}
}

// differ runs sequence seq on lua and a fresh Twin.
func differ(t *testing.T, lua backend, seq int) {
	t.Helper()
	const steps = 40
	r := rand.New(rand.NewPCG(uint64(seq), 0x9e37))
	w := newWorld(r, seq)
	twin := twinBackend()
	now := time.UnixMilli(1_700_000_000_000 + r.Int64N(1_000_000_000))
	for step := range steps {
		now = now.Add(time.Duration(r.Int64N(8000)-3000) * time.Millisecond)
		var (
			what      string
			touched   []string
			got, want any
			errs      [2]error
		)
		both := func(fn func(b backend) (any, error)) {
			got, errs[0] = fn(lua)
			want, errs[1] = fn(twin)
		}
		switch p := r.IntN(100); {
		case p < 22:
			a := w.timed(w.ask(), now)
			what, touched = "spend "+request(a), append([]string{a.Idem}, bucketKeys(a.Buckets)...)
			both(func(b backend) (any, error) { return b.Spend(ctx, now, a, inFlight) })
		case p < 30:
			ss := w.batch(now)
			what = fmt.Sprintf("spend batch of %d in %s", len(ss), ss[0].Ask.Tenant)
			for _, sp := range ss {
				what += "; " + request(sp.Ask)
				touched = append(append(touched, sp.Ask.Idem), bucketKeys(sp.Ask.Buckets)...)
			}
			both(func(b backend) (any, error) { return b.SpendBatch(ctx, ss) })
		case p < 45:
			a := w.ask()
			what, touched = "cancel "+request(a), append([]string{a.Idem}, bucketKeys(a.Buckets)...)
			both(func(b backend) (any, error) { return b.Cancel(ctx, now, a) })
		case p < 55:
			a, id := w.ask(), w.urlID()
			what, touched = "undo "+request(a)+" "+id, append([]string{a.Idem}, grantKeys(a.Tenant, id, a.Buckets)...)
			both(func(b backend) (any, error) { return b.Undo(ctx, now, a, id) })
		case p < 60:
			a := w.ask()
			f := w.finished(a, now)
			what, touched = "finish "+request(a)+" "+f.URLID, []string{a.Idem, keys.Grant(a.Tenant, f.URLID)}
			both(func(b backend) (any, error) { return nil, b.Finish(ctx, a, f) })
		case p < 63:
			a := w.ask()
			f := w.finished(a, now)
			what, touched = "finish own "+request(a)+" "+f.URLID, []string{a.Idem, keys.Grant(a.Tenant, f.URLID)}
			both(func(b backend) (any, error) { return b.FinishOwn(ctx, a, f) })
		case p < 68:
			tn := w.tenant()
			fs := make([]quota.Finishing, 1+r.IntN(8))
			what = fmt.Sprintf("finish batch of %d in %s", len(fs), tn)
			for i := range fs {
				a := w.ask()
				for a.Tenant != tn {
					a = w.ask()
				}
				fs[i] = quota.Finishing{Ask: a, Finished: w.finished(a, now)}
				what += "; " + request(a) + " " + fs[i].Finished.URLID
				touched = append(touched, a.Idem, keys.Grant(tn, fs[i].Finished.URLID))
			}
			both(func(b backend) (any, error) { return b.FinishBatch(ctx, fs) })
		case p < 80:
			ds := make([]quota.Due, 1+r.IntN(6))
			for i := range ds {
				ds[i] = w.due()
				touched = append(touched, grantKeys(ds[i].Tenant, ds[i].URLID, ds[i].Buckets)...)
			}
			what = fmt.Sprintf("refund %d grants", len(ds))
			both(func(b backend) (any, error) { return b.Refund(ctx, now, ds) })
		case p < 84:
			c := w.completion()
			what = fmt.Sprintf("complete %s %s first=%v", c.Tenant, c.URLID, c.First)
			touched = append(grantKeys(c.Tenant, c.URLID, nil), w.tenantKeys(c.Tenant)...)
			both(func(b backend) (any, error) { return b.Complete(ctx, now, c) })
		case p < 88:
			k := keys.Done(w.tenant(), w.urlID())
			what, touched = "done "+k, []string{k}
			both(func(b backend) (any, error) { b.set(t, k, "1", 15*time.Minute); return nil, nil })
		case p < 95:
			tn, id := w.tenant(), w.urlID()
			what = "status " + tn + " " + id
			both(func(b backend) (any, error) { return b.Status(ctx, tn, id) })
		default:
			what = "script flush"
			lua.flush(t)
		}
		if errs[0] != nil || errs[1] != nil {
			t.Fatalf("seq %d step %d %s: %s %v, twin %v", seq, step, what, lua.name, errs[0], errs[1])
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("seq %d step %d %s: %s %+v, twin %+v", seq, step, what, lua.name, got, want)
		}
		sameState(t, fmt.Sprintf("seq %d step %d %s", seq, step, what), lua, twin, touched)
	}
	sameState(t, fmt.Sprintf("seq %d end", seq), lua, twin, w.all())
}

// request names a request in a failure message.
func request(a quota.Ask) string { return a.Idem + " " + a.Fingerprint + " " + a.Nonce }

func sameState(t *testing.T, at string, lua, twin backend, ks []string) {
	t.Helper()
	ks = slices.Compact(slices.Sorted(slices.Values(ks)))
	l, tw := lua.get(t, ks...), twin.get(t, ks...)
	for i, k := range ks {
		if !l[i].same(tw[i], ttlSlack) {
			t.Fatalf("%s: key %s: %s %+v, twin %+v", at, k, lua.name, l[i], tw[i])
		}
	}
}
