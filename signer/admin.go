package main

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/tiers"
	"github.com/mintgate/mintgate/signer/internal/apierr"
)

// The admin API lives on the ops port only (MINTGATE_OPS_ADDR), and only
// with MINTGATE_ADMIN_TOKEN set; every call carries it as a bearer token.
// It is for support and operators: inspect a tenant's or a caller's
// buckets, refill one, read a grant's record and markers.

// adminBucket is one bucket as GET /admin/tenants/{tenant}/buckets shows it.
type adminBucket struct {
	Key             string  `json:"key"`
	Tier            string  `json:"tier"`
	Capacity        float64 `json:"capacity"`
	RefillPerSecond float64 `json:"refillPerSecond"`
	Remaining       int64   `json:"remaining"`
	ResetSeconds    int64   `json:"resetSeconds"`
}

type adminBuckets struct {
	Tenant  string        `json:"tenant"`
	Subject string        `json:"subject,omitempty"`
	Buckets []adminBucket `json:"buckets"`
}

type adminGrant struct {
	URLID     string     `json:"urlId"`
	Tenant    string     `json:"tenant"`
	Found     bool       `json:"found"` // the grant record exists
	Subject   string     `json:"subject,omitempty"`
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
	Done      bool       `json:"done"`
	Refunded  bool       `json:"refunded"`
}

// withAdmin serves /admin/* beside ops when the admin token is set.
func withAdmin(d deps, ops http.Handler) http.Handler {
	if len(d.cfg.AdminToken) == 0 {
		return ops
	}
	mux := http.NewServeMux()
	mux.Handle("/admin/", adminHandler(d))
	mux.Handle("/", ops)
	return mux
}

func adminHandler(d deps) http.Handler {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = apierr.Handler(d.log)
	e.Use(recoverJSON(d.log), adminAuth(d.cfg.AdminToken))
	e.GET("/admin/tenants/:tenant/buckets", adminGetBuckets(d))
	e.POST("/admin/tenants/:tenant/reset", adminReset(d))
	e.GET("/admin/grants/:urlId", adminGetGrant(d))
	e.GET("/admin/tenants/:tenant/usage", adminUsage(d))
	e.GET("/admin/tenants/at-ceiling", adminAtCeiling(d))
	if d.hooks != nil {
		e.GET("/admin/webhooks/failed", adminListFailed(d.hooks))
		e.POST("/admin/webhooks/failed/:webhookId/redeliver", adminRedeliver(d, d.hooks))
	}
	return e
}

// adminAuth requires "Authorization: Bearer <MINTGATE_ADMIN_TOKEN>".
func adminAuth(token []byte) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			got, ok := strings.CutPrefix(c.Request().Header.Get("Authorization"), "Bearer ")
			if !ok || subtle.ConstantTimeCompare([]byte(got), token) != 1 {
				return apierr.New(http.StatusUnauthorized, apierr.CodeUnauthenticated, "the admin API needs MINTGATE_ADMIN_TOKEN as a bearer token")
			}
			return next(c)
		}
	}
}

// adminTarget reads the tenant of the path and an optional subject
// ("u:<user>" or "a:<ip hash>"), and names the buckets they mean: the
// subject's own, or with none the tenant-wide ones (tenant, anonymous_all),
// then the matching bucket of bytes when its tier is set. The first is the
// one a reset refills.
func adminTarget(set tiers.Set, tenant, subject string) ([]bucket.Bucket, []string, *apierr.Error) {
	bs, names, aerr := adminRequests(set, tenant, subject)
	if aerr != nil {
		return nil, nil, aerr
	}
	key, tier := keys.TenantByteBucket(tenant), tiers.TenantBytes
	if subject != "" {
		key, tier = keys.ByteBucket(tenant, subject), tiers.BytesTierOf(names[0])
	}
	if l, ok := set.For(tenant, tier); ok {
		bs, names = append(bs, bucket.Bucket{Key: key, Limit: l, Units: 1}), append(names, tier)
	}
	return bs, names, nil
}

// adminRequests is adminTarget's buckets of requests.
func adminRequests(set tiers.Set, tenant, subject string) ([]bucket.Bucket, []string, *apierr.Error) {
	if !keys.ValidTenant(tenant) {
		return nil, nil, apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "tenant must match [A-Za-z0-9_-]{1,64}")
	}
	tier := ""
	switch {
	case subject == "":
		t, _ := set.For(tenant, tiers.Tenant)
		a, _ := set.For(tenant, tiers.AnonymousAll)
		return []bucket.Bucket{{Key: keys.TenantBucket(tenant), Limit: t}, {Key: keys.AnonBucket(tenant), Limit: a}},
			[]string{tiers.Tenant, tiers.AnonymousAll}, nil
	case strings.HasPrefix(subject, "u:") && keys.ValidUser(subject[2:]):
		tier = tiers.User
	case strings.HasPrefix(subject, "a:") && len(subject) > 2 && len(subject) <= 130:
		tier = tiers.Anonymous
	default:
		return nil, nil, apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "subject must be u:<user id> or a:<ip hash>")
	}
	l, _ := set.For(tenant, tier)
	return []bucket.Bucket{{Key: keys.Bucket(tenant, subject), Limit: l}}, []string{tier}, nil
}

// adminGetBuckets is GET /admin/tenants/{tenant}/buckets[?subject=…].
func adminGetBuckets(d deps) echo.HandlerFunc {
	return func(c echo.Context) error {
		tenant, subject := c.Param("tenant"), c.QueryParam("subject")
		bs, names, aerr := adminTarget(d.tiers(), tenant, subject)
		if aerr != nil {
			return aerr
		}
		res, err := d.gate.Peek(c.Request().Context(), d.now(), tenant, bs)
		if err != nil {
			return apierr.Unavailable(apierr.CodeLimiterDown, "Redis is unavailable", apierr.RetryLimiter, err)
		}
		out := adminBuckets{Tenant: tenant, Subject: subject}
		for i, b := range bs {
			out.Buckets = append(out.Buckets, adminBucket{
				Key: b.Key, Tier: names[i], Capacity: b.Limit.Capacity, RefillPerSecond: b.Limit.Rate,
				Remaining: res[i].Remaining, ResetSeconds: int64(res[i].Reset.Seconds()),
			})
		}
		return c.JSON(http.StatusOK, out)
	}
}

// adminReset is POST /admin/tenants/{tenant}/reset with {"subject": …}:
// the subject's bucket, or with none the tenant's bucket, refilled to
// capacity at once.
func adminReset(d deps) echo.HandlerFunc {
	return func(c echo.Context) error {
		var body struct {
			Subject string `json:"subject"`
		}
		dec := json.NewDecoder(io.LimitReader(c.Request().Body, 4096))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&body); err != nil && !errors.Is(err, io.EOF) {
			return apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "the body must be a JSON object such as {\"subject\":\"u:alice\"} or {}")
		}
		tenant := c.Param("tenant")
		bs, _, aerr := adminTarget(d.tiers(), tenant, body.Subject)
		if aerr != nil {
			return aerr
		}
		key := bs[0].Key // the subject's bucket, or the tenant's
		if err := d.gate.Refill(c.Request().Context(), tenant, key); err != nil {
			return apierr.Unavailable(apierr.CodeLimiterDown, "Redis is unavailable", apierr.RetryLimiter, err)
		}
		d.log.Info("admin: bucket refilled", "tenant", tenant, "key", key)
		return c.JSON(http.StatusOK, map[string]string{"refilled": key})
	}
}

// adminGetGrant is GET /admin/grants/{urlId}?tenant=…: the grant record and
// its markers, whoever signed it.
func adminGetGrant(d deps) echo.HandlerFunc {
	return func(c echo.Context) error {
		id, tenant := c.Param("urlId"), c.QueryParam("tenant")
		if u, err := uuid.Parse(id); err != nil || u.String() != id {
			return apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "urlId must be a lower-case UUID")
		}
		if !keys.ValidTenant(tenant) {
			return apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "the tenant query parameter must match [A-Za-z0-9_-]{1,64}")
		}
		st, err := d.gate.Status(c.Request().Context(), tenant, id)
		if err != nil {
			return apierr.Unavailable(apierr.CodeLimiterDown, "Redis is unavailable", apierr.RetryLimiter, err)
		}
		out := adminGrant{URLID: id, Tenant: tenant, Found: st.Found, Subject: st.Subject, Done: st.Done, Refunded: st.Refunded}
		if st.Found {
			at := st.ExpiresAt
			out.ExpiresAt = &at
		}
		return c.JSON(http.StatusOK, out)
	}
}
