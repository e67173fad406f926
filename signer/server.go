package main

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mintgate/mintgate/shared/multipart"
	"github.com/mintgate/mintgate/shared/ops"
	"github.com/mintgate/mintgate/shared/records"
	"github.com/mintgate/mintgate/shared/telemetry"
	"github.com/mintgate/mintgate/shared/tiers"
	"github.com/mintgate/mintgate/shared/webhook"
	"github.com/mintgate/mintgate/signer/internal/apierr"
	"github.com/mintgate/mintgate/signer/internal/gate"
	"github.com/mintgate/mintgate/signer/internal/identity"
	"github.com/mintgate/mintgate/signer/internal/presign"
	"github.com/mintgate/mintgate/signer/internal/readlimit"
	"github.com/mintgate/mintgate/signer/internal/verdict"
)

// deps is everything the handlers use; run builds it from the
// configuration, tests may swap the clock or the ledger.
type deps struct {
	cfg     cfg
	log     *slog.Logger
	now     func() time.Time
	ident   *identity.Identity
	gate    *gate.Gate
	presign *presign.Presigner
	uploads *multipart.Uploads // the multipart routes' S3 calls
	ledger  recorder
	metrics *metrics
	reg     *prometheus.Registry
	checks  []ops.Check        // what /readyz pings
	reads   *readlimit.Limiter // per-address limit of the reads that cost Redis; nil: off
	live    *tiers.Live
	hooks   *webhook.Failed     // the admin routes' failed webhooks; nil without the admin API
	waits   *verdict.Hub        // the status long polls in progress
	records *records.Store      // the upload records' routes; nil: records off (MINTGATE_POSTGRES_URL unset)
	tally   *tallier            // counts signs and refusals per tenant and minute; nil: records off
	bus     *recordsBus         // publishes the tallies and aborts; nil: records off
	tel     *telemetry.Provider // tracing (OTEL_*); nil: off

	noRedisClock bool // tests: never read Redis's clock, so Spends carry no Until and the canceller alone covers a stall
}

// tiers is the tier set in force now (MINTGATE_TENANT_TIERS_FILE may
// change it while the signer runs).
func (d deps) tiers() tiers.Set {
	if d.live == nil {
		return d.cfg.Tiers
	}
	return d.live.Tiers()
}

// newServer returns the signer's HTTP handler.
func newServer(d deps) http.Handler {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = apierr.Handler(d.log)
	if d.tel.Enabled() {
		e.Use(traced(d.tel))
	}
	e.Use(recoverJSON(d.log))
	addRoutes(e, d)
	return e
}

// recoverJSON turns a panic into a logged internal_error, never a stack
// trace in a response.
func recoverJSON(log *slog.Logger) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) (err error) {
			defer func() {
				if p := recover(); p != nil {
					if p == http.ErrAbortHandler {
						panic(p)
					}
					log.Error("handler panicked", "path", c.Path(), "panic", p)
					err = &apierr.Error{Status: http.StatusInternalServerError, Code: apierr.CodeInternal, Message: "internal error"}
				}
			}()
			return next(c)
		}
	}
}
