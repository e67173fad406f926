package main

import (
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/mintgate/mintgate/signer/internal/apierr"
	"github.com/mintgate/mintgate/signer/internal/verdict"
)

const (
	// maxStatusWait bounds ?wait= of GET /uploads/{urlId}.
	maxStatusWait = 30 * time.Second
	// statusRecheck is how often a wait reads the status from Redis again
	// whatever the events say: a missed event (NATS down, a reconnect, a
	// signer that subscribed after the publish) delays a verdict by at most
	// this long, never stalls the wait.
	statusRecheck = 2 * time.Second
	// waitWriteSlack is how long past the wait its answer may take to be
	// written (the server's WriteTimeout would cut a 30 s wait short).
	waitWriteSlack = 10 * time.Second
)

// parseWait reads ?wait=: whole seconds from 0 to 30 (0, or no wait=: no
// wait). present says whether the parameter was there at all (wait= with
// no value is bad input, not "no wait").
func parseWait(v string, present bool) (time.Duration, error) {
	if !present {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || time.Duration(n)*time.Second > maxStatusWait {
		return 0, apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "wait must be whole seconds from 0 to %d", int(maxStatusWait/time.Second))
	}
	return time.Duration(n) * time.Second, nil
}

// undecided says whether status is no verdict yet: a wait goes on.
func undecided(status string) bool { return status == statusPending || status == statusVerifying }

// waitStatus is the long poll of GET /uploads/{urlId}?wait=N for an upload
// with no verdict yet: it holds one of the Hub's places (none free: 429
// too_many_requests, Retry-After 1) and reads the status again when the
// completer's event for urlId arrives, every statusRecheck, at the end of
// the wait and when the signer shuts down, answering at the first verdict
// or at the end. Its Redis reads after the first are not charged to the
// read limit: the request was, once.
//
// A caller gone mid-wait ends it. A SIGTERM answers every wait at once
// with the status then (the client asks again, of another instance or the
// restarted one); a SIGKILL breaks the connection and leaves nothing: a
// wait holds no state outside this process.
func waitStatus(c echo.Context, d deps, tenant, subject, id string, wait time.Duration) error {
	w := d.waits.Enter(verdict.Addr(d.ident.ClientIP().Of(c.Request())), id)
	if w == nil {
		d.metrics.waitsRefused.Inc()
		e := apierr.New(http.StatusTooManyRequests, apierr.CodeTooManyReads, "too many status waits in progress from this address or on this instance; retry after 1 s")
		e.Retry, e.RetryAfter = time.Second, 1
		return e
	}
	defer w.Leave()
	d.metrics.waiting.Inc()
	defer d.metrics.waiting.Dec()
	// The answer may come at the end of a 30 s wait: past the server's
	// WriteTimeout, which counts from the request's headers.
	_ = http.NewResponseController(c.Response()).SetWriteDeadline(time.Now().Add(wait + waitWriteSlack))

	ctx := c.Request().Context()
	end := time.NewTimer(wait)
	defer end.Stop()
	tick := time.NewTicker(statusRecheck)
	defer tick.Stop()
	for {
		last := false
		select {
		case <-ctx.Done():
			return nil // the caller is gone: no one to answer
		case <-w.Wake:
		case <-tick.C:
		case <-end.C:
			last = true
		case <-d.waits.Done():
			last = true
		}
		resp, err := readStatus(ctx, d, tenant, subject, id)
		if err != nil || last || !undecided(resp.Status) {
			return statusAnswer(c, resp, err)
		}
	}
}
