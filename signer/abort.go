package main

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/multipart"
	"github.com/mintgate/mintgate/shared/quota"
	"github.com/mintgate/mintgate/signer/internal/apierr"
)

// handleAbort is DELETE /uploads/{urlId}: a multipart grant's upload is
// aborted in S3, then its bytes go back at once, once, and its token does
// not (abortCredit). A single PUT's grant is never refunded early: its URL
// cannot be revoked.
func handleAbort(d deps) echo.HandlerFunc {
	return func(c echo.Context) error {
		who, id, st, rec, aerr := d.grantOf(c, true)
		switch {
		case aerr != nil:
			return aerr
		case rec == nil:
			return apierr.New(http.StatusConflict, apierr.CodeNotAbortable, "a single-PUT upload cannot be aborted: its presigned URL cannot be revoked, so its token comes back only after it expires unused")
		case st.Done:
			return apierr.New(http.StatusConflict, apierr.CodeNotAbortable, "this upload is complete")
		case st.Refunded:
			// Refunded only once its upload was ended (this route, the
			// sweeper), or at its create, which then answered no upload.
			d.countMP("abort", "already")
			return c.NoContent(http.StatusNoContent)
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Request().Context()), storageBudget)
		defer cancel()
		cl, err := multipart.NewCloser(d.gate, d.uploads, d.now).End(ctx, who.Tenant, id, rec.UploadID)
		switch {
		case errors.Is(err, multipart.ErrUnmarked):
			d.log.Warn("marking a completed multipart upload done failed; the completer's event marks it", "tenant", who.Tenant, "urlId", id, "err", err)
			return apierr.New(http.StatusConflict, apierr.CodeNotAbortable, "this upload is complete")
		case errors.Is(err, multipart.ErrClaim):
			return apierr.Unavailable(apierr.CodeLimiterDown, "the upload cannot be aborted right now", apierr.RetryLimiter, err)
		case err != nil:
			d.countMP("abort", "storage_unavailable")
			return apierr.Unavailable(apierr.CodeStorageDown, "the upload cannot be aborted right now", apierr.RetryPresign, err)
		case cl.Closed == multipart.Finished:
			return apierr.New(http.StatusConflict, apierr.CodeNotAbortable, "this upload is complete")
		case cl.Closed == multipart.GivenBack:
			d.countMP("abort", "already")
			return c.NoContent(http.StatusNoContent)
		case cl.Closed == multipart.Busy:
			e := apierr.New(http.StatusConflict, apierr.CodeInProgress, "a complete of this upload is in progress; retry once it answered")
			e.Retry = max(cl.Wait, time.Second)
			return e
		}
		out, aerr := d.abortRefund(ctx, who.Tenant, id, rec)
		if aerr != nil {
			return aerr
		}
		if out == quota.Done {
			return apierr.New(http.StatusConflict, apierr.CodeNotAbortable, "this upload is complete")
		}
		d.aborted(ctx, who.Tenant, id, keys.Object(who.Tenant, id))
		return c.NoContent(http.StatusNoContent)
	}
}

// abortRefund gives back what a DELETE owes grant urlID, whose upload S3
// has just aborted (no complete can succeed from here on): its bytes, once,
// in the one script that writes its refunded marker, which the sweeper's
// refund of the same grant at its due time then meets ('already').
//
// Its token is not given back: a create is a create, and its token comes
// back by the bucket's own refill, as a sign's does, so that aborting
// never multiplies creates (SPEC §9). Were it given back, a caller could
// create and DELETE without end on a bucket that never empties.
//
// Killed (or the rate limiter down) between S3's abort and this refund, no
// marker is written: the sweeper, after the grant's life and grace, finds
// the upload gone and its object absent and refunds it whole, token and
// bytes, as it refunds a grant never DELETEd. That takes no caller's
// doing, the token then comes back no sooner than an unused grant's would,
// and a retried DELETE in the meantime writes the marker as here.
func (d deps) abortRefund(ctx context.Context, tenant, urlID string, rec *mpRecord) (quota.RefundOutcome, *apierr.Error) {
	charged, err := quota.ParseRefundRecord(tenant, rec.Refund)
	if err != nil {
		return "", &apierr.Error{Status: http.StatusInternalServerError, Code: apierr.CodeInternal, Message: "internal error", Cause: err}
	}
	outs, err := d.gate.Refund(ctx, d.now(), []quota.Due{{Tenant: tenant, URLID: urlID, Buckets: abortCredit(charged)}})
	if err != nil {
		// Aborted in S3: the sweeper refunds it after its life.
		d.countMP("abort", "limiter_unavailable")
		return "", apierr.Unavailable(apierr.CodeLimiterDown, "the upload is aborted, but the rate limiter is unavailable: retry the DELETE to get its bytes back now, or its bytes and token come back after its life, as an unused grant's", apierr.RetryLimiter, err)
	}
	if outs[0] != quota.Done {
		d.countMP("abort", string(outs[0]))
	}
	return outs[0], nil
}

// abortCredit is what a DELETE gives back of the buckets a create charged:
// its buckets of bytes (Units > 0), each with the units and shape it was
// charged at, and none of its buckets of requests. A grant that charged no
// bytes gets none: its refund only writes the refunded marker.
func abortCredit(charged []bucket.Bucket) []bucket.Bucket {
	var bs []bucket.Bucket
	for _, b := range charged {
		if b.Units > 0 {
			bs = append(bs, b)
		}
	}
	return bs
}
