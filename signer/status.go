package main

import (
	"context"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/mintgate/mintgate/shared/quota"
	"github.com/mintgate/mintgate/signer/internal/apierr"
)

// Grant statuses of GET /uploads/{urlId}.
const (
	statusPending   = "pending"   // issued, not yet expired, no upload seen
	statusCompleted = "completed" // the object was created (done marker)
	statusExpired   = "expired"   // expired unused; the refund is due after the grace
	statusRefunded  = "refunded"  // expired unused and its token given back
	statusAborted   = "aborted"   // a multipart upload aborted: by DELETE (its bytes given back), or by the sweeper after its life (its token and bytes)
	statusVerifying = "verifying" // the object arrived; the completer's verification gate has no verdict yet
	statusRejected  = "rejected"  // the gate refused the object (reason); it is moved to quarantine/, its tokens stay spent
)

type statusResponse struct {
	URLID     string     `json:"urlId"`
	Status    string     `json:"status"`
	Reason    string     `json:"reason,omitempty"` // of a rejected upload: size_mismatch, type_mismatch, image_too_large, malware, scan_limit, encoding_not_allowed, metadata_not_allowed
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
	// ChecksumSHA256 is the SHA-256 (base64) the grant's URL was bound to:
	// S3 refused any other bytes, so a completed upload's object has it.
	ChecksumSHA256 string `json:"checksumSHA256,omitempty"`
}

// handleStatus is GET /uploads/{urlId}: the state of one of the caller's
// own grants, read from its done marker, refund marker and grant record in
// one round trip (they share the tenant's hash tag). The grant record names
// the subject that signed it; to anyone else, and when the record is gone,
// the answer is the 404 of an unknown urlId: a urlId that leaked (a log, a
// Referer) tells no one else whether or when it was used. An anonymous
// caller's subject is a daily-salted IP hash, so it sees its grants until
// UTC midnight or until its address changes.
//
// With ?wait=N (seconds, at most maxStatusWait) it is a long poll
// (waitStatus): it answers as soon as the status is a verdict, or after N
// seconds with the status then. The read limit counts it once.
func handleStatus(d deps) echo.HandlerFunc {
	return func(c echo.Context) error {
		who, aerr := d.ident.Authenticate(c.Request())
		if aerr != nil {
			return aerr
		}
		id := c.Param("urlId")
		if u, err := uuid.Parse(id); err != nil || u.String() != id {
			return apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "urlId must be a lower-case UUID")
		}
		wait, err := parseWait(c.QueryParam("wait"), c.QueryParams().Has("wait"))
		if err != nil {
			return err
		}
		resp, err := readStatus(c.Request().Context(), d, who.Tenant, who.Subject, id)
		if err != nil || wait == 0 || !undecided(resp.Status) {
			return statusAnswer(c, resp, err)
		}
		return waitStatus(c, d, who.Tenant, who.Subject, id, wait)
	}
}

// statusAnswer is the answer of a status read: resp, or err.
func statusAnswer(c echo.Context, resp statusResponse, err error) error {
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, resp)
}

// readStatus reads the status of tenant's grant id, as subject sees it: the
// 404 of an unknown urlId when the grant is gone or another subject's.
func readStatus(ctx context.Context, d deps, tenant, subject, id string) (statusResponse, error) {
	st, err := d.gate.Status(ctx, tenant, id)
	if err != nil {
		return statusResponse{}, apierr.Unavailable(apierr.CodeLimiterDown, "grant status is unavailable", apierr.RetryLimiter, err)
	}
	if !st.Found || st.Subject != subject {
		return statusResponse{}, apierr.New(http.StatusNotFound, apierr.CodeNotFound, "no upload of yours with this urlId")
	}
	at := st.ExpiresAt
	resp := statusResponse{URLID: id, ExpiresAt: &at, ChecksumSHA256: st.ChecksumSHA256}
	switch {
	case st.Done:
		resp.Status, resp.Reason = doneStatus(st.DoneValue)
	case st.Refunded && st.Multipart != "":
		resp.Status = statusAborted
	case st.Refunded:
		resp.Status = statusRefunded
	case d.now().Before(at):
		resp.Status = statusPending
	default:
		resp.Status = statusExpired
	}
	return resp, nil
}

// doneStatus is the status of an upload whose done marker holds value: the
// verification gate's verdict. A rejection reads rejected as soon as it is
// decided (the marker's intent): the move to quarantine and the event that
// follow never change it back.
func doneStatus(value string) (status, reason string) {
	switch v, reason := quota.ReadDone(value); v {
	case quota.Unverified:
		return statusVerifying, ""
	case quota.Refusing, quota.Refused:
		return statusRejected, reason
	}
	return statusCompleted, ""
}
