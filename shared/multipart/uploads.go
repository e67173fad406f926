package multipart

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// The errors of Uploads. Every other failure wraps ErrUnavailable: S3 did
// not answer, or answered something a retry may change.
var (
	// ErrGone: the upload does not exist (any more): it was completed or
	// aborted. End and Complete tell which; the other calls only report it.
	ErrGone = errors.New("multipart: the upload is gone (completed or aborted)")
	// ErrSizeMismatch: the parts named do not add up to the declared size.
	ErrSizeMismatch = errors.New("multipart: the parts do not add up to the declared size")
	// ErrInvalidPart: a part named is not uploaded, its ETag differs, or
	// the list is out of order.
	ErrInvalidPart = errors.New("multipart: invalid part list")
	// ErrUnavailable: S3 could not be asked.
	ErrUnavailable = errors.New("multipart: s3 unavailable")
)

// Uploads runs the multipart calls on one bucket.
type Uploads struct {
	s3 *s3.Client // the services' own calls: MINTGATE_S3_INTERNAL_ENDPOINT, else MINTGATE_S3_ENDPOINT
	// presign signs the part URLs browsers PUT to: they name
	// MINTGATE_S3_ENDPOINT, whatever address the services' calls take.
	presign *s3.PresignClient
	bucket  string
}

// Option configures New.
type Option func(*Uploads)

// PartURLsFor has SignPart sign for public's endpoint, where the uploaders
// reach S3 (MINTGATE_S3_ENDPOINT), while every call goes through New's
// client (MINTGATE_S3_INTERNAL_ENDPOINT when set). Without it part URLs
// name New's client's endpoint, which is right only when the two are one.
func PartURLsFor(public *s3.Client) Option {
	return func(u *Uploads) { u.presign = s3.NewPresignClient(public) }
}

// New is Uploads on bucket, its calls through client.
func New(client *s3.Client, bucket string, opts ...Option) *Uploads {
	u := &Uploads{s3: client, presign: s3.NewPresignClient(client), bucket: bucket}
	for _, o := range opts {
		o(u)
	}
	return u
}

// Part is one uploaded part as S3 lists it, or as a complete names it
// (Size unused).
type Part struct {
	Number int    `json:"partNumber"`
	Size   int64  `json:"size"`
	ETag   string `json:"etag"`
	// ChecksumSHA256 is the part's SHA-256 (base64) as S3 holds it, for
	// an upload created with SHA256 checksums.
	ChecksumSHA256 string `json:"checksumSHA256,omitempty"`
}

// Create starts a multipart upload of key and returns its upload id. With
// sha256 set every part must carry its SHA-256 (SignPart signs it) and S3
// refuses a part of other bytes.
func (u *Uploads) Create(ctx context.Context, key, contentType string, sha256 bool) (string, error) {
	in := &s3.CreateMultipartUploadInput{
		Bucket: aws.String(u.bucket), Key: aws.String(key), ContentType: aws.String(contentType),
	}
	if sha256 {
		in.ChecksumAlgorithm = types.ChecksumAlgorithmSha256
	}
	out, err := u.s3.CreateMultipartUpload(ctx, in)
	if err != nil {
		return "", classify("create multipart upload", err)
	}
	if out.UploadId == nil || *out.UploadId == "" {
		return "", fmt.Errorf("%w: create multipart upload of %s: no upload id", ErrUnavailable, key)
	}
	return *out.UploadId, nil
}

// SignedPart is a presigned UploadPart.
type SignedPart struct {
	URL           string
	ContentLength int64
}

// SignPart presigns the PUT of part n of upload id of key, for exactly
// size bytes (Content-Length is signed: S3 refuses any other body
// length), valid for ttl, on the public endpoint (PartURLsFor). With
// checksum (the base64 SHA-256 of the part) x-amz-checksum-sha256 is a
// signed header too: S3 refuses other bytes. It is local work: no request
// reaches S3.
func (u *Uploads) SignPart(ctx context.Context, key, id string, n int, size int64, checksum string, ttl time.Duration) (SignedPart, error) {
	in := &s3.UploadPartInput{
		Bucket: aws.String(u.bucket), Key: aws.String(key), UploadId: aws.String(id),
		PartNumber: aws.Int32(int32(n)), ContentLength: aws.Int64(size),
	}
	if checksum != "" {
		in.ChecksumSHA256 = aws.String(checksum)
	}
	req, err := u.presign.PresignUploadPart(ctx, in, s3.WithPresignExpires(ttl))
	if err != nil {
		return SignedPart{}, fmt.Errorf("%w: presign part %d of %s: %w", ErrUnavailable, n, key, err)
	}
	return SignedPart{URL: req.URL, ContentLength: size}, nil
}

// List is every part S3 holds of upload id of key, in part order.
func (u *Uploads) List(ctx context.Context, key, id string) ([]Part, error) {
	var parts []Part
	p := s3.NewListPartsPaginator(u.s3, &s3.ListPartsInput{Bucket: aws.String(u.bucket), Key: aws.String(key), UploadId: aws.String(id)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, classify("list parts", err)
		}
		for _, sp := range page.Parts {
			parts = append(parts, Part{Number: int(aws.ToInt32(sp.PartNumber)), Size: aws.ToInt64(sp.Size), ETag: aws.ToString(sp.ETag), ChecksumSHA256: aws.ToString(sp.ChecksumSHA256)})
		}
	}
	slices.SortFunc(parts, func(a, b Part) int { return a.Number - b.Number })
	return parts, nil
}

// Complete completes upload id of key from parts (ascending, each named by
// number and ETag), create-only (If-None-Match: *) and only if they add up
// to size (checked against ListParts before, and by S3 through
// x-amz-mp-object-size), and returns the object's size. A complete that
// already succeeded — an earlier call whose answer was lost — answers
// the same. ErrGone: the upload was aborted; ErrSizeMismatch and
// ErrInvalidPart: nothing was created, the upload stays open.
func (u *Uploads) Complete(ctx context.Context, key, id string, size int64, parts []Part) (int64, error) {
	listed, err := u.List(ctx, key, id)
	if errors.Is(err, ErrGone) {
		return u.completedBefore(ctx, key)
	}
	if err != nil {
		return 0, err
	}
	done, err := checkParts(listed, parts, size)
	if err != nil {
		return 0, u.unlessGone(ctx, key, id, err)
	}
	_, err = u.s3.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
		Bucket: aws.String(u.bucket), Key: aws.String(key), UploadId: aws.String(id),
		MultipartUpload: &types.CompletedMultipartUpload{Parts: done},
		IfNoneMatch:     aws.String("*"),
		MpuObjectSize:   aws.Int64(size),
	})
	switch err = classify("complete multipart upload", err); {
	case err == nil:
		return size, nil
	case errors.Is(err, ErrGone), errors.Is(err, errExists):
		// Completed by an earlier call (S3 has no upload any more, or
		// the key exists: a urlId's key is written by its upload alone),
		// or aborted.
		return u.completedBefore(ctx, key)
	case errors.Is(err, ErrInvalidPart), errors.Is(err, ErrSizeMismatch):
		return 0, u.unlessGone(ctx, key, id, err)
	}
	return 0, err
}

// unlessGone is err, a part list found wrong, unless the upload is gone by
// now: an abort racing this complete may remove its parts before the
// upload itself, so that the list looked short. Then it is the abort's
// ErrGone (or, should the object exist, nil would be wrong: it cannot,
// as this complete did not succeed and no other completes a urlId's key).
func (u *Uploads) unlessGone(ctx context.Context, key, id string, err error) error {
	if _, lerr := u.List(ctx, key, id); errors.Is(lerr, ErrGone) {
		return ErrGone
	}
	return err
}

// checkParts is what to complete from parts, which must be ascending and
// each be in listed with its ETag, and add up to size.
func checkParts(listed, parts []Part, size int64) ([]types.CompletedPart, error) {
	byNumber := make(map[int]Part, len(listed))
	for _, p := range listed {
		byNumber[p.Number] = p
	}
	var total int64
	out := make([]types.CompletedPart, len(parts))
	for i, p := range parts {
		if i > 0 && p.Number <= parts[i-1].Number {
			return nil, fmt.Errorf("%w: part numbers must ascend (part %d after %d)", ErrInvalidPart, p.Number, parts[i-1].Number)
		}
		got, ok := byNumber[p.Number]
		if !ok {
			return nil, fmt.Errorf("%w: part %d is not uploaded", ErrInvalidPart, p.Number)
		}
		if unquote(got.ETag) != unquote(p.ETag) {
			return nil, fmt.Errorf("%w: part %d has another ETag than %s", ErrInvalidPart, p.Number, p.ETag)
		}
		total += got.Size
		out[i] = types.CompletedPart{PartNumber: aws.Int32(int32(p.Number)), ETag: aws.String(got.ETag)}
		if got.ChecksumSHA256 != "" {
			// A checksummed upload's complete names each part's, as S3 holds it.
			out[i].ChecksumSHA256 = aws.String(got.ChecksumSHA256)
		}
	}
	if total != size {
		return nil, fmt.Errorf("%w: the parts hold %d bytes, %d were declared", ErrSizeMismatch, total, size)
	}
	return out, nil
}

func unquote(etag string) string { return strings.Trim(etag, `"`) }

// completedBefore tells a completed upload of key (its object exists: its
// size) from an aborted one (ErrGone).
func (u *Uploads) completedBefore(ctx context.Context, key string) (int64, error) {
	size, ok, err := u.Head(ctx, key)
	switch {
	case err != nil:
		return 0, err
	case !ok:
		return 0, ErrGone
	}
	return size, nil
}

// Head reports whether the object key exists, and its size.
func (u *Uploads) Head(ctx context.Context, key string) (int64, bool, error) {
	out, err := u.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(u.bucket), Key: aws.String(key)})
	if err != nil {
		if errors.Is(classify("head object", err), errMissing) {
			return 0, false, nil
		}
		return 0, false, classify("head object", err)
	}
	return aws.ToInt64(out.ContentLength), true, nil
}

// Abort aborts upload id of key; ErrGone when it is gone already.
func (u *Uploads) Abort(ctx context.Context, key, id string) error {
	_, err := u.s3.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: aws.String(u.bucket), Key: aws.String(key), UploadId: aws.String(id)})
	return classify("abort multipart upload", err)
}

// Ending is how End found an upload ended.
type Ending int

// The endings of End.
const (
	// Aborted: End aborted it now. No complete can succeed after.
	Aborted Ending = iota + 1
	// AbortedBefore: it was gone and its object absent: aborted before
	// (an earlier End whose caller died before its refund).
	AbortedBefore
	// Completed: it was gone and its object exists: completed.
	Completed
)

func (e Ending) String() string {
	switch e {
	case Aborted:
		return "aborted"
	case AbortedBefore:
		return "gone"
	case Completed:
		return "completed"
	}
	return fmt.Sprintf("Ending(%d)", int(e))
}

// End closes upload id of key for good: it aborts it and says how it
// ended. Aborted and AbortedBefore mean no object was made and none can
// be: its tokens are owed back. Completed means it was completed first.
//
// One case is judged from the object alone: an upload completed and its
// object deleted since (an application that moves what lands), or one
// whose complete takes S3 longer than settle to publish, reads as
// AbortedBefore. The completer's ObjectCreated takes back a refund given
// for it (quota.Store.Complete), and a grant's done marker, set when it
// completed, stops the refund before End is asked.
func (u *Uploads) End(ctx context.Context, key, id string) (Ending, error) {
	err := u.Abort(ctx, key, id)
	switch {
	case err == nil:
		return Aborted, nil
	case !errors.Is(err, ErrGone):
		return 0, err
	}
	// Gone: completed, or aborted before. A complete still being
	// published when the abort came may have removed the upload before
	// its object appears (versitygw does), so an absent object is looked
	// for again until settle has passed.
	deadline := time.Now().Add(settle)
	for {
		_, ok, err := u.Head(ctx, key)
		switch {
		case err != nil:
			return 0, err
		case ok:
			return Completed, nil
		case !time.Now().Before(deadline):
			return AbortedBefore, nil
		}
		t := time.NewTimer(settleEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, fmt.Errorf("%w: end upload of %s: %w", ErrUnavailable, key, ctx.Err())
		case <-t.C:
		}
	}
}

// settle is how long End looks for the object of an upload it found gone
// before it calls it aborted; settleEvery how often. Only an upload a
// crash left aborted and unrefunded, or one completed in the same moment,
// takes this path.
const (
	settle      = 2 * time.Second
	settleEvery = 100 * time.Millisecond
)

// errExists and errMissing are classify's answers for a failed
// precondition (the object exists) and a missing object.
var (
	errExists  = errors.New("multipart: the object exists")
	errMissing = errors.New("multipart: no such object")
)

// classify maps S3's answer to op onto the package's errors.
func classify(op string, err error) error {
	if err == nil {
		return nil
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "NoSuchUpload":
			return fmt.Errorf("%s: %w", op, ErrGone)
		case "InvalidPart", "InvalidPartOrder", "EntityTooSmall":
			return fmt.Errorf("%s: %w: %s", op, ErrInvalidPart, ae.ErrorMessage())
		case "PreconditionFailed":
			return fmt.Errorf("%s: %w", op, errExists)
		case "NotFound", "NoSuchKey":
			return fmt.Errorf("%s: %w", op, errMissing)
		case "InvalidRequest":
			if strings.Contains(ae.ErrorMessage(), "mp-object-size") {
				return fmt.Errorf("%s: %w: %s", op, ErrSizeMismatch, ae.ErrorMessage())
			}
		}
	}
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) {
		switch re.HTTPStatusCode() {
		case http.StatusNotFound:
			if op == "head object" {
				return fmt.Errorf("%s: %w", op, errMissing)
			}
		case http.StatusPreconditionFailed:
			return fmt.Errorf("%s: %w", op, errExists)
		}
	}
	return fmt.Errorf("%w: %s: %w", ErrUnavailable, op, err)
}
