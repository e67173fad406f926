package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/quota"
	"github.com/mintgate/mintgate/shared/tiers"
	"github.com/mintgate/mintgate/signer/internal/apierr"
	"github.com/mintgate/mintgate/signer/internal/disposition"
	"github.com/mintgate/mintgate/signer/internal/gate"
	"github.com/mintgate/mintgate/signer/internal/identity"
	"github.com/mintgate/mintgate/signer/internal/presign"
	"github.com/mintgate/mintgate/signer/internal/ratelimit"
	"github.com/mintgate/mintgate/signer/internal/request"
)

// downloadResponse is the 201 of POST /uploads/{urlId}/download.
type downloadResponse struct {
	URL       string    `json:"url"`
	Method    string    `json:"method"`
	ExpiresAt time.Time `json:"expiresAt"`
	ExpiresIn int64     `json:"expiresIn"`
}

// uploadLookup says what is known of one upload of a tenant: its grant
// record (who signed it, for what type, size and filename) and how it
// ended. Without upload records it is Redis (gate.Gate.Status: the done
// marker, the refunded marker and the grant record, which lives
// 2 × (MINTGATE_URL_TTL + the sweep grace) from the sign; after that an
// upload reads as unknown). Records in PostgreSQL can answer the same
// question for as long as they keep their rows.
type uploadLookup interface {
	Status(ctx context.Context, tenant, urlID string) (quota.Status, error)
}

// downloadBudget bounds the work after the decision, as signBudget a sign's.
const downloadBudget = 5 * time.Second

// handleDownload is POST /uploads/{urlId}/download (docs/api.md): a
// presigned GET of a completed upload, for its own caller (or any caller
// of its tenant with "downloads":"tenant"), rate-limited by the download
// tiers. It spends from buckets and issues no grant that could be unused:
// a download grant is never refunded. A SIGKILL of the signer at any line
// leaves at most a spent token (the caller retries) and an in-flight
// idempotency mark that expires in gate.InFlightTTL; nothing to account.
func handleDownload(d deps) echo.HandlerFunc {
	var lookup uploadLookup = d.gate
	return func(c echo.Context) error {
		r := c.Request()
		who, aerr := d.ident.Authenticate(r)
		if aerr != nil {
			return aerr
		}
		count := func(outcome string) { d.metrics.downloads.WithLabelValues(who.Tenant, outcome).Inc() }
		if aerr := d.reads.Admit(r, who); aerr != nil {
			count("too_many_requests")
			return aerr
		}
		id, key := c.Param("urlId"), r.Header.Get(request.HeaderIdempotencyKey)
		if u, err := uuid.Parse(id); err != nil || u.String() != id {
			count("rejected")
			return apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "urlId must be a lower-case UUID")
		}
		if key != "" && !request.ValidKey(key) {
			count("rejected")
			return apierr.New(http.StatusBadRequest, apierr.CodeKeyInvalid, "%s must be 1 to %d visible ASCII characters", request.HeaderIdempotencyKey, request.MaxKeyLen)
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), downloadBudget)
		defer cancel()
		st, err := lookup.Status(ctx, who.Tenant, id)
		if err != nil {
			count("limiter_unavailable")
			return apierr.Unavailable(apierr.CodeLimiterDown, "upload status is unavailable; no URL was issued", apierr.RetryLimiter, err)
		}
		if outcome, aerr := downloadable(st, who, d.tiers().DownloadsByTenant(who.Tenant), d.now()); aerr != nil {
			d.reads.Charge(r, who) // it cost Redis and spent no token
			count(outcome)
			return aerr
		}
		return d.serveDownload(ctx, c, who, id, key, st, count)
	}
}

// downloadable is nil when who may have a download grant of the upload st
// says: a completed upload of who's (or of its tenant, tenantWide). Else
// the outcome counted and the answer.
func downloadable(st quota.Status, who identity.Caller, tenantWide bool, now time.Time) (string, *apierr.Error) {
	if !st.Found || (st.Subject != who.Subject && !tenantWide) || (!st.Done && st.Refunded) {
		// Refunded, aborted, unknown, another tenant's or another caller's:
		// one answer, so that a leaked urlId tells no one anything.
		return "not_found", apierr.New(http.StatusNotFound, apierr.CodeNotFound, "no completed upload of yours with this urlId")
	}
	status := statusPending
	if st.Done {
		status, _ = doneStatus(st.DoneValue)
	} else if !now.Before(st.ExpiresAt) {
		status = statusExpired
	}
	switch status {
	case statusCompleted:
		return "", nil
	case statusRejected:
		return "upload_rejected", apierr.New(http.StatusGone, apierr.CodeUploadRejected, "this upload was rejected by verification; it is never served")
	case statusExpired:
		return "not_found", apierr.New(http.StatusNotFound, apierr.CodeNotFound, "no completed upload of yours with this urlId")
	}
	return "not_completed", apierr.New(http.StatusConflict, apierr.CodeNotCompleted, "this upload is %s: it can be downloaded once it is completed", status)
}

// serveDownload decides the download grant in the sign's one script
// (idempotency, every bucket all or none) and answers it.
func (d deps) serveDownload(ctx context.Context, c echo.Context, who identity.Caller, id, key string, st quota.Status, count func(string)) error {
	r, now := c.Request(), d.now()
	tagged := d.tiers().DownloadBuckets(who.Tenant, who.Subject, st.ContentLength)
	var hard []bucket.Bucket
	if capN := d.cfg.shadowCap(who.Tenant); capN > 0 {
		// Shadow mode measures the download tiers too, but is no open
		// mint: a ceiling of MINTGATE_SHADOW_CAP times the caller's tier.
		ceiling := bucket.Bucket{Key: keys.DownloadShadowBucket(who.Tenant, who.Subject), Limit: shadowLimit(tagged[0].Limit, capN)}
		hard = []bucket.Bucket{ceiling}
		tagged = append(tagged, tiers.RoleBucket{Role: tiers.RoleDownloadShadow, Bucket: ceiling})
	}
	buckets := tiers.Plain(tagged)
	ask := downloadAsk(who, id, key, buckets)
	dec, err := d.gate.Decide(ctx, ask, buckets, now)
	shadowed := false
	if err == nil && dec.Outcome == quota.Denied && hard != nil && !dec.Degraded {
		d.metrics.shadowDenied.WithLabelValues(ratelimit.Scope(who, buckets, dec.Result)).Inc()
		shadowed = true
		hardAsk := ask
		hardAsk.Buckets = hard
		dec, err = d.gate.Decide(ctx, hardAsk, hard, now)
	}
	if err != nil {
		count("limiter_unavailable")
		return apierr.Unavailable(apierr.CodeLimiterDown, "the rate limiter is unavailable; no URL was issued", apierr.RetryLimiter, err)
	}
	if done, err := d.refuseDownload(c, who, buckets, dec, count); done {
		d.reads.Charge(r, who)
		return err
	}
	body, aerr := d.mintDownload(ctx, who, id, st, now)
	if aerr != nil {
		count("presign_unavailable")
		return aerr
	}
	if key != "" && !dec.Degraded {
		if err := d.gate.Keep(ctx, ask, body, d.cfg.DownloadTTL); err != nil {
			// The URL is paid for and is answered; only its replay is lost.
			d.log.Error("storing a download grant's replay failed; answering it anyway", "tenant", who.Tenant, "urlId", id, "err", err)
		}
	}
	switch {
	case shadowed:
		count("shadow_limited")
	case dec.Degraded:
		count("issued_degraded")
	default:
		count("issued")
	}
	ratelimit.SetHeaders(c.Response().Header(), d.cfg.RateLimitHeader, who, dec.Result, buckets)
	return c.JSONBlob(http.StatusCreated, body)
}

// downloadAsk is the script's view of a download grant of upload id: its
// idempotency record (the key's, or a record of its own nonce that only
// marks it in flight), its fingerprint (caller and upload) and buckets.
func downloadAsk(who identity.Caller, id, key string, buckets []bucket.Bucket) quota.Ask {
	nonce := uuid.NewString()
	idem := keys.DownloadOnce(who.Tenant, nonce)
	if key != "" {
		idem = keys.DownloadIdempotency(who.Tenant, who.Subject, key)
	}
	h := sha256.Sum256([]byte("download\x00" + who.Tenant + "\x00" + who.Subject + "\x00" + id))
	return quota.Ask{Tenant: who.Tenant, Idem: idem, Fingerprint: hex.EncodeToString(h[:]), Nonce: nonce, Buckets: buckets}
}

// refuseDownload answers the decisions that issue no URL: a replay (free,
// 200 with the first answer), a key reused or in flight, a denial (429
// too_many_download_requests). It reports false for an allowed decision.
func (d deps) refuseDownload(c echo.Context, who identity.Caller, buckets []bucket.Bucket, dec gate.Decision, count func(string)) (bool, error) {
	switch dec.Outcome {
	case quota.Allowed:
		return false, nil
	case quota.Replay:
		count("replayed")
		c.Response().Header().Set(request.HeaderReplayed, "true")
		return true, c.JSONBlob(http.StatusOK, dec.Body)
	case quota.Reused, quota.InProgress:
		k := keyRefusals[dec.Outcome]
		count(k.count)
		return true, apierr.New(k.status, k.code, k.message, request.HeaderIdempotencyKey)
	}
	count("rate_limited")
	ratelimit.SetHeaders(c.Response().Header(), d.cfg.RateLimitHeader, who, dec.Result, buckets)
	e := ratelimit.TooMany(who, buckets, dec.Result)
	e.Code = apierr.CodeTooManyDownloads
	e.Message = "too many download URLs asked for; retry later"
	if e.Scope == ratelimit.ScopeTenant {
		e.Message = "your organisation has asked for too many download URLs; retry later"
	}
	return true, e
}

// mintDownload signs the GET of upload id's object and writes the 201
// body: the verified type, the disposition of its filename, private.
func (d deps) mintDownload(ctx context.Context, who identity.Caller, id string, st quota.Status, now time.Time) ([]byte, *apierr.Error) {
	ct := st.ContentType
	if ct == "" {
		ct = "application/octet-stream" // a grant record from before the type was kept
	}
	ttl := d.cfg.DownloadTTL.Truncate(time.Second)
	url, err := d.presign.Get(ctx, keys.Object(who.Tenant, id), presign.Read{
		ContentType: ct, ContentDisposition: disposition.Of(ct, st.Filename, id), CacheControl: "private",
	}, ttl, now)
	if err != nil {
		return nil, apierr.Unavailable(apierr.CodePresignDown, "download URLs cannot be signed right now", apierr.RetryPresign, err)
	}
	body, _ := json.Marshal(downloadResponse{ // strings, a time and an integer always encode
		URL: url, Method: http.MethodGet, ExpiresAt: now.UTC().Truncate(time.Second).Add(ttl), ExpiresIn: int64(ttl / time.Second),
	})
	return body, nil
}
