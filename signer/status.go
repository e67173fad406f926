package main

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/keys"
)

// Grant statuses of GET /uploads/{urlId}.
const (
	statusPending   = "pending"   // issued, not yet expired, no upload seen
	statusCompleted = "completed" // the object was created (done marker)
	statusExpired   = "expired"   // expired unused; the refund is due after the grace
	statusRefunded  = "refunded"  // expired unused and its token given back
)

type statusResponse struct {
	URLID     string     `json:"urlId"`
	Status    string     `json:"status"`
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
}

// handleStatus is GET /uploads/{urlId}: the state of one of the caller's
// tenant's grants, read from its done marker, refund marker and grant
// record in one round trip (they share the tenant's hash tag).
func handleStatus(d deps) echo.HandlerFunc {
	return func(c echo.Context) error {
		who, aerr := d.ident.authenticate(c.Request())
		if aerr != nil {
			return aerr
		}
		id := c.Param("urlId")
		if u, err := uuid.Parse(id); err != nil || u.String() != id {
			return newError(http.StatusBadRequest, codeInvalidRequest, "urlId must be a lower-case UUID")
		}
		ctx, cancel := context.WithTimeout(c.Request().Context(), d.cfg.Redis.Timeout)
		defer cancel()
		pipe := d.rdb.Pipeline()
		done := pipe.Exists(ctx, keys.Done(who.Tenant, id))
		refunded := pipe.Exists(ctx, keys.Refunded(who.Tenant, id))
		expires := pipe.HGet(ctx, keys.Grant(who.Tenant, id), "expiresAt")
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return unavailable(codeLimiterDown, "grant status is unavailable", retryLimiter, err)
		}

		resp := statusResponse{URLID: id}
		if ms, err := strconv.ParseInt(expires.Val(), 10, 64); err == nil {
			t := time.UnixMilli(ms).UTC()
			resp.ExpiresAt = &t
		}
		switch {
		case done.Val() > 0:
			resp.Status = statusCompleted
		case refunded.Val() > 0:
			resp.Status = statusRefunded
		case resp.ExpiresAt == nil:
			return newError(http.StatusNotFound, codeNotFound, "no upload with this urlId in your tenant")
		case d.now().Before(*resp.ExpiresAt):
			resp.Status = statusPending
		default:
			resp.Status = statusExpired
		}
		return c.JSON(http.StatusOK, resp)
	}
}
