package apierr_test

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/mintgate/mintgate/signer/internal/apierr"
)

// Every error a handler returns reaches the client as the JSON of
// docs/api.md with its status and stable code: echo's own errors mapped
// onto ours, anything unknown a 500 that shows no detail.
func TestHandlerAnswersStatusAndCode(t *testing.T) {
	cases := []struct {
		name       string
		err        error
		status     int
		code       string
		retryAfter string
		wwwAuth    bool
	}{
		{"our own error", apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "bad %s", "body"), 400, apierr.CodeInvalidRequest, "", false},
		{"a wrapped one", errors.Join(errors.New("context"), apierr.New(http.StatusForbidden, apierr.CodeForbiddenTenant, "no")), 403, apierr.CodeForbiddenTenant, "", false},
		{"no route", echo.ErrNotFound, 404, apierr.CodeNotFound, "", false},
		{"wrong method", echo.ErrMethodNotAllowed, 405, apierr.CodeMethodNotAllowed, "", false},
		{"body over the server's limit", echo.ErrStatusRequestEntityTooLarge, 413, apierr.CodeTooLarge, "", false},
		{"echo's 401", echo.ErrUnauthorized, 401, apierr.CodeUnauthenticated, "", true},
		{"another echo 4xx", echo.ErrBadRequest, 400, apierr.CodeInvalidRequest, "", false},
		{"echo's 5xx", echo.ErrInternalServerError, 500, apierr.CodeInternal, "", false},
		{"anything else", errors.New("redis: secret detail"), 500, apierr.CodeInternal, "", false},
		{"503 rounds Retry-After up", apierr.Unavailable(apierr.CodeLimiterDown, "down", 1500*time.Millisecond, errors.New("dial")), 503, apierr.CodeLimiterDown, "2", false},
		{"our 401", apierr.New(http.StatusUnauthorized, apierr.CodeUnauthenticated, "who?"), 401, apierr.CodeUnauthenticated, "", true},
	}
	e := echo.New()
	e.HTTPErrorHandler = apierr.Handler(slog.New(slog.NewTextHandler(io.Discard, nil)))
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e.GET("/x", func(echo.Context) error { return tc.err })
			rec := httptest.NewRecorder()
			e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/x", nil))
			if rec.Code != tc.status {
				t.Errorf("status %d, want %d", rec.Code, tc.status)
			}
			var body struct{ Error, Message string }
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatalf("not JSON: %q", rec.Body)
			}
			if body.Error != tc.code || body.Message == "" {
				t.Errorf("body %q, want code %s and a message", rec.Body, tc.code)
			}
			if tc.status == 500 && body.Message != "internal error" {
				t.Errorf("a 500 shows %q", body.Message)
			}
			if got := rec.Header().Get(apierr.HeaderRetryAfter); got != tc.retryAfter {
				t.Errorf("Retry-After %q, want %q", got, tc.retryAfter)
			}
			if got := rec.Header().Get(apierr.HeaderWWWAuthenticate) != ""; got != tc.wwwAuth {
				t.Errorf("WWW-Authenticate set %v, want %v", got, tc.wwwAuth)
			}
		})
	}
}

// A HEAD gets the status without a body.
func TestHandlerHeadHasNoBody(t *testing.T) {
	e := echo.New()
	e.HTTPErrorHandler = apierr.Handler(slog.New(slog.NewTextHandler(io.Discard, nil)))
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(http.MethodHead, "/nowhere", nil))
	if rec.Code != http.StatusNotFound || rec.Body.Len() != 0 {
		t.Errorf("HEAD: %d %q", rec.Code, rec.Body)
	}
}

// Retry-After is whole seconds, rounded up, never below 1.
func TestRetrySeconds(t *testing.T) {
	for d, want := range map[time.Duration]int64{
		0:                        1,
		-time.Second:             1,
		time.Millisecond:         1,
		time.Second:              1,
		1001 * time.Millisecond:  2,
		59500 * time.Millisecond: 60,
	} {
		if got := apierr.RetrySeconds(d); got != want {
			t.Errorf("RetrySeconds(%v) = %d, want %d", d, got, want)
		}
	}
}
