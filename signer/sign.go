package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/mintgate/mintgate/api"
	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/ledger"
	"github.com/mintgate/mintgate/shared/quota"
	"github.com/mintgate/mintgate/shared/telemetry"
	"github.com/mintgate/mintgate/shared/tiers"
	"github.com/mintgate/mintgate/signer/internal/apierr"
	"github.com/mintgate/mintgate/signer/internal/gate"
	"github.com/mintgate/mintgate/signer/internal/identity"
	"github.com/mintgate/mintgate/signer/internal/ratelimit"
	"github.com/mintgate/mintgate/signer/internal/request"
)

// signBudget bounds the work after the decision. It runs detached from the
// client's connection: once a token is spent, the request either issues a
// URL (replayable by its key) or refunds the token, even if the client left.
const signBudget = 10 * time.Second

// appendSignResponse appends the 201 body r to dst exactly as json.Marshal
// writes it (the same bytes, so replays stored before and after read
// alike), without reflection: encoding/json spent more on this body than
// signing the URL.
func appendSignResponse(dst []byte, r api.SignResponse) []byte {
	dst = append(dst, `{"url":`...)
	dst = appendJSONString(dst, r.URL)
	dst = append(dst, `,"method":`...)
	dst = appendJSONString(dst, r.Method)
	dst = append(dst, `,"headers":{"Content-Length":`...)
	dst = appendJSONString(dst, r.Headers.ContentLength)
	dst = append(dst, `,"Content-Type":`...)
	dst = appendJSONString(dst, r.Headers.ContentType)
	dst = append(dst, `,"If-None-Match":`...)
	dst = appendJSONString(dst, r.Headers.IfNoneMatch)
	if r.Headers.ChecksumSHA256 != "" {
		dst = append(dst, `,"x-amz-checksum-sha256":`...)
		dst = appendJSONString(dst, r.Headers.ChecksumSHA256)
	}
	dst = append(dst, `},"urlId":`...)
	dst = appendJSONString(dst, r.URLID)
	dst = append(dst, `,"key":`...)
	dst = appendJSONString(dst, r.Key)
	dst = append(dst, `,"expiresAt":"`...)
	dst = r.ExpiresAt.AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, `","expiresIn":`...)
	dst = strconv.AppendInt(dst, r.ExpiresIn, 10)
	return append(dst, '}')
}

// appendJSONString appends s as a JSON string the way json.Marshal does,
// HTML-safe: every value of a sign response is ASCII, where that is five
// escapes; anything else is left to encoding/json itself.
func appendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x80 {
			b, _ := json.Marshal(s) // a string always encodes
			return append(dst, b...)
		}
	}
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '<':
			dst = append(dst, `\u003c`...)
		case '>':
			dst = append(dst, `\u003e`...)
		case '&':
			dst = append(dst, `\u0026`...)
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}

// handleSign is POST /uploads/sign (docs/api.md): validate, decide in one
// script, then presign, record in the ledger and complete.
func handleSign(d deps) echo.HandlerFunc {
	route := charged{policy: request.NewPolicy(d.cfg.MaxObject, d.cfg.ContentTypes), issue: d.issue, count: d.count, nothing: "no URL was issued"}
	return func(c echo.Context) error { return d.serveCharged(c, route) }
}

// charged is a route that spends what a sign spends: POST /uploads/sign,
// and POST /uploads/multipart with multipart set.
type charged struct {
	policy    request.Policy
	multipart bool
	// issue turns an allowed decision into the 201 body.
	issue func(ctx context.Context, a attempt, dec gate.Decision, urlID string, now time.Time) ([]byte, *apierr.Error)
	// count adds a request to the route's outcome series.
	count   func(outcome string)
	nothing string // what the 503 of an unavailable limiter says was not done
}

// serveCharged authenticates, validates, decides in one script and issues
// what route issues. A caller (an anonymous one: its address) whose
// replays and refusals have emptied its read bucket is refused before its
// request is decoded (readlimit.Limiter.Admit).
func (d deps) serveCharged(c echo.Context, route charged) error {
	r := c.Request()
	who, aerr := d.ident.Authenticate(r)
	if aerr != nil {
		route.count("rejected")
		return aerr
	}
	if aerr := d.reads.Admit(r, who); aerr != nil {
		route.count("too_many_requests")
		return aerr
	}
	req, aerr := request.Decode(r.Header.Get(request.HeaderIdempotencyKey), r.Body, route.policy)
	if aerr == nil {
		aerr = d.checksumRequired(who, req, route.multipart)
	}
	if aerr != nil {
		route.count("rejected")
		return aerr
	}

	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), signBudget)
	defer cancel()
	a := newAttempt(who, req, d.tiers(), d.cfg.shadowCap(who.Tenant))
	if aerr := a.neverFits(); aerr != nil {
		route.count("rejected")
		return aerr
	}
	if route.multipart {
		a.ask.Fingerprint = multipartFingerprint(a.ask.Fingerprint)
	}
	// The urlId this request will issue is also its nonce: fresh for
	// every request, retries with the same key included, so that a
	// cancel or an undo touches only what this very request did.
	urlID := uuid.NewString()
	a.ask.Nonce = urlID
	ctx = telemetry.WithUpload(ctx, who.Tenant, urlID) // every span from here on names the upload
	now := d.now()
	a.ask.Live = d.liveSlot(who, route.multipart, now)
	dec, err := d.gate.Decide(ctx, a.ask, a.buckets, now)
	if err == nil && route.multipart && dec.Degraded {
		// A multipart grant needs its grant record in Redis for every
		// later step: it is never issued from the in-process buckets.
		if dec.Outcome == quota.Allowed {
			d.refund(ctx, a, dec, urlID)
		}
		err = errors.New("redis unavailable: multipart grants are not issued in degraded mode")
	}
	if err != nil {
		route.count("limiter_unavailable")
		return apierr.Unavailable(apierr.CodeLimiterDown, "the rate limiter is unavailable; "+route.nothing, apierr.RetryLimiter, err)
	}
	if done, err := d.refuse(ctx, c, &a, &dec, now); done {
		d.reads.Charge(r, who) // it cost Redis and spent no token
		return err
	}

	body, aerr := route.issue(ctx, a, dec, urlID, now)
	if aerr != nil {
		return aerr
	}
	if a.spendsBytes() {
		d.metrics.bytesGranted.WithLabelValues(who.Tenant).Add(float64(req.ContentLength))
	}
	d.tally.signed(who.Tenant, req.ContentLength)
	ratelimit.SetHeaders(c.Response().Header(), d.cfg.RateLimitHeader, who, dec.Result, a.buckets)
	return c.JSONBlob(http.StatusCreated, body)
}

// checksumRequired is the 400 of a sign or multipart create without a
// checksum when who's tenant must send one (MINTGATE_REQUIRE_CHECKSUM, or
// its requireChecksum in the tiers file).
func (d deps) checksumRequired(who identity.Caller, req request.Sign, multipart bool) *apierr.Error {
	if req.HasChecksum() || !d.tiers().RequiresChecksum(who.Tenant, d.cfg.RequireChecksum) {
		return nil
	}
	if multipart {
		return apierr.New(http.StatusBadRequest, apierr.CodeChecksumRequired, `this tenant's uploads must be checksummed: send "checksumAlgorithm":"SHA256"`)
	}
	return apierr.New(http.StatusBadRequest, apierr.CodeChecksumRequired, "this tenant's uploads must be checksummed: send checksumSHA256, the base64 of the object's SHA-256")
}

// liveSlot is the MINTGATE_MAX_LIVE_GRANTS slot a grant of who issued at
// now takes (a multipart one if multipart); nil when the bound is off.
// The grant holds it until its expiresAt (as issue and openMultipart
// compute it), unless it ends before.
func (d deps) liveSlot(who identity.Caller, multipart bool, now time.Time) *quota.Live {
	n := d.cfg.MaxLiveGrants
	if n <= 0 {
		return nil
	}
	ttl := d.cfg.URLTTL
	if multipart {
		ttl = d.cfg.Multipart.TTL
	}
	return &quota.Live{Key: keys.LiveGrants(who.Tenant, who.Subject), Max: n, Until: now.UTC().Truncate(time.Second).Add(ttl.Truncate(time.Second))}
}

// neverFits is the 413 of a sign whose contentLength is above a bucket of
// bytes' whole capacity: no refill ever makes it fit, so it is no 429 to
// retry.
func (a attempt) neverFits() *apierr.Error {
	for _, b := range a.buckets {
		if b.Units > b.Limit.Capacity {
			return apierr.New(http.StatusRequestEntityTooLarge, apierr.CodeTooLarge, "contentLength is above the %d bytes the %s quota holds", int64(b.Limit.Capacity), ratelimit.TierOf(a.who, b))
		}
	}
	return nil
}

// refuse answers the decisions that issue no URL: a replay, a key reused
// or still in flight, a denial. It reports false, and answers nothing, for
// an allowed decision and for a denial let through in shadow mode (see
// shadow, which changes a and dec).
func (d deps) refuse(ctx context.Context, c echo.Context, a *attempt, dec *gate.Decision, now time.Time) (bool, error) {
	r, who := c.Request(), a.who
	switch dec.Outcome {
	case quota.Replay:
		d.count("replayed")
		h := c.Response().Header()
		h.Set(request.HeaderReplayed, "true")
		// What the buckets hold now, spending nothing. Best effort: a
		// replay is still answered, without the headers, if the read
		// fails (Redis answered the decision a moment ago).
		if _, err := d.peekRateHeaders(r.Context(), h, who, a.buckets, now); err != nil {
			d.log.Debug("replay without RateLimit headers: reading the buckets failed", "tenant", who.Tenant, "err", err)
		}
		return true, c.JSONBlob(http.StatusOK, dec.Body)
	case quota.LiveFull:
		d.count("rate_limited")
		d.metrics.limited.WithLabelValues(who.Tenant, ratelimit.ScopeLiveGrants).Inc()
		d.tally.refused(who.Tenant, ratelimit.ScopeLiveGrants)
		retry := max(dec.Result.RetryAfter, time.Second)
		return true, &apierr.Error{
			Status: http.StatusTooManyRequests, Code: apierr.CodeTooMany, Scope: ratelimit.ScopeLiveGrants,
			Message:    "you hold too many upload URLs that are neither used nor expired; use or abort one, or retry later",
			RetryAfter: apierr.RetrySeconds(retry), Retry: retry,
		}
	case quota.Reused, quota.InProgress:
		k := keyRefusals[dec.Outcome]
		d.count(k.count)
		return true, apierr.New(k.status, k.code, k.message, request.HeaderIdempotencyKey)
	case quota.Denied:
		if a.hard != nil && !dec.Degraded {
			return d.shadow(ctx, c, a, dec, now)
		}
		d.count("rate_limited")
		scope := ratelimit.Scope(who, a.buckets, dec.Result)
		d.metrics.limited.WithLabelValues(who.Tenant, scope).Inc()
		d.tally.refused(who.Tenant, scope)
		ratelimit.SetHeaders(c.Response().Header(), d.cfg.RateLimitHeader, who, dec.Result, a.buckets)
		return true, ratelimit.TooMany(who, a.buckets, dec.Result)
	}
	return false, nil
}

// keyRefusals answer the decisions by an Idempotency-Key held by another
// request: the sign-outcome series counted, the status, the code and the
// message (%s is the header's name).
var keyRefusals = map[quota.Outcome]struct {
	count, code, message string
	status               int
}{
	quota.Reused:     {"reused", apierr.CodeKeyReused, "this %s was used for a different request", http.StatusUnprocessableEntity},
	quota.InProgress: {"in_progress", apierr.CodeInProgress, "a request with this %s is still in progress", http.StatusConflict},
}

// shadow decides a denial of a shadowed tenant's sign (a.hard is set): it
// is counted, and the sign is decided again on the hard buckets alone —
// the caller's ceiling (MINTGATE_SHADOW_CAP times its tier) and, for an
// anonymous caller, anonymous_all — in the same one script as any Spend,
// idempotency and in-flight mark included. Allowed, the URL is issued
// charged to those buckets, and its grant credits them back if unused;
// otherwise that decision is answered as any other (a 429 past the
// ceiling). In degraded mode shadow mode is off: the local share decides.
func (d deps) shadow(ctx context.Context, c echo.Context, a *attempt, dec *gate.Decision, now time.Time) (bool, error) {
	d.metrics.shadowDenied.WithLabelValues(ratelimit.Scope(a.who, a.buckets, dec.Result)).Inc()
	hard := *a
	hard.ask.Buckets, hard.charged = tiers.Plain(a.hard), a.hard
	hard.buckets, hard.hard = hard.ask.Buckets, nil
	hd, err := d.gate.Decide(ctx, hard.ask, hard.buckets, now)
	if err != nil {
		d.count("limiter_unavailable")
		return true, apierr.Unavailable(apierr.CodeLimiterDown, "the rate limiter is unavailable; no URL was issued", apierr.RetryLimiter, err)
	}
	if hd.Outcome != quota.Allowed {
		*a, *dec = hard, hd
		return d.refuse(ctx, c, a, dec, now)
	}
	// The first decision's headers still describe the caller's limits; the
	// URL is charged to the hard buckets, and its refund credits them.
	a.ask.Buckets, a.charged = hard.ask.Buckets, hard.charged
	dec.Shadow, dec.Degraded = true, hd.Degraded
	return false, nil
}

// issue turns an allowed decision into URL urlID: presign, record the
// grant and wait for the ledger's ack, then store the completed record. A
// URL leaves only once its grant is recorded; on any failure before that
// the token is refunded and the key freed.
func (d deps) issue(ctx context.Context, a attempt, dec gate.Decision, urlID string, now time.Time) ([]byte, *apierr.Error) {
	who := a.who
	key := keys.Object(who.Tenant, urlID)
	// The URL is signed at now, in whole seconds (SigV4's dates), and lives
	// whole seconds: it dies exactly at expiresAt.
	expiresAt := now.UTC().Truncate(time.Second).Add(d.cfg.URLTTL.Truncate(time.Second))

	up, err := d.presign.PutChecksum(ctx, key, a.req.ContentType, a.req.Checksum, a.req.ContentLength, d.cfg.URLTTL, now)
	if err != nil {
		d.refund(ctx, a, dec, urlID)
		d.count("presign_unavailable")
		return nil, apierr.Unavailable(apierr.CodePresignDown, "upload URLs cannot be signed right now; nothing was charged", apierr.RetryPresign, err)
	}
	g := ledger.Grant{
		URLID: urlID, Tenant: who.Tenant, Tier: who.Tier, Subject: who.Subject, Key: key,
		IssuedAt: now.UTC(), ExpiresAt: expiresAt,
		// What a refund gives back, at the shapes charged now, whatever
		// tiers the sweeper runs with.
		Credits: a.credits(),
		// Charged to in-process buckets only: no sweeper may credit Redis for it.
		Degraded: dec.Degraded,
		Shadow:   dec.Shadow,
		// Kept for the upload records (shared/records).
		ContentType: a.req.ContentType, ContentLength: a.req.ContentLength, ChecksumSHA256: a.req.Checksum,
		Filename: a.req.Filename,
		// The sign's span: the completer's, the webhooks' and the
		// sweeper's spans of this upload join its trace.
		Trace: telemetry.Traceparent(ctx),
	}
	if err := record(ctx, d.ledger, d.metrics, g); err != nil {
		d.refund(ctx, a, dec, urlID)
		d.count("ledger_unavailable")
		return nil, apierr.Unavailable(apierr.CodeLedgerDown, "the grant ledger is unavailable; no URL was issued and nothing was charged", apierr.RetryLedger, err)
	}

	body := appendSignResponse(make([]byte, 0, len(up.URL)+384), api.SignResponse{
		URL: up.URL, Method: http.MethodPut, Headers: up.Headers,
		URLID: urlID, Key: key, ExpiresAt: expiresAt, ExpiresIn: int64(d.cfg.URLTTL / time.Second),
	})
	switch {
	case dec.Degraded:
		// Redis was unavailable a moment ago: this URL gets no replay record
		// and no status; its ledger record still refunds it if unused.
		d.count("issued_degraded")
	default:
		fin := d.finished(a, urlID, body, expiresAt, d.cfg.URLTTL)
		fin.Traceparent = g.Trace
		if err := d.gate.Finish(ctx, a.ask, fin); err != nil {
			// The URL is paid for and in the ledger, so it is still issued;
			// only a replay of this key and its status lookup are lost.
			d.metrics.finishFailed.Inc()
			d.log.ErrorContext(ctx, "storing the completed sign failed; issuing the URL anyway", "tenant", who.Tenant, "urlId", urlID, "err", err)
		}
		d.count("issued")
	}
	return body, nil
}

// finished is what gate.Finish stores of a's grant urlID, which lives
// ttl until expiresAt: the body a replay answers and the grant record.
func (d deps) finished(a attempt, urlID string, body []byte, expiresAt time.Time, ttl time.Duration) quota.Finished {
	return quota.Finished{
		URLID: urlID, Subject: a.who.Subject, Body: body, ExpiresAt: expiresAt,
		RecordTTL: ttl, GrantTTL: quota.GrantRecordTTL(ttl, d.cfg.SweepGrace),
		// What the completer's verification gate checks the object against.
		ContentType: a.req.ContentType, ContentLength: a.req.ContentLength,
		// What the object's SHA-256 is, for its status and its events.
		ChecksumSHA256: a.req.Checksum,
		// The name its downloads give it (Content-Disposition).
		Filename: a.req.Filename,
	}
}

// refund gives back the token of a sign that issues no URL, and marks its
// grant refunded so that the sweeper never gives it back a second time.
func (d deps) refund(ctx context.Context, a attempt, dec gate.Decision, urlID string) {
	if err := d.gate.Undo(ctx, a.ask, dec, urlID, d.now()); err != nil {
		d.log.Error("refunding a sign that issued no URL failed: a token is lost until the bucket refills, and the key stays in flight until its mark expires",
			"tenant", a.who.Tenant, "err", err)
	}
}

// count adds one sign request to its outcome's series.
func (d deps) count(outcome string) { d.metrics.signs.WithLabelValues(outcome).Inc() }
