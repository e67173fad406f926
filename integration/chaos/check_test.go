package chaos

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/ledger"
	"github.com/mintgate/mintgate/shared/quota"
)

// outcome is what Redis says became of one URL.
type outcome struct {
	done, refunded bool
	// value is the done marker's: "verifying", "verified", "1",
	// "rejecting:<reason>", "rejected:<reason>" or the older "pending"
	// (quota.ReadDone); "" without one.
	value     string
	takenBack bool // the refund was taken back: the upload landed after it
	// tokenBack: the refund credited a bucket of requests. A multipart
	// DELETE's credits only its buckets of bytes (none without tiers
	// of bytes): a create's token is never given back by a DELETE.
	tokenBack  bool
	doneAt     time.Time // when the done marker was set, from its remaining TTL
	refundedAt time.Time // the refund's time, from the refunded marker
}

// refundStands reports whether o's grant holds a refund that was not taken
// back: its tokens are given back for good.
func (o outcome) refundStands() bool { return o.refunded && !o.takenBack }

// outcomes reads the done and refunded markers of every URL, pipelined.
func (st *stack) outcomes(ctx context.Context, urls []received) ([]outcome, error) {
	out := make([]outcome, len(urls))
	for from := 0; from < len(urls); from += 500 {
		batch := urls[from:min(from+500, len(urls))]
		pipe := st.rdb.Pipeline()
		done := make([]*redis.DurationCmd, len(batch))
		values := make([]*redis.StringCmd, len(batch))
		refunded := make([]*redis.StringCmd, len(batch))
		for i, u := range batch {
			done[i] = pipe.PTTL(ctx, keys.Done(u.tenant, u.urlID))
			values[i] = pipe.Get(ctx, keys.Done(u.tenant, u.urlID))
			refunded[i] = pipe.Get(ctx, keys.Refunded(u.tenant, u.urlID))
		}
		read := time.Now()
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, err
		}
		for i := range batch {
			o := &out[from+i]
			if ttl := done[i].Val(); ttl > 0 {
				o.done, o.doneAt = true, read.Add(ttl-st.p.doneTTL)
				o.value = values[i].Val()
			}
			if v, err := refunded[i].Result(); err == nil {
				o.refunded, o.takenBack = true, quota.TakenBack(v)
				o.refundedAt, _ = quota.RefundedAt(v)
				o.tokenBack = creditsTokens(batch[i].tenant, v)
			}
		}
	}
	return out, nil
}

// creditsTokens reports whether refunded marker value v of a grant of
// tenant credited a bucket of requests. A value of an older format, which
// names no buckets, did.
func creditsTokens(tenant, v string) bool {
	bs, err := quota.ParseRefundRecord(tenant, v)
	if err != nil {
		return true
	}
	for _, b := range bs {
		if b.Units == 0 {
			return true
		}
	}
	return false
}

// settle waits until every grant is due, then until every URL and
// multipart grant received has a marker, every done marker its final
// verdict (outcome.final), and the ledger has nothing left to deliver,
// within the plan's settle time. It reports whether that happened.
func (st *stack) settle(ctx context.Context, t *testing.T, res result, loadStop time.Time) bool {
	t.Helper()
	// A grant the clients never saw (its sign or create was cut) was
	// issued before the load stopped: due at most its life + grace later.
	due := loadStop.Add(max(st.p.ttl, st.p.mpTTL) + st.p.grace + time.Second)
	all := append(slices.Clip(res.urls), res.mp.refs()...)
	for _, u := range all {
		if d := u.expiresAt.Add(st.p.grace); d.After(due) {
			due = d
		}
	}
	time.Sleep(time.Until(due))
	began := time.Now()
	for time.Since(began) < st.p.settle && ctx.Err() == nil {
		if st.allMarked(ctx, all) && st.ledgerIdle(ctx) {
			time.Sleep(time.Second) // a last schedule may be firing
			if st.ledgerIdle(ctx) {
				t.Logf("%s: settled %v after the last grant was due", st.topo.name, time.Since(began).Round(time.Millisecond))
				return true
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("%s: not settled %v after the last grant was due", st.topo.name, st.p.settle)
	st.diagnose(ctx, t)
	return false
}

func (st *stack) allMarked(ctx context.Context, urls []received) bool {
	outs, err := st.outcomes(ctx, urls)
	if err != nil {
		return false
	}
	for _, o := range outs {
		if (!o.done && !o.refunded) || !o.final() {
			return false
		}
	}
	return true
}

// ledgerIdle reports whether the ledger stream holds no pending schedule
// and none of its consumers has a message left to deliver or to ack. It
// reads only counters, not messages, so it holds whatever the ledger's
// message format.
func (st *stack) ledgerIdle(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := st.js.Stream(ctx, ledger.DefaultStream)
	if err != nil {
		return false
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(ledger.SubjectSchedPrefix+">"))
	if err != nil || len(info.State.Subjects) > 0 {
		return false
	}
	consumers := s.ListConsumers(ctx)
	for c := range consumers.Info() {
		if c.NumPending > 0 || c.NumAckPending > 0 {
			return false
		}
	}
	return consumers.Err() == nil
}

// report is one topology's verdict.
type report struct {
	topo     string
	seed     uint64
	settled  bool
	elapsed  time.Duration
	settle   time.Duration
	grace    time.Duration
	origin   time.Time // the load's start: times of examples count from it
	summary  []string
	rows     []row
	failures int
	examples map[string][]string // per failure, a few URLs that show it
}

// maxExamples is how many URLs the report shows per kind of failure.
const maxExamples = 5

// example records u as a case of the failure what, with its timeline.
func (r *report) example(what string, u received, o outcome) {
	r.addExample(what, func(at func(time.Time) string) string {
		return fmt.Sprintf("%s (tenant %s, user %s, %s): signed %s, uploaded %s (PUT %d), expires %s, due %s, done marker %q set %s, refunded %s",
			u.urlID, u.tenant, u.user, u.bytes(), at(u.signedAt), at(u.uploadedAt), u.putStatus, at(u.expiresAt), at(u.expiresAt.Add(r.grace)), o.value, at(o.doneAt), at(o.refundedAt))
	})
}

// addExample records the line line writes as a case of the failure what,
// up to maxExamples of each; at writes a time as seconds since the origin.
func (r *report) addExample(what string, line func(at func(time.Time) string) string) {
	if r.examples == nil {
		r.examples = map[string][]string{}
	}
	if len(r.examples[what]) >= maxExamples {
		return
	}
	r.examples[what] = append(r.examples[what], line(func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return fmt.Sprintf("%.3fs", t.Sub(r.origin).Seconds())
	}))
}

// row is one invariant: what was seen, what is allowed, and whether it held.
type row struct {
	name, observed, limit string
	ok                    bool
}

func (r *report) add(name, observed, limit string, ok bool) {
	r.rows = append(r.rows, row{name, observed, limit, ok})
	if !ok {
		r.failures++
	}
}

func (r *report) failed() bool { return r.failures > 0 || !r.settled }

// table is the report as printed: the run's numbers, then the invariants.
func (r *report) table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "chaos %s: seed %d, %v\n", r.topo, r.seed, r.elapsed.Round(time.Second))
	for _, s := range r.summary {
		fmt.Fprintf(&b, "  %s\n", s)
	}
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "  invariant\tobserved\tlimit\tresult")
	settled := row{"settled after every grant was due", "yes", fmt.Sprintf("within %v", r.settle), r.settled}
	if !r.settled {
		settled.observed = "no"
	}
	for _, x := range append([]row{settled}, r.rows...) {
		verdict := "pass"
		if !x.ok {
			verdict = "FAIL"
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\n", x.name, x.observed, x.limit, verdict)
	}
	w.Flush()
	whats := make([]string, 0, len(r.examples))
	for what := range r.examples {
		whats = append(whats, what)
	}
	sort.Strings(whats)
	for _, what := range whats {
		fmt.Fprintf(&b, "  %s, e.g. (times from the load's start):\n", what)
		for _, e := range r.examples[what] {
			fmt.Fprintf(&b, "    %s\n", e)
		}
	}
	return b.String()
}

// check reads Redis and the clients' records and judges every invariant.
// Times in the report count from origin, the start of the load.
func check(ctx context.Context, t *testing.T, st *stack, res result, downloads []dlAsk, faults []injected, origin, lastFault time.Time) *report {
	t.Helper()
	r := &report{topo: st.topo.name, settle: st.p.settle, origin: origin, grace: st.p.grace}
	outs, err := st.outcomes(ctx, res.urls)
	if err != nil {
		t.Fatalf("reading the markers: %v", err)
	}
	markers, err := st.countKeys(ctx, keys.Refunded("*", "*"))
	if err != nil {
		t.Fatalf("counting refunded markers: %v", err)
	}
	mouts, orphans, err := st.mpOutcomes(ctx, res.mp.grants)
	if err != nil {
		t.Fatalf("reading the multipart grants' ends: %v", err)
	}
	b, err := st.buckets(ctx, res, mouts)
	if err != nil {
		t.Fatalf("reading the buckets: %v", err)
	}
	v, err := st.readVerdicts(ctx, res, outs, mouts)
	if err != nil {
		t.Fatalf("reading the verdicts: %v", err)
	}
	exposed, exposedBytes := 0, int64(0)
	for _, f := range faults {
		exposed += f.exposed
		exposedBytes += f.exposedBytes
	}

	r.summarize(res, outs, mouts, faults, exposed, markers)
	r.summarizeMultipart(res, mouts)
	r.summarizeVerdicts(outs, mouts, v)
	r.summary = append(r.summary, fmt.Sprintf("bytes: %d B asked by URLs and multipart grants received, %d B uploaded (%d B in multipart objects); "+
		"at risk %d B of requests in flight at signer kills (a held cancel counts %d B); refill since the seed: users %.1f B, tenants %.1f B",
		b.bytesGranted, b.bytesUploaded, b.bytesMultipart, exposedBytes, maxContentLength, b.userBytes.refill, b.tenantBytes.refill))
	r.summary = append(r.summary, fmt.Sprintf("rescues: %d passes applied schedules nats-server had not fired 30 s after due", st.rescues()))
	r.checkURLs(res, outs)
	r.checkMultipart(res, mouts, orphans)
	r.checkVerdicts(res, outs, mouts, v)
	r.checkDownloads(res, outs, downloads, 2*(st.p.ttl+st.p.grace))
	r.checkWebhooks(st.readWebhooks(ctx, t, v.events))
	r.checkBuckets(b, exposed, exposedBytes)
	r.checkAnswers(res)
	r.add("no service exited by itself", strings.Join(append([]string{fmt.Sprint(len(st.crashes))}, st.crashes...), " "), "0", len(st.crashes) == 0)
	// The sweeper's refunds: every URL's, and the multipart grants' no
	// DELETE was sent for (a DELETE refunds at once, before the due time).
	urls, uouts := slices.Clip(res.urls), slices.Clip(outs)
	for i, g := range res.mp.grants {
		if g.abort == "" {
			urls, uouts = append(urls, g.ref()), append(uouts, mouts[i].outcome)
		}
	}
	r.checkLateness(urls, uouts, st.p, lastFault)
	return r
}

// summarize writes the run's numbers above the table.
func (r *report) summarize(res result, outs []outcome, mouts []mpOutcome, faults []injected, exposed, markers int) {
	var kinds [numKinds]int
	for _, f := range faults {
		kinds[f.kind]++
	}
	var counts []string
	for k, n := range kinds {
		counts = append(counts, fmt.Sprintf("%s %d", kind(k), n))
	}
	uploaded, refused, refunded, late, lateAfter, takenBack, mpRefunded := 0, 0, 0, 0, 0, 0, 0
	for _, o := range mouts {
		if o.refunded {
			mpRefunded++
		}
	}
	for i, u := range res.urls {
		switch {
		case u.uploaded:
			uploaded++
		case u.putStatus != 0:
			refused++
		}
		if outs[i].refunded {
			refunded++
		}
		if u.late {
			late++
			if u.uploaded && outs[i].refunded && !outs[i].refundedAt.IsZero() && outs[i].refundedAt.Before(u.uploadedAt) {
				lateAfter++
			}
		}
		if outs[i].takenBack {
			takenBack++
		}
	}
	r.summary = append(r.summary,
		"faults: "+strings.Join(counts, ", "),
		fmt.Sprintf("signs: %d requests (%d replays), %d URLs received, %d uploaded, %d left unused, %d PUTs refused, %d requests gave up",
			res.ops, res.replays, len(res.urls), uploaded, len(res.urls)-uploaded, refused, res.abandoned),
		"answers: "+answers(res.answers),
		fmt.Sprintf("tokens at risk: %d requests in flight or cancels held at signer kills; %d answers 503 limiter_unavailable "+
			"(a spend that timed out on a paused Redis runs when it resumes, past its deadline: it takes nothing, and a cancel follows)",
			exposed, res.answers["503 limiter_unavailable"]+res.mp.answers["create 503 limiter_unavailable"]),
		fmt.Sprintf("refunded markers: %d of URLs received, %d of multipart grants received, %d of grants no client received", refunded, mpRefunded, markers-refunded-mpRefunded),
		fmt.Sprintf("slow uploads: %d landed after their grant's due time, %d of them after its refund; %d refunds taken back", late, lateAfter, takenBack),
	)
}

// checkURLs: each URL received ends either uploaded or refunded, never
// both: a refund its upload landed after is taken back.
func (r *report) checkURLs(res result, outs []outcome) {
	var neither, both, doneUnused, uploadRefunded, takenUnused int
	for i, u := range res.urls {
		o := outs[i]
		switch {
		case o.done && o.refundStands():
			both++
			r.example("done and refunded", u, o)
		case !o.done && !o.refunded:
			neither++
			r.example("neither done nor refunded", u, o)
		case o.done && !u.uploaded:
			doneUnused++
			r.example("done but never uploaded", u, o)
		}
		if u.uploaded && o.refundStands() {
			uploadRefunded++
			r.example("uploaded and refunded", u, o)
		}
		if o.takenBack && (!o.done || !u.uploaded) {
			takenUnused++
			r.example("refund taken back without an upload", u, o)
		}
	}
	r.add("every URL received ends done xor refunded",
		fmt.Sprintf("%d neither, %d both, %d done but never uploaded", neither, both, doneUnused), "0", neither+both+doneUnused == 0)
	r.add("no uploaded URL refunded", fmt.Sprint(uploadRefunded), "0", uploadRefunded == 0)
	r.add("no refund taken back but by its upload", fmt.Sprint(takenUnused), "0", takenUnused == 0)
}

// checkBuckets: no bucket holds more than its spends and refunds allow,
// and those that hold less lost at most what signer kills put at risk:
// exposed requests for the token buckets, exposedBytes for those of bytes.
func (r *report) checkBuckets(b bucketTallies, exposed int, exposedBytes int64) {
	r.add("no token minted (final > capacity − uploads − multipart objects)",
		fmt.Sprintf("users +%d in %d buckets, tenants +%d in %d", b.users.minted, b.users.mintedIn, b.tenants.minted, b.tenants.mintedIn),
		"0", b.users.minted == 0 && b.tenants.minted == 0)
	r.add("no refund lost (tokens never given back)",
		fmt.Sprintf("users %d, tenants %d", b.users.short, b.tenants.short),
		fmt.Sprintf("≤ %d at risk at signer kills", exposed), b.users.short <= exposed && b.tenants.short <= exposed)
	r.add("no byte minted (final bytes > seeded + refill − bytes uploaded)",
		fmt.Sprintf("users +%d B in %d buckets, tenants +%d B in %d", b.userBytes.minted, b.userBytes.mintedIn, b.tenantBytes.minted, b.tenantBytes.mintedIn),
		"0", b.userBytes.minted == 0 && b.tenantBytes.minted == 0)
	r.add("no byte refund lost (bytes never given back)",
		fmt.Sprintf("users %d B, tenants %d B", b.userBytes.short, b.tenantBytes.short),
		fmt.Sprintf("≤ %d B at risk at signer kills", exposedBytes), int64(b.userBytes.short) <= exposedBytes && int64(b.tenantBytes.short) <= exposedBytes)
}

// checkAnswers: keys replay one URL, and no answer is a 500.
func (r *report) checkAnswers(res result) {
	twoURLs := 0
	for _, ids := range res.keys {
		if len(ids) > 1 {
			twoURLs++
		}
	}
	r.add("no Idempotency-Key yielded two urlIds", fmt.Sprintf("%d of %d keys", twoURLs, len(res.keys)), "0", twoURLs == 0)
	n500 := 0
	for a, n := range res.answers {
		if strings.HasPrefix(a, "500") {
			n500 += n
		}
	}
	for a, n := range res.mp.answers {
		if _, status, _ := strings.Cut(a, " "); strings.HasPrefix(status, "500") || strings.HasPrefix(a, "PUT part 500") {
			n500 += n
		}
	}
	r.add("no HTTP 500", fmt.Sprint(n500), "0", n500 == 0)
}

// checkLateness: refund time (the marker's value) − due time (expiry +
// grace), over every refunded grant of urls and over those due after the
// last fault. A fault's effect on refunds outlasts its end by the ledger
// consumer's AckWait: a batch the server delivered to a killed sweeper, or
// through a killed or paused nats-server, before it noticed, is delivered
// again only that long after (by design: the seed 455420 of the short form
// saw such batches 5.0–5.2 s late). So "after the last fault" is due after
// its end + AckWait.
func (r *report) checkLateness(urls []received, outs []outcome, p plan, lastFault time.Time) {
	lastFault = lastFault.Add(ledger.DefaultAckWait)
	var all, after []time.Duration
	early := 0
	for i, u := range urls {
		if !outs[i].refunded || outs[i].refundedAt.IsZero() {
			continue
		}
		due := u.expiresAt.Add(p.grace)
		late := outs[i].refundedAt.Sub(due)
		if late < 0 {
			early++
			r.example("refunded before due", u, outs[i])
		}
		all = append(all, late)
		if due.After(lastFault) {
			after = append(after, late)
		}
	}
	r.add("no refund before its due time", fmt.Sprintf("%d of %d", early, len(all)), "0", early == 0)
	r.add("refund lateness, all", spread(all), fmt.Sprintf("max ≤ %v", p.settle), len(all) == 0 || slices.Max(all) <= p.settle)
	r.add("refund lateness, due after the last fault", spread(after), fmt.Sprintf("p99 ≤ %v", lateAfterFaults),
		len(after) == 0 || pct(after, 0.99) <= lateAfterFaults)
}

// countKeys counts the keys matching pattern.
func (st *stack) countKeys(ctx context.Context, pattern string) (int, error) {
	n := 0
	iter := st.rdb.Scan(ctx, 0, pattern, 1000).Iterator()
	for iter.Next(ctx) {
		n++
	}
	return n, iter.Err()
}

// lateAfterFaults bounds refund lateness once nothing fails any more.
const lateAfterFaults = 5 * time.Second

// tally is the accounting of one kind of bucket.
type tally struct {
	minted, mintedIn, short int
	refill                  float64 // buckets of bytes: what the refill added since the seed, over the buckets
}

// bucketTallies compares each bucket with capacity − its uploads, and each
// bucket of bytes with its seed + its refill − the bytes uploaded.
type bucketTallies struct {
	users, tenants, userBytes, tenantBytes tally
	// The bytes of the grants received, of those uploaded (an uploaded
	// URL, a multipart object), and of the multipart objects among them.
	bytesGranted, bytesUploaded, bytesMultipart int64
}

// buckets reads every user and tenant bucket the clients spent from. With
// a negligible refill, a bucket's tokens are capacity − spends + refunds:
// above capacity − uploads is a token minted, below it a token lost. An
// upload the gate rejected spent its token and bytes like any other: a
// URL counts as uploaded when its PUT was stored, whatever the verdict, and
// a multipart grant when its object exists, or was moved to quarantine
// (its marker reads rejected). A multipart grant a DELETE refunded spent
// its token too (its bytes came back: outcome.tokenBack); any other gave
// it back. The buckets of bytes are read the same way,
// each grant spending its contentLength, from the seed plus the refill
// (byteExcess); every one seeded is read, spent from or not.
func (st *stack) buckets(ctx context.Context, res result, mouts []mpOutcome) (bucketTallies, error) {
	var out bucketTallies
	userUploads := map[[2]string]int{}
	tenantUploads := map[string]int{}
	userBytes := map[[2]string]int64{}
	tenantBytes := map[string]int64{}
	for _, u := range userIDs(st.p) {
		userBytes[u] += 0
		tenantBytes[u[0]] += 0
	}
	for _, u := range res.urls {
		k := [2]string{u.tenant, u.user}
		userUploads[k] += 0
		tenantUploads[u.tenant] += 0
		out.bytesGranted += u.size
		if u.uploaded {
			userUploads[k]++
			tenantUploads[u.tenant]++
			userBytes[k] += u.size
			tenantBytes[u.tenant] += u.size
			out.bytesUploaded += u.size
		}
	}
	for i, g := range res.mp.grants {
		k := [2]string{g.tenant, g.user}
		userUploads[k] += 0
		tenantUploads[g.tenant] += 0
		out.bytesGranted += g.size
		if !mouts[i].object && mouts[i].refunded && !mouts[i].tokenBack {
			userUploads[k]++ // a DELETE's refund: the token stays spent, the bytes came back
			tenantUploads[g.tenant]++
		}
		if _, rejected := mouts[i].rejected(); mouts[i].object || rejected {
			userUploads[k]++
			tenantUploads[g.tenant]++
			userBytes[k] += g.size
			tenantBytes[g.tenant] += g.size
			out.bytesUploaded += g.size
			out.bytesMultipart += g.size
		}
	}
	for k, n := range userUploads {
		if err := st.tallyBucket(ctx, &out.users, keys.Bucket(k[0], keys.UserSubject(k[1])), userCapacity, n); err != nil {
			return out, err
		}
	}
	for tenant, n := range tenantUploads {
		if err := st.tallyBucket(ctx, &out.tenants, keys.TenantBucket(tenant), tenantCapacity, n); err != nil {
			return out, err
		}
	}
	for k, n := range userBytes {
		if err := st.tallyBytes(ctx, &out.userBytes, keys.ByteBucket(k[0], keys.UserSubject(k[1])), userBytesTier, n); err != nil {
			return out, err
		}
	}
	for tenant, n := range tenantBytes {
		if err := st.tallyBytes(ctx, &out.tenantBytes, keys.TenantByteBucket(tenant), tenantBytesTier, n); err != nil {
			return out, err
		}
	}
	return out, nil
}

// tallyBucket adds one bucket's difference from capacity − uploads to t.
func (st *stack) tallyBucket(ctx context.Context, t *tally, key string, capacity, uploads int) error {
	tokens, err := st.rdb.HGet(ctx, key, "t").Float64()
	switch {
	case errors.Is(err, redis.Nil):
		tokens = float64(capacity) // a missing key is a full bucket
	case err != nil:
		return fmt.Errorf("bucket %s: %w", key, err)
	}
	t.add(int(math.Round(tokens - float64(capacity-uploads))))
	return nil
}

// add counts a bucket d tokens above (minted) or below (lost) what it
// should hold.
func (t *tally) add(d int) {
	switch {
	case d > 0:
		t.minted += d
		t.mintedIn++
	case d < 0:
		t.short -= d
	}
}

// tallyBytes adds one bucket of bytes' difference from what its seed, its
// refill and the bytes uploaded leave (byteExcess) to t.
func (st *stack) tallyBytes(ctx context.Context, t *tally, key string, l byteShape, uploaded int64) error {
	v, err := st.rdb.HMGet(ctx, key, "t", "ts").Result()
	if err != nil {
		return fmt.Errorf("bucket %s: %w", key, err)
	}
	b := storedBucket{}
	if tok, ok := v[0].(string); ok {
		if b.tokens, err = strconv.ParseFloat(tok, 64); err != nil {
			return fmt.Errorf("bucket %s: t %q: %w", key, tok, err)
		}
		b.found = true
	}
	if ts, ok := v[1].(string); ok {
		if b.stamp, err = strconv.ParseInt(ts, 10, 64); err != nil {
			return fmt.Errorf("bucket %s: ts %q: %w", key, ts, err)
		}
	}
	excess, refill := byteExcess(b, l, st.bytesSeeded, uploaded)
	t.refill += refill
	t.add(int(math.Round(excess)))
	return nil
}

// storedBucket is a bucket's hash as read: its tokens and its stamp (ms).
type storedBucket struct {
	tokens float64
	stamp  int64
	found  bool // a missing key is a full bucket
}

// byteExcess is how many bytes a bucket of bytes of shape l, seeded at
// byteSeed stamped seeded (ms), holds above what its spends and refunds
// allow once uploaded bytes stayed spent: above 0 minted, below lost. The
// bucket never fills, so the script credits its refill for every
// millisecond its stamp moved on (it keeps the later stamp when a clock
// lags), and so from the seed to its last stamp: rate × (stamp − seeded).
// A missing key is a full bucket, with nothing refilled.
func byteExcess(b storedBucket, l byteShape, seeded, uploaded int64) (excess, refill float64) {
	if !b.found {
		b.tokens, b.stamp = l.capacity, seeded
	}
	refill = float64(max(0, b.stamp-seeded)) * l.rate / 1000
	return b.tokens - (byteSeed(l) + refill - float64(uploaded)), refill
}

// spread is "p50 … p99 … max … (n)" of durations.
func spread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	return fmt.Sprintf("p50 %v, p99 %v, max %v (%d)", pct(ds, 0.5).Round(time.Millisecond),
		pct(ds, 0.99).Round(time.Millisecond), slices.Max(ds).Round(time.Millisecond), len(ds))
}

func pct(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[max(0, int(math.Ceil(q*float64(len(s))))-1)]
}

// answers is the tally of sign answers, most frequent first.
func answers(m map[string]int) string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return m[ks[i]] > m[ks[j]] || (m[ks[i]] == m[ks[j]] && ks[i] < ks[j]) })
	parts := make([]string, len(ks))
	for i, k := range ks {
		parts[i] = fmt.Sprintf("%s ×%d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// diagnose logs what the ledger holds when it did not settle, so a
// failing seed says where the grants stopped: schedules that never fired
// (the server's scheduler), due messages no consumer delivered (the pull),
// or deliveries never acked (the handler). Then each node's log tail.
func (st *stack) diagnose(ctx context.Context, t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	s, err := st.js.Stream(ctx, ledger.DefaultStream)
	if err != nil {
		t.Logf("diagnose: stream: %v", err)
	} else {
		st.diagnoseStream(ctx, t, s)
	}
	for i, n := range st.nats {
		t.Logf("nats node %d log (tail):\n%s", i, tail(n.Output(), 4000))
	}
}

func (st *stack) diagnoseStream(ctx context.Context, t *testing.T, s jetstream.Stream) {
	t.Helper()
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(">"))
	if err != nil {
		t.Logf("diagnose: stream info: %v", err)
		return
	}
	sched, due := 0, uint64(0)
	for subj, n := range info.State.Subjects {
		if strings.HasPrefix(subj, ledger.SubjectSchedPrefix) {
			sched++
		} else if subj == ledger.SubjectDue {
			due = n
		}
	}
	t.Logf("diagnose: stream %s: %d messages (seq %d–%d), %d schedules pending, %d due messages kept; cluster %+v",
		ledger.DefaultStream, info.State.Msgs, info.State.FirstSeq, info.State.LastSeq, sched, due, info.Cluster)
	if sched > 0 {
		m, err := s.GetMsg(ctx, info.State.FirstSeq, jetstream.WithGetMsgSubject(ledger.SubjectSchedPrefix+">"))
		if err != nil {
			t.Logf("diagnose: first schedule: %v", err)
		} else {
			t.Logf("diagnose: first schedule seq %d, stored %v ago, %s=%q",
				m.Sequence, time.Since(m.Time).Round(time.Millisecond), jetstream.ScheduleHeader, m.Header.Get(jetstream.ScheduleHeader))
		}
	}
	consumers := s.ListConsumers(ctx)
	for c := range consumers.Info() {
		t.Logf("diagnose: consumer %s: pending %d, ack pending %d, waiting pulls %d, redelivered %d, delivered %+v, ack floor %+v, cluster %+v",
			c.Name, c.NumPending, c.NumAckPending, c.NumWaiting, c.NumRedelivered, c.Delivered, c.AckFloor, c.Cluster)
	}
	if err := consumers.Err(); err != nil {
		t.Logf("diagnose: consumers: %v", err)
	}
}

// rescues counts the sweepers' rescue passes in their logs, those of the
// processes killed before included: schedules nats-server did not fire,
// which the sweepers applied themselves (ledger.WithRescueAfter).
func (st *stack) rescues() int {
	n := st.rescued
	for _, s := range st.sweepers {
		n += rescuesIn(s.Output())
	}
	return n
}

func rescuesIn(log string) int {
	return strings.Count(log, "the server had not fired these schedules")
}
