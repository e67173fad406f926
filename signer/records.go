package main

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/records"
	"github.com/mintgate/mintgate/signer/internal/apierr"
)

// The upload records' routes (SPEC §10): a caller's own rows and usage on
// the public port, a tenant's usage and the tenants at their ceiling on
// the admin API. They read PostgreSQL only; the sign path never does.
// Without MINTGATE_POSTGRES_URL each answers 404 records_off.

// maxListLimit caps GET /uploads?limit=.
const maxListLimit = 100

// uploadsPage is GET /uploads's answer; Next is null on the last page.
type uploadsPage struct {
	Uploads []records.Row `json:"uploads"`
	Next    *string       `json:"next"`
}

func recordsOff() *apierr.Error {
	return apierr.New(http.StatusNotFound, apierr.CodeRecordsOff, "upload records are off on this deployment (MINTGATE_POSTGRES_URL is unset)")
}

func recordsDown(err error) *apierr.Error {
	return apierr.Unavailable(apierr.CodeRecordsDown, "the upload records are unavailable right now", apierr.RetryRecords, err)
}

// handleListUploads is GET /uploads: the caller's uploads, newest first,
// a page at a time by keyset (?cursor= is the last answer's "next").
func handleListUploads(d deps) echo.HandlerFunc {
	return func(c echo.Context) error {
		if d.records == nil {
			return recordsOff()
		}
		who, aerr := d.ident.Authenticate(c.Request())
		if aerr != nil {
			return aerr
		}
		f := records.Filter{Tenant: who.Tenant, Subject: who.Subject, Limit: 20, Status: c.QueryParam("status"), Cursor: c.QueryParam("cursor")}
		if v := c.QueryParam("limit"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > maxListLimit {
				return apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "limit must be an integer from 1 to %d", maxListLimit)
			}
			f.Limit = n
		}
		if f.Status != "" {
			if err := records.CheckStatus(f.Status); err != nil {
				return apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "%v", err)
			}
		}
		p, err := d.records.List(c.Request().Context(), f)
		switch {
		case errors.Is(err, records.ErrBadCursor):
			return apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "cursor is not one an earlier answer gave")
		case err != nil:
			return recordsDown(err)
		}
		out := uploadsPage{Uploads: p.Uploads}
		if out.Uploads == nil {
			out.Uploads = []records.Row{}
		}
		if p.Next != "" {
			out.Next = &p.Next
		}
		return c.JSON(http.StatusOK, out)
	}
}

// handleUsage is GET /uploads/usage: the caller's uploads by status, and
// the bytes of the completed ones.
func handleUsage(d deps) echo.HandlerFunc {
	return func(c echo.Context) error {
		if d.records == nil {
			return recordsOff()
		}
		who, aerr := d.ident.Authenticate(c.Request())
		if aerr != nil {
			return aerr
		}
		u, err := d.records.Usage(c.Request().Context(), who.Tenant, who.Subject)
		if err != nil {
			return recordsDown(err)
		}
		return c.JSON(http.StatusOK, u)
	}
}

// adminUsage is GET /admin/tenants/{tenant}/usage: GET /uploads/usage
// for every caller of a tenant.
func adminUsage(d deps) echo.HandlerFunc {
	return func(c echo.Context) error {
		if d.records == nil {
			return recordsOff()
		}
		tenant := c.Param("tenant")
		if !keys.ValidTenant(tenant) {
			return apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "tenant must match [A-Za-z0-9_-]{1,64}")
		}
		u, err := d.records.Usage(c.Request().Context(), tenant, "")
		if err != nil {
			return recordsDown(err)
		}
		return c.JSON(http.StatusOK, u)
	}
}

// maxCeilingWindow bounds ?window= of at-ceiling: a week of minutes.
const maxCeilingWindow = 7 * 24 * time.Hour

// adminAtCeiling is GET /admin/tenants/at-ceiling?window=1h: the tenants
// whose signs the tenant bucket refused in a minute of the window.
func adminAtCeiling(d deps) echo.HandlerFunc {
	return func(c echo.Context) error {
		if d.records == nil {
			return recordsOff()
		}
		window := time.Hour
		if v := c.QueryParam("window"); v != "" {
			w, err := time.ParseDuration(v)
			if err != nil || w < time.Minute || w > maxCeilingWindow {
				return apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "window must be a duration from 1m to 168h, such as 1h")
			}
			window = w
		}
		cs, err := d.records.AtCeiling(c.Request().Context(), d.now(), window)
		if err != nil {
			return recordsDown(err)
		}
		if cs == nil {
			cs = []records.Ceiling{}
		}
		return c.JSON(http.StatusOK, map[string]any{"tenants": cs})
	}
}
