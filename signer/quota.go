package main

import (
	"context"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/mintgate/mintgate/shared/bucket"
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
}

// handleQuota is GET /uploads/quota: what the caller's bucket and the
// tenant's hold now, spending nothing and writing nothing, so a page can
// grey out its upload button instead of collecting 429s. The tenant side is
// the scarcer of the tenant-wide buckets (for an anonymous caller, the
// tenant's and anonymous_all). The RateLimit headers describe the scarcest
// bucket, as on a sign.
func handleQuota(d deps) echo.HandlerFunc {
	return func(c echo.Context) error {
		who, aerr := d.ident.authenticate(c.Request())
		if aerr != nil {
			return aerr
		}
		buckets, _ := d.tiers().SignBuckets(who.Tenant, who.Subject, who.Tier)
		ctx, cancel := context.WithTimeout(c.Request().Context(), d.cfg.Redis.Timeout)
		defer cancel()
		res, err := d.gate.store.Peek(ctx, d.now(), who.Tenant, buckets)
		if err != nil {
			return unavailable(codeLimiterDown, "the rate limiter is unavailable", retryLimiter, err)
		}
		scarcest, tenant := 0, 1
		for i := range res {
			if res[i].Remaining < res[scarcest].Remaining {
				scarcest = i
			}
			if i > 0 && res[i].Remaining < res[tenant].Remaining {
				tenant = i
			}
		}
		head := res[scarcest]
		head.Allowed, head.Scarcest = head.Remaining > 0, scarcest
		setRateHeaders(c.Response().Header(), d.cfg.RateLimitHeader, who, head, buckets)
		return c.JSON(http.StatusOK, quotaResponse{Caller: scopeOf(res[0]), Tenant: scopeOf(res[tenant])})
	}
}

func scopeOf(r bucket.Result) quotaScope {
	return quotaScope{Limit: r.Limit, Remaining: r.Remaining, ResetSeconds: int64(r.Reset.Seconds())}
}
