// Package apierr is the one form of every error a client of the signer
// sees (docs/api.md): a status, a stable code, a message and, for 429 and
// 503, when to retry, written as JSON by Handler. Every room of the signer
// answers a bad request with an *Error; only Handler turns one into bytes.
package apierr

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

// The stable error codes of docs/api.md, and the few the signer adds
// (not_found, method_not_allowed, presign_unavailable, internal_error), and
// the multipart routes' (storage_unavailable, grant_closed, size_mismatch,
// not_abortable).
const (
	CodeKeyRequired      = "idempotency_key_required"
	CodeKeyInvalid       = "idempotency_key_invalid"
	CodeInvalidRequest   = "invalid_request"
	CodeUnsupportedType  = "unsupported_content_type"
	CodeTooLarge         = "content_too_large"
	CodeUnauthenticated  = "unauthenticated"
	CodeForbiddenTenant  = "forbidden_tenant"
	CodeInProgress       = "request_in_progress"
	CodeKeyReused        = "idempotency_key_reused"
	CodeTooMany          = "too_many_signing_requests"
	CodeTooManyReads     = "too_many_requests" // an address past MINTGATE_READ_LIMIT: its reads, replays and refused signs
	CodeLimiterDown      = "limiter_unavailable"
	CodeLedgerDown       = "grant_ledger_unavailable"
	CodePresignDown      = "presign_unavailable"
	CodeStorageDown      = "storage_unavailable" // S3 did not answer a multipart call
	CodeGrantClosed      = "grant_closed"        // a multipart grant completed, aborted or past its life
	CodeSizeMismatch     = "size_mismatch"       // a complete whose parts do not add up to contentLength
	CodeChecksumRequired = "checksum_required"   // a sign or create without a checksum where one is required, a part without its checksumSHA256
	CodeNotAbortable     = "not_abortable"       // DELETE of a single PUT's grant, or of a completed upload
	CodeNotFound         = "not_found"
	CodeRecordsOff       = "records_off"                // the upload records' routes without MINTGATE_POSTGRES_URL
	CodeRecordsDown      = "records_unavailable"        // PostgreSQL did not answer a records route
	CodeNotCompleted     = "not_completed"              // a download of an upload still pending or verifying
	CodeUploadRejected   = "upload_rejected"            // a download of an upload the verification gate rejected
	CodeTooManyDownloads = "too_many_download_requests" // a download grant refused by its caller's or tenant's bucket
	CodeMethodNotAllowed = "method_not_allowed"
	CodeInternal         = "internal_error"
)

// How long a client should wait after each kind of 503.
const (
	RetryLimiter = time.Second
	RetryLedger  = 2 * time.Second
	RetryPresign = 5 * time.Second
	RetryRecords = 5 * time.Second
)

// Header names Handler writes.
const (
	HeaderRetryAfter      = "Retry-After"
	HeaderWWWAuthenticate = "WWW-Authenticate"
)

// Error is every error a client sees: a status, a stable code, a message
// and, for 429 and 503, when to retry.
type Error struct {
	Status     int           `json:"-"`
	Code       string        `json:"error"`
	Message    string        `json:"message"`
	Scope      string        `json:"scope,omitempty"`
	RetryAfter int64         `json:"retryAfter,omitempty"`
	Retry      time.Duration `json:"-"` // sets Retry-After when above zero
	Cause      error         `json:"-"` // logged, never shown
}

// Error is the status, code and message, and the cause when there is one.
func (e *Error) Error() string {
	if e.Cause != nil {
		return fmt.Sprintf("%d %s: %s: %v", e.Status, e.Code, e.Message, e.Cause)
	}
	return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message)
}

// Unwrap is the cause.
func (e *Error) Unwrap() error { return e.Cause }

// New is an error of status and code, its message formatted.
func New(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// Unavailable is a 503 with a Retry-After and the cause kept for the log.
func Unavailable(code, msg string, retry time.Duration, cause error) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Code: code, Message: msg, Retry: retry, Cause: cause}
}

// Internal is the 500 of an error no client can act on: cause is logged,
// never shown.
func Internal(cause error) *Error {
	return &Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: "internal error", Cause: cause}
}

// RetrySeconds is a Retry-After value: whole seconds, rounded up, at least
// 1 — a float is dropped by clients and 0 invites a retry that must fail.
func RetrySeconds(d time.Duration) int64 {
	return max(1, int64(math.Ceil(d.Seconds())))
}

// Handler turns every error into the JSON body of docs/api.md, so no
// request ever ends in echo's default page or a stack trace.
func Handler(log *slog.Logger) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		ae := From(err)
		if ae.Status >= 500 {
			log.Error("request failed", "method", c.Request().Method, "path", c.Path(), "status", ae.Status, "code", ae.Code, "err", err)
		}
		h := c.Response().Header()
		if ae.Retry > 0 {
			h.Set(HeaderRetryAfter, strconv.FormatInt(RetrySeconds(ae.Retry), 10))
		}
		if ae.Status == http.StatusUnauthorized {
			h.Set(HeaderWWWAuthenticate, `Bearer realm="mintgate"`)
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

// From maps echo's own errors (no route, wrong method, a body over the
// server's limit) onto our codes; anything unknown is an internal error
// without details.
func From(err error) *Error {
	var ae *Error
	if errors.As(err, &ae) {
		return ae
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		switch he.Code {
		case http.StatusNotFound:
			return New(http.StatusNotFound, CodeNotFound, "no such resource")
		case http.StatusMethodNotAllowed:
			return New(http.StatusMethodNotAllowed, CodeMethodNotAllowed, "method not allowed on this resource")
		case http.StatusRequestEntityTooLarge:
			return New(http.StatusRequestEntityTooLarge, CodeTooLarge, "request body too large")
		case http.StatusUnauthorized:
			return New(http.StatusUnauthorized, CodeUnauthenticated, "authentication required")
		}
		if he.Code >= 400 && he.Code < 500 {
			return New(he.Code, CodeInvalidRequest, "%s", http.StatusText(he.Code))
		}
	}
	return Internal(err)
}
