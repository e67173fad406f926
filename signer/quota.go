package main

import (
	"context"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/tiers"
	"github.com/mintgate/mintgate/signer/internal/apierr"
	"github.com/mintgate/mintgate/signer/internal/identity"
	"github.com/mintgate/mintgate/signer/internal/ratelimit"
)

// quotaScope is what one side of GET /uploads/quota reports.
type quotaScope struct {
	Limit        int64 `json:"limit"`
	Remaining    int64 `json:"remaining"`
	ResetSeconds int64 `json:"resetSeconds"`
}

type quotaResponse struct {
	Caller quotaScope `json:"caller"`
	Tenant quotaScope `json:"tenant"`
	// The buckets of bytes, in bytes, when their tiers are set.
	CallerBytes *quotaScope `json:"callerBytes,omitempty"`
	TenantBytes *quotaScope `json:"tenantBytes,omitempty"`
}

// handleQuota is GET /uploads/quota: what the caller's bucket and the
// tenant's hold now, spending nothing and writing nothing, so a page can
// grey out its upload button instead of collecting 429s. The tenant side is
// the scarcer of the tenant-wide buckets (for an anonymous caller, the
// tenant's and anonymous_all). The RateLimit headers describe the scarcest
// bucket, as on a sign.
func handleQuota(d deps) echo.HandlerFunc {
	return func(c echo.Context) error {
		who, aerr := d.ident.Authenticate(c.Request())
		if aerr != nil {
			return aerr
		}
		set := d.tiers()
		tagged, _ := set.SignBuckets(who.Tenant, who.Subject, who.Tier)
		requests := len(tagged)
		tagged = append(tagged, set.ByteBuckets(who.Tenant, who.Subject, who.Tier, 1)...)
		buckets := tiers.Plain(tagged)
		res, err := d.peekRateHeaders(c.Request().Context(), c.Response().Header(), who, buckets, d.now())
		if err != nil {
			return apierr.Unavailable(apierr.CodeLimiterDown, "the rate limiter is unavailable", apierr.RetryLimiter, err)
		}
		tenant := 1
		for i := 2; i < requests; i++ {
			if res[i].Remaining < res[tenant].Remaining {
				tenant = i
			}
		}
		out := quotaResponse{Caller: scopeOf(res[0]), Tenant: scopeOf(res[tenant])}
		for i := requests; i < len(buckets); i++ {
			q := scopeOf(res[i])
			if tagged[i].Role == tiers.RoleTenantBytes {
				out.TenantBytes = &q
			} else {
				out.CallerBytes = &q
			}
		}
		return c.JSON(http.StatusOK, out)
	}
}

// peekRateHeaders reads what buckets hold at now without spending anything
// (one round trip, within MINTGATE_REDIS_TIMEOUT: gate.Peek) and sets the RateLimit
// headers of the scarcest, as a sign would. It returns one Result per
// bucket; on an error it sets no header.
func (d deps) peekRateHeaders(ctx context.Context, h http.Header, who identity.Caller, buckets []bucket.Bucket, now time.Time) ([]bucket.Result, error) {
	res, err := d.gate.Peek(ctx, now, who.Tenant, buckets)
	if err != nil {
		return nil, err
	}
	scarcest := 0 // of the buckets of requests: the headers describe those
	for i := range res {
		if buckets[i].Units == 0 && res[i].Remaining < res[scarcest].Remaining {
			scarcest = i
		}
	}
	head := res[scarcest]
	head.Allowed, head.Scarcest = head.Remaining > 0, scarcest
	j := 0
	for i, b := range buckets {
		if b.Units > 0 && j < bucket.MaxByteBuckets {
			head.BytesLeft[j] = res[i].Remaining
			j++
		}
	}
	ratelimit.SetHeaders(h, d.cfg.RateLimitHeader, who, head, buckets)
	return res, nil
}

func scopeOf(r bucket.Result) quotaScope {
	return quotaScope{Limit: r.Limit, Remaining: r.Remaining, ResetSeconds: int64(r.Reset.Seconds())}
}
