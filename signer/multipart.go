package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/mintgate/mintgate/api"
	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/ledger"
	"github.com/mintgate/mintgate/shared/multipart"
	"github.com/mintgate/mintgate/shared/quota"
	"github.com/mintgate/mintgate/shared/telemetry"
	"github.com/mintgate/mintgate/signer/internal/apierr"
	"github.com/mintgate/mintgate/signer/internal/gate"
	"github.com/mintgate/mintgate/signer/internal/identity"
	"github.com/mintgate/mintgate/signer/internal/presign"
	"github.com/mintgate/mintgate/signer/internal/request"
)

// Multipart grants (docs/api.md, "Multipart uploads"). A multipart grant is
// charged and recorded as a sign is; what its parts, complete and abort
// need is its grant record's multipart field (mpRecord). How each of its
// steps survives a SIGKILL of the signer, the sweeper or the completer at
// any line is written out in docs/production.md ("Multipart uploads");
// the short of it:
//
//   - create: killed before the ledger's ack, the URL never left: the
//     token is spent (as for a sign killed there) and S3 holds an empty
//     upload with no parts, which the bucket's lifecycle rule removes.
//     Killed after it, the sweeper aborts and refunds the grant after its
//     life, whether or not the 201 reached the caller.
//   - parts and list: read only.
//   - complete and abort never run at once: each claims the grant in Redis
//     first (quota.Store.ClaimComplete, ClaimAbort), a complete for a
//     lease, an abort for good. Killed mid-complete, the claim's lease
//     ends and the sweeper's abort learns from S3 whether it completed; a
//     retry of a complete that succeeded answers the same 200 (S3's
//     complete is repeatable, and a gone upload whose object exists is
//     complete). The done marker follows S3's answer, here and in the
//     completer.
//   - abort: the claim, S3's abort, then the refund of its bytes (never
//     its token: abort.go) in one script with the refunded marker, which
//     the sweeper's refund of the same grant meets: once. Killed between
//     the abort and the refund, the sweeper finds the upload gone and its
//     object absent, and refunds it whole, as an unused grant.

// mpRecord is a multipart grant's record, JSON in its grant record
// (quota.Finished.Multipart).
type mpRecord struct {
	UploadID string `json:"uploadId"`
	Size     int64  `json:"size"`
	PartSize int64  `json:"partSize"`
	// Refund is the refund record of the buckets the create charged, at
	// their shapes then (quota.RefundRecord): what an abort gives back.
	Refund string `json:"refund"`
	// ChecksumAlgorithm is the create's checksumAlgorithm ("SHA256": each
	// part is signed with its checksum), or "".
	ChecksumAlgorithm string `json:"checksumAlgorithm,omitempty"`
}

func (r mpRecord) layout() multipart.Layout {
	return multipart.Layout{Size: r.Size, PartSize: r.PartSize}
}

// Request limits of the multipart routes.
const (
	maxPartsPerRequest = 100
	// maxCompleteBytes bounds a complete's body: 10,000 parts of a
	// number and a quoted ETag.
	maxCompleteBytes = 1 << 20
	// storageBudget bounds a complete's or an abort's work, detached from
	// the client: a large complete takes S3 a while, and once S3 answered
	// the done marker or the refund must still be written.
	storageBudget = 2 * time.Minute
)

// multipartFingerprint sets a multipart create's fingerprint apart from a
// sign's of the same body: one Idempotency-Key cannot be replayed as both.
func multipartFingerprint(fp string) string { return "multipart:" + fp }

// multipartPolicy is a multipart create's: a sign's, with
// checksumAlgorithm in place of checksumSHA256.
func multipartPolicy(maxObject int64, contentTypes map[string]bool) request.Policy {
	return request.NewMultipartPolicy(maxObject, contentTypes)
}

// handleMultipartCreate is POST /uploads/multipart: a sign's checks and
// decision (serveCharged), then the S3 upload is created and the grant
// recorded with its upload id before the 201.
func handleMultipartCreate(d deps) echo.HandlerFunc {
	route := charged{
		policy: multipartPolicy(d.cfg.Multipart.MaxObject, d.cfg.ContentTypes), multipart: true,
		issue: d.openMultipart, count: func(outcome string) { d.countMP("create", outcome) }, nothing: "no upload was created",
	}
	return func(c echo.Context) error { return d.serveCharged(c, route) }
}

// openMultipart turns an allowed decision into multipart grant urlID:
// create the S3 upload, record the grant and wait for the ledger's ack,
// then store the grant record and the replay. On any failure before the
// answer the token goes back and the upload is aborted.
func (d deps) openMultipart(ctx context.Context, a attempt, dec gate.Decision, urlID string, now time.Time) ([]byte, *apierr.Error) {
	who, lim := a.who, d.cfg.Multipart
	key := keys.Object(who.Tenant, urlID)
	expiresAt := now.UTC().Truncate(time.Second).Add(lim.TTL.Truncate(time.Second))
	uploadID, err := d.uploads.Create(ctx, key, a.req.ContentType, a.req.ChecksumAlgorithm == request.ChecksumSHA256)
	if err != nil {
		d.refund(ctx, a, dec, urlID)
		d.countMP("create", "storage_unavailable")
		return nil, apierr.Unavailable(apierr.CodeStorageDown, "the upload cannot be created right now; nothing was charged", apierr.RetryPresign, err)
	}
	fail := func(outcome string, e *apierr.Error) ([]byte, *apierr.Error) {
		d.refund(ctx, a, dec, urlID)
		if err := d.uploads.Abort(ctx, key, uploadID); err != nil && !errors.Is(err, multipart.ErrGone) {
			// The bucket's lifecycle rule removes it: no part URL was
			// signed for it, so it holds no part.
			d.log.Warn("aborting the upload of a multipart create that failed", "tenant", who.Tenant, "urlId", urlID, "err", err)
		}
		d.countMP("create", outcome)
		return nil, e
	}
	g := ledger.Grant{
		URLID: urlID, Tenant: who.Tenant, Tier: who.Tier, Subject: who.Subject, Key: key, UploadID: uploadID,
		IssuedAt: now.UTC(), ExpiresAt: expiresAt, Credits: a.credits(), Shadow: dec.Shadow,
		ContentType: a.req.ContentType, ContentLength: a.req.ContentLength, // kept for the upload records
		Filename: a.req.Filename,
		Trace:    telemetry.Traceparent(ctx), // the sweeper's abort and refund join the create's trace
	}
	if err := record(ctx, d.ledger, d.metrics, g); err != nil {
		return fail("ledger_unavailable", apierr.Unavailable(apierr.CodeLedgerDown, "the grant ledger is unavailable; no upload was created and nothing was charged", apierr.RetryLedger, err))
	}
	layout := multipart.Layout{Size: a.req.ContentLength, PartSize: lim.PartSize}
	body, _ := json.Marshal(api.MultipartResponse{ // strings and integers always encode
		URLID: urlID, Key: key, UploadID: uploadID, PartSize: lim.PartSize, PartCount: layout.Count(),
		ExpiresAt: expiresAt, ExpiresIn: int64(lim.TTL / time.Second), ChecksumAlgorithm: a.req.ChecksumAlgorithm,
	})
	rec, _ := json.Marshal(mpRecord{
		UploadID: uploadID, Size: layout.Size, PartSize: layout.PartSize, Refund: quota.RefundRecord(now, a.ask.Buckets),
		ChecksumAlgorithm: a.req.ChecksumAlgorithm,
	})
	f := d.finished(a, urlID, body, expiresAt, lim.TTL)
	f.Multipart = string(rec)
	if err := d.gate.FinishOwn(ctx, a.ask, f); err != nil {
		// Without its grant record no part can be signed: the grant is
		// given back now (its refunded marker stops the sweeper's refund)
		// rather than left to its life, and its upload aborted here. Should
		// that abort fail too, the bucket's lifecycle rule removes the
		// upload: no part URL was ever signed for it. A try given up on
		// may still run in Redis later: finishOwn then writes no replay
		// (the undo freed the key), or the undo deletes the one it wrote,
		// so no retry of the key is answered with this grant.
		d.metrics.finishFailed.Inc()
		return fail("limiter_unavailable", apierr.Unavailable(apierr.CodeLimiterDown, "the rate limiter is unavailable; no upload was created and nothing was charged", apierr.RetryLimiter, err))
	}
	d.count("issued")
	d.countMP("create", "created")
	return body, nil
}

// grantOf is the caller's multipart grant of the request's urlId, as Redis
// knows it: a 404 for anyone else's, an unknown one and a single PUT's
// (they have no parts), unless single is set, when a single PUT's is
// returned with a nil record.
func (d deps) grantOf(c echo.Context, single bool) (identity.Caller, string, quota.Status, *mpRecord, *apierr.Error) {
	who, aerr := d.ident.Authenticate(c.Request())
	if aerr != nil {
		return identity.Caller{}, "", quota.Status{}, nil, aerr
	}
	id := c.Param("urlId")
	if u, err := uuid.Parse(id); err != nil || u.String() != id {
		return identity.Caller{}, "", quota.Status{}, nil, apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "urlId must be a lower-case UUID")
	}
	st, err := d.gate.Status(c.Request().Context(), who.Tenant, id)
	if err != nil {
		return identity.Caller{}, "", quota.Status{}, nil, apierr.Unavailable(apierr.CodeLimiterDown, "the grant is unavailable", apierr.RetryLimiter, err)
	}
	notFound := apierr.New(http.StatusNotFound, apierr.CodeNotFound, "no multipart upload of yours with this urlId")
	if !st.Found || st.Subject != who.Subject {
		return identity.Caller{}, "", quota.Status{}, nil, notFound
	}
	if st.Multipart == "" {
		if single {
			return who, id, st, nil, nil
		}
		return identity.Caller{}, "", quota.Status{}, nil, notFound
	}
	var rec mpRecord
	if err := json.Unmarshal([]byte(st.Multipart), &rec); err != nil || rec.UploadID == "" || rec.layout().Check() != nil {
		return identity.Caller{}, "", quota.Status{}, nil, &apierr.Error{Status: http.StatusInternalServerError, Code: apierr.CodeInternal, Message: "internal error", Cause: errors.New("unreadable multipart grant record")}
	}
	return who, id, st, &rec, nil
}

// closed is the 410 of a grant that takes no more parts.
func closed(why string) *apierr.Error {
	return apierr.New(http.StatusGone, apierr.CodeGrantClosed, "this upload is %s", why)
}

// endedWhy is why a grant whose record st is closed, or "".
func endedWhy(st quota.Status) string {
	switch {
	case st.Done:
		return "completed"
	case st.Refunded:
		return "aborted"
	}
	return ""
}

// handleSignParts is POST /uploads/{urlId}/parts: a presigned PUT of each
// part asked for, each for its exact length, free within the grant's life.
func handleSignParts(d deps) echo.HandlerFunc {
	return func(c echo.Context) error {
		who, id, st, rec, aerr := d.grantOf(c, false)
		if aerr != nil {
			return aerr
		}
		var req api.PartsRequest
		if aerr := request.DecodeJSON(c.Request().Body, maxPartsBodyBytes, &req); aerr != nil {
			return aerr
		}
		l := rec.layout()
		asked, aerr := partsAsked(req, rec.ChecksumAlgorithm != "")
		if aerr == nil {
			aerr = checkPartNumbers(asked.numbers, l.Count())
		}
		if aerr != nil {
			return aerr
		}
		if why := endedWhy(st); why != "" {
			return closed(why)
		}
		now := d.now()
		// Whole seconds (SigV4's), and never past the grant's life: the
		// sweeper aborts the upload after it.
		ttl := min(d.cfg.URLTTL, st.ExpiresAt.Sub(now)).Truncate(time.Second)
		if ttl < time.Second {
			return closed("past its life")
		}
		key := keys.Object(who.Tenant, id)
		out := api.PartsResponse{Parts: make([]api.SignedPart, len(asked.numbers))}
		for i, n := range asked.numbers {
			p, err := d.uploads.SignPart(c.Request().Context(), key, rec.UploadID, n, l.PartLen(n), asked.checksums[i], ttl)
			if err != nil {
				d.countMP("parts", "presign_unavailable")
				return apierr.Unavailable(apierr.CodePresignDown, "part URLs cannot be signed right now", apierr.RetryPresign, err)
			}
			out.Parts[i] = api.SignedPart{PartNumber: n, URL: p.URL, Method: http.MethodPut,
				Headers: api.PartHeaders{ContentLength: strconv.FormatInt(p.ContentLength, 10), ChecksumSHA256: asked.checksums[i]}}
		}
		d.countMP("parts", "signed")
		return c.JSON(http.StatusOK, out)
	}
}

// maxPartsBodyBytes bounds a parts request: 100 parts, each with its
// number and a 44-character checksum.
const maxPartsBodyBytes = 16 << 10

// askedParts are the parts a parts request names, with each one's
// checksum ("" for none).
type askedParts struct {
	numbers   []int
	checksums []string
}

// partsAsked reads req: partNumbers, or parts with their checksums; a
// checksummed grant (checksummed) takes parts, each with a valid
// checksum, and one without takes no checksum.
func partsAsked(req api.PartsRequest, checksummed bool) (askedParts, *apierr.Error) {
	switch {
	case req.PartNumbers != nil && req.Parts != nil:
		return askedParts{}, apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "send partNumbers or parts, not both")
	case req.Parts == nil && checksummed:
		return askedParts{}, apierr.New(http.StatusBadRequest, apierr.CodeChecksumRequired,
			`this upload was created with checksumAlgorithm SHA256: ask for {"parts":[{"partNumber":n,"checksumSHA256":"…"}]}`)
	case req.Parts == nil:
		return askedParts{numbers: req.PartNumbers, checksums: make([]string, len(req.PartNumbers))}, nil
	}
	out := askedParts{numbers: make([]int, len(req.Parts)), checksums: make([]string, len(req.Parts))}
	for i, p := range req.Parts {
		switch {
		case p.ChecksumSHA256 == "" && checksummed:
			return askedParts{}, apierr.New(http.StatusBadRequest, apierr.CodeChecksumRequired, "part %d has no checksumSHA256; this upload was created with checksumAlgorithm SHA256", p.PartNumber)
		case p.ChecksumSHA256 != "" && !checksummed:
			return askedParts{}, apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "this upload was created without checksumAlgorithm: its parts take no checksumSHA256")
		case p.ChecksumSHA256 != "" && !presign.CheckSHA256(p.ChecksumSHA256):
			return askedParts{}, apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "part %d: checksumSHA256 must be the base64 of the part's SHA-256: 44 characters", p.PartNumber)
		}
		out.numbers[i], out.checksums[i] = p.PartNumber, p.ChecksumSHA256
	}
	return out, nil
}

// checkPartNumbers: 1 to maxPartsPerRequest distinct numbers of 1 to count.
func checkPartNumbers(ns []int, count int) *apierr.Error {
	if len(ns) == 0 || len(ns) > maxPartsPerRequest {
		return apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "partNumbers must list 1 to %d part numbers", maxPartsPerRequest)
	}
	seen := make(map[int]bool, len(ns))
	for _, n := range ns {
		if n < 1 || n > count {
			return apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "part number %d is not between 1 and %d, this upload's parts", n, count)
		}
		if seen[n] {
			return apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "part number %d is listed twice", n)
		}
		seen[n] = true
	}
	return nil
}

// handleListParts is GET /uploads/{urlId}/parts: what S3 holds, to resume.
func handleListParts(d deps) echo.HandlerFunc {
	return func(c echo.Context) error {
		who, id, st, rec, aerr := d.grantOf(c, false)
		if aerr != nil {
			return aerr
		}
		if why := endedWhy(st); why != "" {
			return closed(why)
		}
		parts, err := d.uploads.List(c.Request().Context(), keys.Object(who.Tenant, id), rec.UploadID)
		switch {
		case errors.Is(err, multipart.ErrGone):
			return closed("completed or aborted")
		case err != nil:
			d.countMP("list", "storage_unavailable")
			return apierr.Unavailable(apierr.CodeStorageDown, "the upload's parts cannot be listed right now", apierr.RetryPresign, err)
		}
		out := api.PartList{Parts: make([]api.ListedPart, len(parts))}
		for i, p := range parts {
			out.Parts[i] = api.ListedPart{PartNumber: p.Number, Size: p.Size, ETag: p.ETag, ChecksumSHA256: p.ChecksumSHA256}
		}
		d.countMP("list", "listed")
		return c.JSON(http.StatusOK, out)
	}
}

// handleComplete is POST /uploads/{urlId}/complete: the parts named are
// checked against S3's and the declared total, then completed
// create-only; the done marker follows S3's answer.
func handleComplete(d deps) echo.HandlerFunc {
	return func(c echo.Context) error {
		who, id, st, rec, aerr := d.grantOf(c, false)
		if aerr != nil {
			return aerr
		}
		var req api.CompleteRequest
		if aerr := request.DecodeJSON(c.Request().Body, maxCompleteBytes, &req); aerr != nil {
			return aerr
		}
		if len(req.Parts) == 0 || len(req.Parts) > multipart.MaxParts {
			return apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "parts must list 1 to %d parts", multipart.MaxParts)
		}
		key := keys.Object(who.Tenant, id)
		answer := api.CompleteResponse{URLID: id, Key: key, Size: rec.Size}
		switch {
		case st.Done:
			d.countMP("complete", "completed_before")
			return c.JSON(http.StatusOK, answer)
		case st.Refunded:
			return closed("aborted")
		}
		parts := make([]multipart.Part, len(req.Parts))
		for i, p := range req.Parts {
			parts[i] = multipart.Part{Number: p.PartNumber, ETag: p.ETag}
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Request().Context()), storageBudget)
		defer cancel()
		// The claim keeps every abort off the upload while S3 completes
		// it (S3 may let a complete and an abort that run at once both
		// succeed), and refuses once an abort claimed it.
		cl, err := d.gate.ClaimComplete(ctx, who.Tenant, id, quota.CompleteLease)
		switch {
		case err != nil:
			return apierr.Unavailable(apierr.CodeLimiterDown, "the upload cannot be completed right now", apierr.RetryLimiter, err)
		case cl.Claim == quota.ClaimDone:
			d.countMP("complete", "completed_before")
			return c.JSON(http.StatusOK, answer)
		case cl.Claim == quota.ClaimClosed:
			d.countMP("complete", "closed")
			return closed("aborted")
		}
		size, err := d.uploads.Complete(ctx, key, rec.UploadID, rec.Size, parts)
		if err != nil && !errors.Is(err, multipart.ErrUnavailable) {
			// Nothing was created, for good: aborts may claim it now. A
			// failure to reach S3 keeps the claim to its lease: S3 may
			// still complete what it was sent.
			d.release(ctx, who.Tenant, id)
		}
		switch {
		case errors.Is(err, multipart.ErrGone):
			d.countMP("complete", "closed")
			return closed("aborted")
		case errors.Is(err, multipart.ErrSizeMismatch):
			d.countMP("complete", "size_mismatch")
			return apierr.New(http.StatusUnprocessableEntity, apierr.CodeSizeMismatch, "%s; contentLength was %d: nothing was created", detail(err, multipart.ErrSizeMismatch), rec.Size)
		case errors.Is(err, multipart.ErrInvalidPart):
			d.countMP("complete", "invalid_parts")
			return apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "%s", detail(err, multipart.ErrInvalidPart))
		case err != nil:
			d.countMP("complete", "storage_unavailable")
			return apierr.Unavailable(apierr.CodeStorageDown, "the upload cannot be completed right now", apierr.RetryPresign, err)
		}
		d.markCompleted(ctx, who.Tenant, id)
		d.countMP("complete", "completed")
		answer.Size = size
		return c.JSON(http.StatusOK, answer)
	}
}

// release gives up a complete's claim on grant urlID; best effort, the
// claim's lease ends it anyway.
func (d deps) release(ctx context.Context, tenant, urlID string) {
	if err := d.gate.Release(ctx, tenant, urlID); err != nil {
		d.log.Warn("releasing a complete's claim failed; aborts wait for its lease", "tenant", tenant, "urlId", urlID, "err", err)
	}
}

// markCompleted sets the done marker of a grant S3 says is complete, as the
// completer's first step does (quota.DoneUnpublished: the completer still
// publishes its event). Best effort: the completer's ObjectCreated sets it
// too, and a sweeper that finds none learns it from S3.
func (d deps) markCompleted(ctx context.Context, tenant, urlID string) {
	_, err := d.gate.Complete(ctx, d.now(), quota.Completion{Tenant: tenant, URLID: urlID, Value: quota.DoneUnpublished, TTL: quota.MarkerTTL, First: true})
	if err != nil {
		d.log.Warn("marking a completed multipart upload done failed; the completer's event marks it", "tenant", tenant, "urlId", urlID, "err", err)
	}
}

// detail is err's message after sentinel's: what went wrong, without the
// package's prefix.
func detail(err, sentinel error) string {
	msg, s := err.Error(), sentinel.Error()
	if i := strings.Index(msg, s); i >= 0 {
		if rest := strings.TrimPrefix(msg[i+len(s):], ": "); rest != "" {
			return rest
		}
	}
	return s
}

// countMP adds one multipart request of step to its outcome's series.
func (d deps) countMP(step, outcome string) {
	d.metrics.multipart.WithLabelValues(step, outcome).Inc()
}
