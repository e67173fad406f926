// Package readlimit bounds, per client address and in-process, what costs
// Redis without spending a token there: the public reads (Middleware) and
// a sign's replays and refusals (Admit before its script, Charge after).
// Its one way in is the Limiter.
package readlimit

import (
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/tiers"
	"github.com/mintgate/mintgate/signer/internal/apierr"
	"github.com/mintgate/mintgate/signer/internal/identity"
)

// DefaultLimit is MINTGATE_READ_LIMIT's default: a burst of 30 reads
// per client address, 10 a second after that, per signer instance. A page
// polling its uploads' status and its quota once a second stays far below
// it; a flood from one address reaches Redis at 10 a second per instance.
const DefaultLimit = "30:10"

// Limiter bounds, per client address, the routes that cost Redis a
// round trip without spending anything there: GET /uploads/quota,
// GET /uploads/{urlId} and the public port's /readyz (and GET
// /uploads/limits, which costs nothing, as every public read). A sign is
// limited by its buckets in Redis, but these reads answer from Redis
// without limit, so anyone who can reach the signer could make it flood
// Redis with them.
//
// The same bucket bounds what a sign or a multipart create costs Redis
// without spending a token there: a same-key replay, a refusal (429, 409,
// 422). Those are charged to it after their script (Charge), and a charged
// route whose address owes is refused before its script (Admit). A fresh
// sign spends nothing from it.
//
// The buckets are in-process (bucket.Local, the Redis script's twin), so a
// refused read costs no round trip: the point is to keep floods away from
// Redis, so the limit cannot live there. Each instance keeps its own: n
// instances let one address through n times as often, which still bounds
// Redis by the instance count, not by the flood.
//
// A read's address is the one the anonymous buckets are keyed by
// (clientIP, the configured MINTGATE_IP_SOURCE and MINTGATE_TRUSTED_PROXIES;
// IPv6 by /64), for every caller: it is checked before the caller is
// authenticated, which would cost a JWT verification first.
//
// A charged route's replays and refusals are checked and charged after
// the caller is authenticated, and charged to whom they are (review issue
// 36, item 7): an authenticated caller's to its tenant and subject, only an
// anonymous caller's to its address. Charged by address, one user
// hammering from a corporate NAT or an app's backend locked every other
// user at that address out of signing. Authenticating first costs a JWT
// verification (no Redis: verified tokens are cached until their exp),
// which is what the read limit does not bound.
//
// /readyz is limited rather than answered from a cached result: a cache
// would say "ready" for a while after Redis went away, to the probes and the
// load balancer that take a pod out of rotation on it, while a probe polls
// from one address at most every few seconds, far below the limit.
type Limiter struct {
	limit   bucket.Limit
	ip      identity.ClientIP
	buckets *bucket.Local
	now     func() time.Time
}

// New limits each address to l; nil when the limit is off.
func New(l bucket.Limit, on bool, ip identity.ClientIP) *Limiter {
	if !on {
		return nil
	}
	return &Limiter{limit: l, ip: ip, buckets: bucket.NewLocal(), now: time.Now}
}

// Middleware answers 429 too_many_requests, with Retry-After, to a read
// from an address whose bucket is empty. A nil limiter lets all through.
func (rl *Limiter) Middleware() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		if rl == nil {
			return next
		}
		return func(c echo.Context) error {
			res := rl.buckets.Take(rl.now(), 1, rl.bucket(c.Request()))
			if !res.Allowed {
				return tooManyFromAddress("reads", res.RetryAfter)
			}
			return next(c)
		}
	}
}

// Admit is the check of a charged route (a sign, a multipart create)
// before its Redis script: 429 too_many_requests when who's bucket (its
// own when authenticated, r's address's when anonymous) owes, nil
// otherwise. It spends nothing: a fresh sign is bounded by
// its own buckets in Redis, and is charged here only if it turns out to
// cost Redis without spending there (see Charge). A nil limiter admits
// all.
func (rl *Limiter) Admit(r *http.Request, who identity.Caller) *apierr.Error {
	if rl == nil {
		return nil
	}
	b := rl.callerBucket(r, who)
	if res := rl.buckets.Peek(rl.now(), 1, b); !res.Allowed {
		if who.Tier == tiers.Anonymous {
			return tooManyFromAddress("replayed or refused signs", res.RetryAfter)
		}
		return tooMany("too many replayed or refused signs from this caller", res.RetryAfter)
	}
	return nil
}

// Charge spends one read of who (its address when anonymous, see Admit)
// for a charged request that cost
// Redis and issued nothing: a same-key replay, a 429 refusal, a key
// reused or still in flight. Those spend no token, so only this bounds
// them per caller. It charges below zero if need be: requests admitted
// together are all paid for, and the caller waits until the debt is
// repaid.
func (rl *Limiter) Charge(r *http.Request, who identity.Caller) {
	if rl != nil {
		rl.buckets.Charge(rl.now(), 1, rl.callerBucket(r, who))
	}
}

// callerBucket is the bucket a charged request of who is checked and
// charged on: r's address's for an anonymous caller, its tenant's and
// subject's otherwise (a key no address can name: it starts "caller:").
func (rl *Limiter) callerBucket(r *http.Request, who identity.Caller) bucket.Bucket {
	if who.Tier == tiers.Anonymous {
		return rl.bucket(r)
	}
	return bucket.Bucket{Key: "caller:" + strconv.Quote(who.Tenant) + ":" + strconv.Quote(who.Subject), Limit: rl.limit}
}

// bucket is r's address's bucket.
func (rl *Limiter) bucket(r *http.Request) bucket.Bucket {
	return bucket.Bucket{Key: rl.key(r), Limit: rl.limit}
}

// tooManyFromAddress is the 429 too_many_requests of an address past its
// limit, what it sent too many of named in the message.
func tooManyFromAddress(what string, retry time.Duration) *apierr.Error {
	return tooMany("too many "+what+" from this address", retry)
}

// tooMany is a 429 too_many_requests saying msg and when to retry.
func tooMany(msg string, retry time.Duration) *apierr.Error {
	e := apierr.New(http.StatusTooManyRequests, apierr.CodeTooManyReads, "%s; retry after %d s", msg, apierr.RetrySeconds(retry))
	e.Retry = retry
	e.RetryAfter = apierr.RetrySeconds(retry)
	return e
}

// key is the bucket of r's client address: an IPv6 caller's /64, as its
// anonymous sign bucket, so rotating through one's own addresses buys none.
func (rl *Limiter) key(r *http.Request) string {
	a := rl.ip.Of(r)
	if a.Is6() && !a.Is4In6() {
		return "read:" + netip.PrefixFrom(a.WithZone(""), 64).Masked().String()
	}
	return "read:" + a.String()
}
