// Package quota owns every Redis script that moves a grant's tokens: the
// signer's Spend, Undo, Finish and Cancel, the sweeper's batched Refund, and
// the Status read of one grant. Each script composes the bucket core
// (bucket.NewScript) with its own checks, so a decision and its bookkeeping
// are one atomic step; the KEYS/ARGV layouts stay private here, each named
// once (layouts.go), and callers see typed operations. quotatest.Twin is
// the same in Go, held equal to the scripts by a differential test.
// SpendBatch runs many Spends of one tenant in one script call, as if one
// after another; a Coalescer gathers concurrent Spends into such calls.
//
// Every key of one call carries the tenant's hash tag {t:<tenant>}, so each
// script is legal on Redis Cluster. The clock is the caller's (now). A Store
// imposes no timeout of its own: callers pass a ctx with a deadline.
//
// Exactly once: whoever gives a grant's token back, the signer's Undo or the
// sweeper's Refund, sets the grant's refunded marker in the same script, and
// the other finds it and credits nothing.
//
// Cancel covers what no reply tells: a Spend that timed out on the
// caller's side may still run on Redis (a stalled server runs what sits in
// its sockets when it resumes). Each request carries a nonce of its own;
// Cancel gives back what that request's Spend took, or leaves a tombstone
// that makes the Spend, if it runs later, take nothing.
package quota

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/keys"
)

var (
	//go:embed nonces.lua
	noncesSrc string
	//go:embed spend_fn.lua
	spendFn string
	//go:embed spend.lua
	spendEntry string
	//go:embed spend_many.lua
	spendManyEntry string
	//go:embed record.lua
	recordSrc string
	//go:embed undo.lua
	undoEntry string
	//go:embed cancel.lua
	cancelEntry string
	//go:embed finish_own.lua
	finishOwnEntry string
	//go:embed refund.lua
	refundEntry string
	//go:embed complete.lua
	completeEntry string
	//go:embed close.lua
	closeEntry string
)

// MarkerTTL is the least time every marker of how a grant ended (done,
// refunded) lives once set: far longer than any redelivery of a grant or
// retry of an undo takes. A sweeper applies no grant issued longer ago
// than MarkerTTL less an hour (the slack for clocks), so every message that
// could still carry a grant meets the marker its end left: a copy replayed
// late, or twice, moves nothing.
const MarkerTTL = 24 * time.Hour

// DoneUnpublished is the done marker's value for an upload whose object
// arrived and whose verdict and upload-completed event (docs/events.md)
// may not be stored yet: what the signer and the sweeper write when they
// learn from S3 that a multipart upload completed, so that the completer
// still verifies it and publishes its event when the ObjectCreated
// arrives. A completer from before the verification gate wrote it first
// too; ReadDone reads it as Unverified, like DoneVerifying.
const DoneUnpublished = "pending"

// RefundedTTL is how long a refunded marker lives, and what GET
// /uploads/{urlId} reports as "refunded" meanwhile.
const RefundedTTL = MarkerTTL

// CancelTTL is how long a cancelled idempotency record (a tombstone) lives:
// longer than any command can sit in a stalled Redis, a failover or a
// socket buffer before it runs, so the Spend it stops finds it. It blocks
// no one meanwhile: any other request on the key passes it.
const CancelTTL = 5 * time.Minute

// MaxCancelled is how many nonces a tombstone keeps, the newest: a client's
// retries with one key cut by one stall, with room to spare.
const MaxCancelled = 32

// maxNonce is the longest nonce: a UUID fits with room to spare.
const maxNonce = 64

// ErrUnavailable is returned when Redis could not answer: unreachable, past
// the ctx deadline, failing, or replying what no script returns. It wraps
// bucket.ErrUnavailable, so errors.Is(err, bucket.ErrUnavailable) holds too.
// Any other error is the caller's mistake (an invalid tenant, a key outside
// the tenant's hash tag, no buckets), which no retry fixes.
var ErrUnavailable = fmt.Errorf("quota: %w", bucket.ErrUnavailable)

// Ask is one sign request as the scripts see it.
type Ask struct {
	Tenant      string          // a tenant id, as keys.ValidTenant accepts
	Idem        string          // the idempotency record's key, keys.Idempotency(...), built by the caller
	Fingerprint string          // of what was asked: only the same request replays
	Nonce       string          // this request's own, fresh for each (a retry with the same key included): Cancel and Undo touch only what it did; 1 to 64 visible ASCII characters, no space (a UUID)
	Buckets     []bucket.Bucket // the caller's tier first, then the tenant's (and for anonymous callers anonymous_all's); all in the tenant's hash tag

	// Until is for Spend only: the last instant, by Redis's own clock
	// (TIME, to the millisecond), at which the Spend may still run. Later
	// it takes nothing, marks nothing and answers Late. A caller that gives
	// up on a Spend at its own deadline sets Until to that deadline on
	// Redis's clock (Clock.Until), so the Spend cannot run after the caller
	// gave up on it: a stalled Redis that resumes finds it late. Zero: no
	// limit.
	Until time.Time

	// Live bounds the caller's live grants (MINTGATE_MAX_LIVE_GRANTS),
	// for Spend only; nil: no bound.
	Live *Live
}

// Live is a Spend's bound on its caller's live grants: grants that are
// neither completed, refunded (or aborted) nor past their life. The
// caller's live set (keys.LiveGrants) holds each allowed Spend's nonce
// (its urlId) until Until, its grant's life; a grant whose done or
// refunded marker exists leaves it at the caller's next Spend. A Spend
// that finds Max live grants takes nothing and answers LiveFull.
type Live struct {
	Key   string    // keys.LiveGrants(tenant, subject)
	Max   int       // at least 1
	Until time.Time // this Spend's grant's end of life (its expiresAt)
}

// Outcome is what Spend decided.
type Outcome int

// The outcomes of Spend. The zero Outcome is none of them.
const (
	Allowed    Outcome = iota + 1 // a token was spent from every bucket and the key marked in flight
	Denied                        // a bucket is short: nothing was spent (429)
	Replay                        // the key completed with the same request: Body is its 201 body
	Reused                        // the key belongs to a different request (422)
	InProgress                    // the key's first request is still in flight (409)
	Cancelled                     // this very request (its nonce) was cancelled before the Spend ran: nothing was spent or marked
	Late                          // the Spend ran after Ask.Until by Redis's clock: nothing was read, spent or marked
	LiveFull                      // the caller holds Ask.Live.Max live grants: nothing was spent (429, Decision.Result.RetryAfter)
)

// String names the outcome.
func (o Outcome) String() string {
	switch o {
	case Allowed:
		return "allowed"
	case Denied:
		return "denied"
	case Replay:
		return "replay"
	case Reused:
		return "reused"
	case InProgress:
		return "in progress"
	case Cancelled:
		return "cancelled"
	case Late:
		return "late"
	case LiveFull:
		return "live grants full"
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// Decision is Spend's answer.
type Decision struct {
	Outcome Outcome
	Result  bucket.Result // Allowed and Denied: the buckets' answer, for the RateLimit headers
	Body    []byte        // Replay: the stored 201 body
}

func decided(r bucket.Result) Decision {
	if r.Allowed {
		return Decision{Outcome: Allowed, Result: r}
	}
	return Decision{Outcome: Denied, Result: r}
}

func replayed(body string) Decision { return Decision{Outcome: Replay, Body: []byte(body)} }

// Finished is what Finish stores once a grant is in the ledger.
type Finished struct {
	URLID     string
	Subject   string        // the caller's bucket subject, kept in the grant record
	Body      []byte        // the 201 body a replay answers with
	ExpiresAt time.Time     // the URL's expiry, kept in the grant record
	RecordTTL time.Duration // of the completed idempotency record
	GrantTTL  time.Duration // of the grant record
	// Multipart is a multipart grant's record (the signer's JSON: its
	// upload, layout and refund), kept in the grant record's field
	// "multipart"; empty for a single PUT.
	Multipart string
	// ContentType and ContentLength are what the grant was signed for,
	// kept in the grant record's fields "contentType" and "contentLength"
	// so that the completer can check the object against them. A record
	// written before they existed lacks both (GrantShape.Known false).
	ContentType   string
	ContentLength int64
}

// Status is what Redis knows of one grant.
type Status struct {
	Done      bool      // its upload landed: the completer's done marker
	DoneValue string    // the done marker's value (ReadDone says what it means)
	Refunded  bool      // its token was given back, by Undo or Refund
	ExpiresAt time.Time // from the grant record, in UTC
	Subject   string    // from the grant record
	Multipart string    // from the grant record: Finished.Multipart
	Found     bool      // the grant record exists
}

func status(done, refunded bool, expiresAt, subject, multipart string) Status {
	s := Status{Done: done, Refunded: refunded, Subject: subject, Multipart: multipart}
	if ms, err := strconv.ParseInt(expiresAt, 10, 64); err == nil {
		s.ExpiresAt, s.Found = time.UnixMilli(ms).UTC(), true
	}
	return s
}

// Store runs the scripts on Redis.
type Store struct {
	rdb                         redis.UniversalClient
	spend, undo, refund, cancel *redis.Script
	spendMany, complete, close  *redis.Script
	finishOwn                   *redis.Script
}

// New returns a Store on rdb, a *redis.Client or a *redis.ClusterClient.
func New(rdb redis.UniversalClient) *Store {
	return &Store{
		rdb:    rdb,
		spend:  spendScript,
		undo:   undoScript,
		refund: refundScript,
		cancel: cancelScript,

		spendMany: spendManyScript,
		complete:  completeScript,
		close:     closeScript,
		finishOwn: finishOwnScript,
	}
}

// Spend checks the idempotency record and, for a new request, takes one
// token from every bucket or from none, marking the key in flight for
// inFlight when it did: one round trip. A cancelled record (a tombstone) is
// no record for any other request; for the request it names, the answer is
// Cancelled and nothing is touched. A Spend that runs after a.Until (by
// Redis's clock) touches nothing and answers Late.
func (s *Store) Spend(ctx context.Context, now time.Time, a Ask, inFlight time.Duration) (Decision, error) {
	if err := CheckSpend(a, inFlight); err != nil {
		return Decision{}, err
	}
	sp := Spending{Now: now, Ask: a, InFlight: inFlight}
	n := len(a.Buckets)
	vals, err := s.spend.Run(ctx, s.rdb, spendKeys.Fill(n, sp), spendArgs.Fill(n, sp)...).Slice()
	if err != nil {
		return Decision{}, unavailable("spend", err)
	}
	return parseSpend(vals)
}

// parseSpend reads spend.lua's reply.
func parseSpend(vals []any) (Decision, error) {
	if len(vals) == 0 {
		return Decision{}, fmt.Errorf("%w: spend replied nothing", ErrUnavailable)
	}
	if w, ok := vals[0].(string); ok {
		switch {
		case w == "reused":
			return Decision{Outcome: Reused}, nil
		case w == "pending":
			return Decision{Outcome: InProgress}, nil
		case w == "cancelled":
			return Decision{Outcome: Cancelled}, nil
		case w == "late":
			return Decision{Outcome: Late}, nil
		case w == "live" && len(vals) == 2:
			secs, _ := vals[1].(int64)
			return Decision{Outcome: LiveFull, Result: bucket.Result{RetryAfter: time.Duration(max(secs, 1)) * time.Second, Blocked: -1}}, nil
		case w == "replay" && len(vals) == 2:
			body, _ := vals[1].(string)
			return replayed(body), nil
		}
		return Decision{}, fmt.Errorf("%w: spend replied %q", ErrUnavailable, w)
	}
	res, err := bucket.ParseResult(vals)
	if err != nil {
		return Decision{}, unavailable("spend", err)
	}
	return decided(res), nil
}

// Undo gives back the token of an allowed Spend whose URL was never handed
// out, frees the idempotency key (only while it is still this request's:
// its in-flight mark, or the done record a FinishOwn it gave up on stored,
// by its nonce and fingerprint) and sets the refunded marker keys.Refunded(tenant, urlID),
// atomically. If the refunded marker or the done marker already exists it
// refunds nothing (the sweeper got there first, or the upload landed) but
// still frees the key. It reports whether it refunded.
func (s *Store) Undo(ctx context.Context, now time.Time, a Ask, urlID string) (refunded bool, err error) {
	if err := CheckUndo(a, urlID); err != nil {
		return false, err
	}
	u := asked{now: now, a: a, urlID: urlID}
	n, err := s.undo.Run(ctx, s.rdb, undoKeys.Fill(len(a.Buckets), u), undoArgs.Fill(len(a.Buckets), u)...).Int64()
	if err != nil {
		return false, unavailable("undo", err)
	}
	return n == 1, nil
}

// Finish makes the idempotency record done with the 201 body (TTL
// f.RecordTTL) and writes the grant record keys.Grant(tenant, f.URLID)
// {expiresAt, subject[, multipart]} (TTL f.GrantTTL), atomically, with plain
// commands in one MULTI/EXEC: no script, since it moves no tokens and
// decides nothing. Whatever the record held is replaced: Finish follows
// this request's allowed Spend, and the URL it completes is paid for and
// leaves. A tombstone there (the in-flight mark expired and a retry was
// cancelled since) becomes this done record, which a late Spend of that
// retry finds and spends nothing on either (a replay, or reused).
func (s *Store) Finish(ctx context.Context, a Ask, f Finished) error {
	if err := CheckFinish(a, f); err != nil {
		return err
	}
	errs, err := s.finishAll(ctx, []Finishing{{Ask: a, Finished: f}})
	if err != nil {
		return err
	}
	return errs[0]
}

// FinishOwn is Finish for a request that gives its grant back (Undo) if
// this write fails, as a multipart create does: the idempotency record
// becomes done only while it is still this request's in-flight mark (its
// nonce and fingerprint), in one script; the grant record is written in
// any case. A FinishOwn its caller gave up on may still run later; with
// Undo's part (it deletes a done record of its own nonce), nothing then
// replays the grant given back, whichever of the two runs first. It reports
// whether the record became done.
func (s *Store) FinishOwn(ctx context.Context, a Ask, f Finished) (bool, error) {
	if err := CheckFinish(a, f); err != nil {
		return false, err
	}
	fin := Finishing{Ask: a, Finished: f}
	n, err := s.finishOwn.Run(ctx, s.rdb, finishOwnKeys.Fill(0, fin), finishOwnArgs.Fill(0, fin)...).Int64()
	if err != nil {
		return false, unavailable("finish", err)
	}
	return n == 1, nil
}

// Cancel ends a request whose Spend failed on the caller's side (timed out,
// connection lost) but may have reached Redis, so that it spends nothing
// and holds no key, whether its Spend ran already, runs later or never
// runs. By the idempotency record:
//
//   - in flight with this nonce and fingerprint (the Spend ran): one token
//     back to every bucket, capped as Undo's, and the record becomes a
//     tombstone (TTL CancelTTL); refunded is true;
//   - absent (the Spend has not run): a tombstone, which the Spend finds if
//     it runs and then takes nothing (Outcome Cancelled);
//   - a tombstone: this nonce is added to it; if it named the nonce
//     already, nothing changes and refunded is what the first Cancel said,
//     so a Cancel retried after a lost reply answers the same;
//   - another request's (in flight with another nonce, done): nothing is
//     touched; the Spend, if it runs, finds that record and takes nothing.
//
// A tombstone never blocks a retry: a Spend with another nonce treats it as
// absent. A retry of a Cancel is safe at any time.
func (s *Store) Cancel(ctx context.Context, now time.Time, a Ask) (refunded bool, err error) {
	if err := CheckCancel(a); err != nil {
		return false, err
	}
	c := asked{now: now, a: a}
	n, err := s.cancel.Run(ctx, s.rdb, cancelKeys.Fill(len(a.Buckets), c), cancelArgs.Fill(len(a.Buckets), c)...).Int64()
	if err != nil {
		return false, unavailable("cancel", err)
	}
	return n == 1, nil
}

// Status reads the done marker, the refunded marker and the grant record of
// one grant in one round trip (they share the tenant's hash tag).
func (s *Store) Status(ctx context.Context, tenant, urlID string) (Status, error) {
	if err := CheckStatus(tenant, urlID); err != nil {
		return Status{}, err
	}
	pipe := s.rdb.Pipeline()
	done := pipe.Get(ctx, keys.Done(tenant, urlID))
	refunded := pipe.Exists(ctx, keys.Refunded(tenant, urlID))
	rec := pipe.HMGet(ctx, keys.Grant(tenant, urlID), "expiresAt", "subject", "multipart")
	// A done marker that is absent is GET's redis.Nil, which Exec reports
	// as its first error: each command's own error decides.
	_, _ = pipe.Exec(ctx)
	for _, err := range []error{done.Err(), refunded.Err(), rec.Err()} {
		if err != nil && !errors.Is(err, redis.Nil) {
			return Status{}, unavailable("status", err)
		}
	}
	expiresAt, _ := rec.Val()[0].(string)
	subject, _ := rec.Val()[1].(string)
	mp, _ := rec.Val()[2].(string)
	st := status(done.Err() == nil, refunded.Val() > 0, expiresAt, subject, mp)
	st.DoneValue = done.Val()
	return st, nil
}

func unavailable(op string, err error) error {
	return fmt.Errorf("%w: %s: %w", ErrUnavailable, op, err)
}
