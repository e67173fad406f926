package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	_ "image/jpeg" // image.DecodeConfig reads JPEG headers
	_ "image/png"  // and PNG headers
	"io"
	"mime"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"github.com/gabriel-vasile/mimetype"
	_ "golang.org/x/image/webp" // and WebP headers

	"github.com/mintgate/mintgate/shared/quota"
	"github.com/mintgate/mintgate/shared/telemetry"
)

// Reasons an upload is rejected: the "reason" of GET /uploads/{urlId} and
// of the rejected event, and the label of mintgate_completer_rejected_total.
const (
	reasonSize    = "size_mismatch"   // the object's size is not the grant's contentLength
	reasonType    = "type_mismatch"   // its leading bytes are not its contentType's (or an image header that cannot be read)
	reasonPixels  = "image_too_large" // width × height above MINTGATE_MAX_IMAGE_PIXELS
	reasonMalware = "malware"         // clamd found a signature
	// reasonScanLimit: clamd stopped before the content's end, at one of
	// its limits (AlertExceedsMax: Heuristics.Limits.Exceeded.*), so what
	// lies past it was never scanned.
	reasonScanLimit = "scan_limit"
	// reasonEncoding: the object is stored with a Content-Encoding other
	// than none or identity (br, gzip, …): a reader's client decodes
	// what the scan and the type check saw encoded.
	reasonEncoding = "encoding_not_allowed"
	// reasonMetadata: the object is stored with a Content-Disposition,
	// Cache-Control, Expires or Content-Language header, which no URL of
	// ours signs: the uploader chose it, and a reader of the bucket would
	// be served it.
	reasonMetadata = "metadata_not_allowed"
)

// objects is the S3 calls of the gate and the quarantine (*s3.Client).
type objects interface {
	GetObject(ctx context.Context, in *s3.GetObjectInput, opts ...func(*s3.Options)) (*s3.GetObjectOutput, error)
	HeadObject(ctx context.Context, in *s3.HeadObjectInput, opts ...func(*s3.Options)) (*s3.HeadObjectOutput, error)
	CopyObject(ctx context.Context, in *s3.CopyObjectInput, opts ...func(*s3.Options)) (*s3.CopyObjectOutput, error)
	DeleteObject(ctx context.Context, in *s3.DeleteObjectInput, opts ...func(*s3.Options)) (*s3.DeleteObjectOutput, error)
}

// scanner is clamd's INSTREAM (clamd.Scan).
type scanner interface {
	Scan(ctx context.Context, r io.Reader) (found string, err error)
}

// gate is the verification gate: what an object must pass before its
// upload reads completed (SPEC §9, docs/security.md).
type gate struct {
	s3     objects
	bucket string
	// content: the type, pixel and scan checks run (MINTGATE_VERIFY on);
	// the size check runs always.
	content   bool
	maxPixels int64   // 0: no limit
	scan      scanner // nil: no scan (MINTGATE_CLAMD_ADDR unset)
	scanMax   int64   // bytes of an object the scan reads, from its start
	// truncated counts scans that read only the first scanMax bytes.
	truncated func()
}

// headRange is how much of an object the type and pixel checks may read,
// from its start: the type needs a few KiB (mimetype reads 3 KiB), but a
// JPEG's size comes after its metadata segments (EXIF, ICC: up to 64 KiB
// each). image.DecodeConfig stops at the header, so a PNG or a WebP costs
// a few bytes of it; the GET asks for no more than this in any case.
const headRange = 256 << 10

// errGone: the object is not in incoming/ (NoSuchKey).
var errGone = errors.New("the object is gone")

// check is the gate's verdict on the object at key, whose S3 record says
// it holds size bytes, for a grant of shape:
// "" when it passes, else the reason, and the object's size as S3 holds
// it (its HEAD: an event's size is not to be trusted, and some S3s send 0
// for a completed multipart upload). An error means no verdict (S3 or
// clamd unavailable: the upload is held), errGone that the object is not
// there to verify.
//
// A grant record that does not name the grant's type and length (gone,
// or written before they were kept) leaves the size unchecked, and the
// type is checked against the object's own Content-Type, which the
// signer's URL signed.
func (g *gate) check(ctx context.Context, key string, size int64, shape quota.GrantShape) (string, int64, error) {
	if !shape.Known && !g.content {
		return "", size, nil // nothing to check: the record's size stands
	}
	hctx, span := telemetry.Start(ctx, "gate head")
	head, err := g.s3.HeadObject(hctx, &s3.HeadObjectInput{Bucket: aws.String(g.bucket), Key: aws.String(key)})
	telemetry.End(span, err)
	switch {
	case isCode(err, "NoSuchKey", "NotFound"):
		return "", 0, errGone
	case err != nil:
		return "", 0, fmt.Errorf("head %s: %w", key, err)
	}
	size = aws.ToInt64(head.ContentLength)
	if shape.Known && size != shape.ContentLength {
		return reasonSize, size, nil
	}
	if reason := headerVerdict(head); reason != "" {
		return reason, size, nil // the HEAD is made: its check costs nothing, VERIFY on or off
	}
	if !g.content {
		return "", size, nil
	}
	if reason, err := gateStep(ctx, "type", func(ctx context.Context) (string, error) { return g.checkHead(ctx, key, shape) }); reason != "" || err != nil {
		return reason, size, err
	}
	if g.scan == nil {
		return "", size, nil
	}
	reason, err := gateStep(ctx, "scan", func(ctx context.Context) (string, error) { return g.scanObject(ctx, key, size) })
	return reason, size, err
}

// checkHead is the type and pixel checks, on a ranged GET of the object's
// first headRange bytes at most, of which it reads only what they need.
func (g *gate) checkHead(ctx context.Context, key string, shape quota.GrantShape) (string, error) {
	out, err := g.s3.GetObject(ctx, &s3.GetObjectInput{
		Bucket: aws.String(g.bucket), Key: aws.String(key), Range: aws.String(fmt.Sprintf("bytes=0-%d", headRange-1)),
	})
	switch {
	case isCode(err, "InvalidRange"): // an empty object: no bytes to range over
		return typeVerdict(declared(shape, ""), nil, io.MultiReader(), g.maxPixels), nil
	case isCode(err, "NoSuchKey", "NotFound"):
		return "", errGone
	case err != nil:
		return "", fmt.Errorf("read %s: %w", key, err)
	}
	defer out.Body.Close()
	head := make([]byte, 3072)
	n, err := io.ReadFull(out.Body, head)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return "", fmt.Errorf("read %s: %w", key, err)
	}
	return typeVerdict(declared(shape, aws.ToString(out.ContentType)), head[:n], out.Body, g.maxPixels), nil
}

// declared is the type the object must be: the grant's, else the one S3
// stored with it (the signed Content-Type header), without parameters.
func declared(shape quota.GrantShape, stored string) string {
	t := stored
	if shape.Known {
		t = shape.ContentType
	}
	if mt, _, err := mime.ParseMediaType(t); err == nil {
		return mt
	}
	return strings.ToLower(strings.TrimSpace(t))
}

// imageTypes are the declared types whose header image.DecodeConfig reads
// (the decoders registered above) for the pixel check.
var imageTypes = map[string]bool{"image/png": true, "image/jpeg": true, "image/webp": true}

// typeVerdict checks head, the object's first bytes, against the declared
// type by magic bytes, and for an image its width × height against
// maxPixels (0: none) from its header, read from head and then rest.
//
// A detected type passes when it is the declared one or one of its kind
// (mimetype's tree: HTML is a kind of text/plain, everything a kind of
// application/octet-stream). A declared type mimetype does not know is not
// checked: there is no magic to compare.
func typeVerdict(want string, head []byte, rest io.Reader, maxPixels int64) string {
	if want == "" || mimetype.Lookup(want) == nil {
		return ""
	}
	ok := false
	for m := mimetype.Detect(head); m != nil; m = m.Parent() {
		if m.Is(want) {
			ok = true
			break
		}
	}
	if !ok {
		return reasonType
	}
	if !imageTypes[want] {
		return ""
	}
	// Only the header: never a decode of the pixels.
	cfg, format, err := image.DecodeConfig(io.MultiReader(bytes.NewReader(head), rest))
	if err != nil || "image/"+format != want {
		return reasonType // a header that cannot be read is no such image
	}
	if maxPixels > 0 && int64(cfg.Width)*int64(cfg.Height) > maxPixels {
		return reasonPixels
	}
	return ""
}

// scanObject streams the object's first scanMax bytes from S3 to clamd.
func (g *gate) scanObject(ctx context.Context, key string, size int64) (string, error) {
	in := &s3.GetObjectInput{Bucket: aws.String(g.bucket), Key: aws.String(key)}
	if size > g.scanMax {
		// Above the limit only the first scanMax bytes are scanned
		// (docs/security.md); clamd's StreamMaxLength must be at least it.
		in.Range = aws.String(fmt.Sprintf("bytes=0-%d", g.scanMax-1))
		if g.truncated != nil {
			g.truncated()
		}
	}
	out, err := g.s3.GetObject(ctx, in)
	switch {
	case isCode(err, "InvalidRange"): // empty: nothing to find
		return "", nil
	case isCode(err, "NoSuchKey", "NotFound"):
		return "", errGone
	case err != nil:
		return "", fmt.Errorf("read %s: %w", key, err)
	}
	defer out.Body.Close()
	found, err := g.scan.Scan(ctx, io.LimitReader(out.Body, g.scanMax))
	if err != nil {
		return "", fmt.Errorf("scan %s: %w", key, err)
	}
	return scanVerdict(found), nil
}

// limitAlert is the prefix of the signatures clamd reports, with
// AlertExceedsMax yes, for content it stopped scanning at a limit
// (MaxFileSize, MaxScanSize, MaxRecursion, MaxFiles, MaxScanTime, …).
const limitAlert = "Heuristics.Limits.Exceeded."

// scanVerdict is the reason of what clamd found: "" for nothing,
// scan_limit for a limit it hit, malware for any other signature.
func scanVerdict(found string) string {
	switch {
	case found == "":
		return ""
	case strings.HasPrefix(found, limitAlert):
		return reasonScanLimit
	}
	return reasonMalware
}

// headerVerdict is the reason the object's stored headers (its HEAD)
// refuse it, or "". A Content-Encoding other than identity means the bytes
// the type check and the scan read are not the bytes a reader's client
// decodes (a brotli-encoded EICAR scans clean); aws-chunked is the
// transfer of a streamed PUT, which S3 does not keep, and is skipped if an
// S3 kept it. Content-Disposition, Cache-Control, Expires and
// Content-Language are never signed by our URLs, so the uploader chose
// them; an object that carries one is refused rather than rewritten in
// place (the completer never writes incoming/): docs/security.md.
func headerVerdict(h *s3.HeadObjectOutput) string {
	for _, enc := range strings.Split(aws.ToString(h.ContentEncoding), ",") {
		switch strings.ToLower(strings.TrimSpace(enc)) {
		case "", "identity", "aws-chunked":
		default:
			return reasonEncoding
		}
	}
	if aws.ToString(h.ContentDisposition) != "" || !fetchCacheControl(aws.ToString(h.CacheControl)) ||
		aws.ToString(h.ExpiresString) != "" || aws.ToString(h.ContentLanguage) != "" {
		return reasonMetadata
	}
	return ""
}

// fetchCacheControl reports whether a stored Cache-Control is none, or
// what a browser or Node adds by itself to every request carrying
// If-None-Match, so that every browser's single PUT stores it: the
// "no-cache" of fetch (the Fetch standard turns such a request to cache
// mode no-store, which appends Cache-Control: no-cache) and Node's, and
// the "max-age=0" of Chromium's XMLHttpRequest (Chromium 156, measured:
// Uppy's PUT carries it). Both only make a reader's cache revalidate,
// never keep the object longer; any other value the uploader chose is
// refused.
func fetchCacheControl(v string) bool {
	v = strings.ToLower(strings.TrimSpace(v))
	return v == "" || v == "no-cache" || v == "max-age=0"
}

// isCode reports whether err is an S3 API error with one of codes.
func isCode(err error, codes ...string) bool {
	if err == nil {
		return false
	}
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		return false
	}
	for _, c := range codes {
		if ae.ErrorCode() == c {
			return true
		}
	}
	return false
}
