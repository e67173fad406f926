package main

import (
	"net/http"
	"net/netip"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/mintgate/mintgate/shared/bucket"
)

// defaultReadLimit is MINTGATE_READ_LIMIT's default: a burst of 30 reads
// per client address, 10 a second after that, per signer instance. A page
// polling its uploads' status and its quota once a second stays far below
// it; a flood from one address reaches Redis at 10 a second per instance.
const defaultReadLimit = "30:10"

// readLimiter bounds, per client address, the routes that cost Redis a
// round trip without spending anything there: GET /uploads/quota,
// GET /uploads/{urlId} and the public port's /readyz (and GET
// /uploads/limits, which costs nothing, as every public read). A sign is
// limited by its buckets in Redis, but these reads answer from Redis
// without limit, so anyone who can reach the signer could make it flood
// Redis with them.
//
// The buckets are in-process (bucket.Local, the Redis script's twin), so a
// refused read costs no round trip: the point is to keep floods away from
// Redis, so the limit cannot live there. Each instance keeps its own: n
// instances let one address through n times as often, which still bounds
// Redis by the instance count, not by the flood.
//
// The address is the one the anonymous buckets are keyed by (clientIP, the
// configured MINTGATE_IP_SOURCE and MINTGATE_TRUSTED_PROXIES; IPv6 by /64),
// for every caller: it is checked before the caller is authenticated, which
// would cost a JWT verification first.
//
// /readyz is limited rather than answered from a cached result: a cache
// would say "ready" for a while after Redis went away, to the probes and the
// load balancer that take a pod out of rotation on it, while a probe polls
// from one address at most every few seconds, far below the limit.
type readLimiter struct {
	limit   bucket.Limit
	ip      clientIP
	buckets *bucket.Local
	now     func() time.Time
}

// newReadLimiter limits each address to l; nil when the limit is off.
func newReadLimiter(l bucket.Limit, on bool, ip clientIP) *readLimiter {
	if !on {
		return nil
	}
	return &readLimiter{limit: l, ip: ip, buckets: bucket.NewLocal(), now: time.Now}
}

// middleware answers 429 too_many_requests, with Retry-After, to a read
// from an address whose bucket is empty. A nil limiter lets all through.
func (rl *readLimiter) middleware() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		if rl == nil {
			return next
		}
		return func(c echo.Context) error {
			res := rl.buckets.Take(rl.now(), 1, bucket.Bucket{Key: rl.key(c.Request()), Limit: rl.limit})
			if !res.Allowed {
				e := newError(http.StatusTooManyRequests, codeTooManyReads, "too many reads from this address; retry after %d s", retrySeconds(res.RetryAfter))
				e.retry = res.RetryAfter
				e.RetryAfter = retrySeconds(res.RetryAfter)
				return e
			}
			return next(c)
		}
	}
}

// key is the bucket of r's client address: an IPv6 caller's /64, as its
// anonymous sign bucket, so rotating through one's own addresses buys none.
func (rl *readLimiter) key(r *http.Request) string {
	a := rl.ip.of(r)
	if a.Is6() && !a.Is4In6() {
		return "read:" + netip.PrefixFrom(a.WithZone(""), 64).Masked().String()
	}
	return "read:" + a.String()
}
