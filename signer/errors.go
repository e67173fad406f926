package main

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
)

// The stable error codes of docs/api.md, and the few this service adds
// (not_found, method_not_allowed, presign_unavailable, internal_error), and
// the multipart routes' (storage_unavailable, grant_closed, size_mismatch,
// not_abortable).
const (
	codeKeyRequired      = "idempotency_key_required"
	codeKeyInvalid       = "idempotency_key_invalid"
	codeInvalidRequest   = "invalid_request"
	codeUnsupportedType  = "unsupported_content_type"
	codeTooLarge         = "content_too_large"
	codeUnauthenticated  = "unauthenticated"
	codeForbiddenTenant  = "forbidden_tenant"
	codeInProgress       = "request_in_progress"
	codeKeyReused        = "idempotency_key_reused"
	codeTooMany          = "too_many_signing_requests"
	codeTooManyReads     = "too_many_requests" // an address past MINTGATE_READ_LIMIT (readLimiter): its reads, replays and refused signs
	codeLimiterDown      = "limiter_unavailable"
	codeLedgerDown       = "grant_ledger_unavailable"
	codePresignDown      = "presign_unavailable"
	codeStorageDown      = "storage_unavailable" // S3 did not answer a multipart call
	codeGrantClosed      = "grant_closed"        // a multipart grant completed, aborted or past its life
	codeSizeMismatch     = "size_mismatch"       // a complete whose parts do not add up to contentLength
	codeNotAbortable     = "not_abortable"       // DELETE of a single PUT's grant, or of a completed upload
	codeNotFound         = "not_found"
	codeMethodNotAllowed = "method_not_allowed"
	codeInternal         = "internal_error"
)

// How long a client should wait after each kind of 503.
const (
	retryLimiter = time.Second
	retryLedger  = 2 * time.Second
	retryPresign = 5 * time.Second
)

// Header names the signer reads or writes.
const (
	hdrRetryAfter      = "Retry-After"
	hdrIdempotencyKey  = "Idempotency-Key"
	hdrReplayed        = "Idempotency-Replayed"
	hdrTenant          = "X-Tenant-ID"
	hdrCFConnectingIP  = "CF-Connecting-IP"
	hdrForwardedFor    = "X-Forwarded-For"
	hdrWWWAuthenticate = "WWW-Authenticate"
)

// apiError is every error a client sees: a status, a stable code, a message
// and, for 429 and 503, when to retry.
type apiError struct {
	Status     int           `json:"-"`
	Code       string        `json:"error"`
	Message    string        `json:"message"`
	Scope      string        `json:"scope,omitempty"`
	RetryAfter int64         `json:"retryAfter,omitempty"`
	retry      time.Duration // sets Retry-After when above zero
	cause      error         // logged, never shown
}

func (e *apiError) Error() string {
	if e.cause != nil {
		return fmt.Sprintf("%d %s: %s: %v", e.Status, e.Code, e.Message, e.cause)
	}
	return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message)
}

func (e *apiError) Unwrap() error { return e.cause }

func newError(status int, code, format string, args ...any) *apiError {
	return &apiError{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// unavailable is a 503 with a Retry-After and the cause kept for the log.
func unavailable(code, msg string, retry time.Duration, cause error) *apiError {
	return &apiError{Status: http.StatusServiceUnavailable, Code: code, Message: msg, retry: retry, cause: cause}
}

// retrySeconds is a Retry-After value: whole seconds, rounded up, at least
// 1 — a float is dropped by clients and 0 invites a retry that must fail.
func retrySeconds(d time.Duration) int64 {
	return max(1, int64(math.Ceil(d.Seconds())))
}

// errorHandler turns every error into the JSON body of docs/api.md, so no
// request ever ends in echo's default page or a stack trace.
func errorHandler(log *slog.Logger) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		ae := toAPIError(err)
		if ae.Status >= 500 {
			log.Error("request failed", "method", c.Request().Method, "path", c.Path(), "status", ae.Status, "code", ae.Code, "err", err)
		}
		h := c.Response().Header()
		if ae.retry > 0 {
			h.Set(hdrRetryAfter, strconv.FormatInt(retrySeconds(ae.retry), 10))
		}
		if ae.Status == http.StatusUnauthorized {
			h.Set(hdrWWWAuthenticate, `Bearer realm="mintgate"`)
		}
		var werr error
		if c.Request().Method == http.MethodHead {
			werr = c.NoContent(ae.Status)
		} else {
			werr = c.JSON(ae.Status, ae)
		}
		if werr != nil {
			log.Warn("writing error response", "err", werr)
		}
	}
}

// toAPIError maps echo's own errors (no route, wrong method, a body over
// the server's limit) onto our codes; anything unknown is an internal error
// without details.
func toAPIError(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		switch he.Code {
		case http.StatusNotFound:
			return newError(http.StatusNotFound, codeNotFound, "no such resource")
		case http.StatusMethodNotAllowed:
			return newError(http.StatusMethodNotAllowed, codeMethodNotAllowed, "method not allowed on this resource")
		case http.StatusRequestEntityTooLarge:
			return newError(http.StatusRequestEntityTooLarge, codeTooLarge, "request body too large")
		case http.StatusUnauthorized:
			return newError(http.StatusUnauthorized, codeUnauthenticated, "authentication required")
		}
		if he.Code >= 400 && he.Code < 500 {
			return newError(he.Code, codeInvalidRequest, "%s", http.StatusText(he.Code))
		}
	}
	return &apiError{Status: http.StatusInternalServerError, Code: codeInternal, Message: "internal error", cause: err}
}
