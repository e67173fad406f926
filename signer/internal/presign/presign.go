// Package presign signs the signer's S3 URLs: a create-only PUT of an
// exact length and type (Presigner.Put), with SigV4 written out for that
// one request shape (sigv4.go) and checked against the SDK's signer at
// start. New also gives the signer's S3 clients (Clients), for the
// multipart calls. Signing is local CPU work; no request reaches S3.
package presign

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	smithyauth "github.com/aws/smithy-go/auth"
	"github.com/aws/smithy-go/encoding/httpbinding"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/mintgate/mintgate/api"
	"github.com/mintgate/mintgate/shared/config"
	"github.com/mintgate/mintgate/shared/dial"
)

// Presigner signs create-only PUT URLs for one bucket. Signing is local CPU
// work with the current credentials; no request reaches S3.
//
// It signs without s3.PresignClient, whose per-call middleware stack
// (endpoint rules, auth-scheme and identity resolution, checksum setup)
// cost more than a third of the signer's CPU and three quarters of its
// allocations: what that stack decides is the same for every URL of one
// bucket, so the SDK's own endpoint resolver decides it once, at start,
// and each URL is then only a SigV4 signature (sigv4.go). Tests hold the
// URLs byte for byte equal to PresignClient's.
type Presigner struct {
	creds aws.CredentialsProvider // the SDK's cache: refreshes them early
	// urlPrefix is the bucket's URL up to the object key: scheme, host and
	// the endpoint's path ("/<bucket>/" in path style, else "/"), escaped;
	// the path starts at pathAt.
	urlPrefix string
	pathAt    int
	scope     sigv4Scope
	keys      signingKeys
	endpoint  bucketEndpoint // as resolved, for the check against the SDK
}

// bucketEndpoint is where a bucket's objects are and how requests to them
// are signed, as the SDK's endpoint rules resolve it.
type bucketEndpoint struct {
	scheme, host  string
	path, rawPath string // "/<bucket>" in path style, "" virtual-hosted
	signingName   string
	signingRegion string
}

// Upload is a presigned PUT and the headers the uploader must send with it.
type Upload struct {
	URL     string
	Headers api.UploadHeaders
}

// Clients are the signer's two views of S3: Public signs what uploaders
// are given (MINTGATE_S3_ENDPOINT), Calls makes the signer's own requests
// (MINTGATE_S3_INTERNAL_ENDPOINT, else the same as Public).
type Clients struct {
	Public, Calls *s3.Client
}

// New loads the SDK configuration: region, endpoint and path style
// from our variables; credentials from AWS_* in the environment given to
// run, else the SDK's default chain (shared files, SSO, IMDS, IRSA …).
// Temporary credentials are refreshed at least urlTTL early. It fails
// when no credentials can be found, so a misconfigured signer
// does not start.
func New(ctx context.Context, s config.S3, creds config.AWS, urlTTL time.Duration) (*Presigner, Clients, error) {
	var opts []func(*awsconfig.LoadOptions) error
	if s.Region != "" {
		opts = append(opts, awsconfig.WithRegion(s.Region))
	}
	// A presigned URL lives only as long as the credentials that signed it:
	// refresh temporary ones (roles, IRSA) at least one URL lifetime early,
	// so no URL dies before its stated expiry.
	opts = append(opts, awsconfig.WithCredentialsCacheOptions(func(o *aws.CredentialsCacheOptions) {
		o.ExpiryWindow = urlTTL + time.Minute
	}))
	ac, err := dial.AWS(ctx, creds, opts...)
	if err != nil {
		return nil, Clients{}, fmt.Errorf("s3 presigner (region from MINTGATE_S3_REGION or AWS_REGION): %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := ac.Credentials.Retrieve(cctx); err != nil {
		return nil, Clients{}, fmt.Errorf("aws credentials: %w", err)
	}
	// Every URL — a single PUT's, each part's — names Endpoint, where
	// uploaders reach S3; only the signer's own calls go to Internal.
	cl := Clients{Public: s3.NewFromConfig(ac, dial.S3Addressing(s.Endpoint, s.PathStyle))}
	p, err := presignerFor(ctx, cl.Public.Options(), s.Bucket)
	if err != nil {
		return nil, Clients{}, fmt.Errorf("s3 presigner (MINTGATE_S3_BUCKET, MINTGATE_S3_ENDPOINT, MINTGATE_S3_PATH_STYLE): %w", err)
	}
	cl.Calls = cl.Public
	if s.Internal != "" {
		cl.Calls = s3.NewFromConfig(ac, dial.S3Addressing(s.CallEndpoint(), s.PathStyle))
	}
	return p, cl, nil
}

// presignerFor signs for bucket with an S3 client's resolved options: its
// credentials (the SDK's cache, which refreshes them) and the endpoint its
// rules give a PutObject to bucket.
func presignerFor(ctx context.Context, o s3.Options, bucket string) (*Presigner, error) {
	if o.Credentials == nil {
		return nil, errors.New("no AWS credentials provider")
	}
	b, err := resolveBucket(ctx, o, bucket)
	if err != nil {
		return nil, err
	}
	origin := (&url.URL{Scheme: b.scheme, Host: b.host}).String()
	p := &Presigner{
		creds:     o.Credentials,
		urlPrefix: origin + dirPath(b.rawPath),
		pathAt:    len(origin),
		scope:     sigv4Scope{region: b.signingRegion, service: b.signingName},
		endpoint:  b,
	}
	if err := p.checkAgainstSDK(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// resolveBucket runs the SDK's endpoint rules once, with the parameters a
// PutObject to bucket binds (any key resolves alike), and keeps the
// endpoint and the SigV4 scope they name. Anything a plain SigV4 presign
// cannot honour — another auth scheme (S3 Express directory buckets,
// multi-region access points), headers the endpoint adds — stops the signer
// at start rather than yielding URLs S3 refuses.
func resolveBucket(ctx context.Context, o s3.Options, bucket string) (bucketEndpoint, error) {
	resolver := o.EndpointResolverV2
	if resolver == nil {
		resolver = s3.NewDefaultEndpointResolverV2()
	}
	// What the client's finalizeClientEndpointResolverOptions and
	// bindEndpointParams do for each operation: a "fips-…" pseudo-region
	// means the FIPS endpoint of the real one.
	region := o.Region
	useFIPS := o.EndpointOptions.UseFIPSEndpoint == aws.FIPSEndpointStateEnabled
	if r := fipsRegion(region); r != region {
		region, useFIPS = r, true
	}
	ep, err := resolver.ResolveEndpoint(ctx, s3.EndpointParameters{
		Bucket:                         aws.String(bucket),
		Region:                         aws.String(region),
		UseFIPS:                        aws.Bool(useFIPS),
		UseDualStack:                   aws.Bool(o.EndpointOptions.UseDualStackEndpoint == aws.DualStackEndpointStateEnabled),
		Endpoint:                       o.BaseEndpoint,
		ForcePathStyle:                 aws.Bool(o.UsePathStyle),
		Accelerate:                     aws.Bool(o.UseAccelerate),
		DisableMultiRegionAccessPoints: aws.Bool(o.DisableMultiRegionAccessPoints),
		UseArnRegion:                   aws.Bool(o.UseARNRegion),
		DisableS3ExpressSessionAuth:    o.DisableS3ExpressSessionAuth,
	})
	if err != nil {
		return bucketEndpoint{}, fmt.Errorf("resolve the endpoint of bucket %q: %w", bucket, err)
	}
	if len(ep.Headers) > 0 {
		return bucketEndpoint{}, fmt.Errorf("bucket %q: its endpoint adds headers to requests, which presigned URLs cannot carry", bucket)
	}
	b := bucketEndpoint{
		scheme: ep.URI.Scheme, host: ep.URI.Host,
		path: ep.URI.Path, rawPath: ep.URI.RawPath,
		signingName: "s3", signingRegion: region,
	}
	if b.rawPath == "" {
		b.rawPath = b.path
	}
	if auth, _ := smithyauth.GetAuthOptions(&ep.Properties); len(auth) > 0 {
		a := auth[0]
		// The rules name schemes briefly ("sigv4", "sigv4a",
		// "sigv4-s3express"); the client also knows the long IDs.
		if a.SchemeID != "sigv4" && a.SchemeID != smithyauth.SchemeIDSigV4 {
			return bucketEndpoint{}, fmt.Errorf("bucket %q needs %s signing; this signer presigns with plain SigV4 only", bucket, a.SchemeID)
		}
		if n, ok := smithyhttp.GetSigV4SigningName(&a.SignerProperties); ok {
			b.signingName = n
		}
		if r, ok := smithyhttp.GetSigV4SigningRegion(&a.SignerProperties); ok {
			b.signingRegion = r
		}
	}
	return b, nil
}

// fipsRegion is the region a FIPS pseudo-region ("fips-us-east-1",
// "us-east-1-fips") stands for, or region itself.
func fipsRegion(region string) string {
	if !strings.Contains(region, "fips") {
		return region
	}
	r := strings.ReplaceAll(region, "-fips-", "-")
	r = strings.ReplaceAll(r, "fips-", "")
	return strings.ReplaceAll(r, "-fips", "")
}

// Put signs a PUT of exactly size bytes of contentType to key, valid for
// ttl from now, that S3 refuses (412) when the key already exists. The
// signature covers host, if-none-match, content-length and content-type.
func (p *Presigner) Put(ctx context.Context, key, contentType string, size int64, ttl time.Duration, now time.Time) (Upload, error) {
	return p.PutChecksum(ctx, key, contentType, "", size, ttl, now)
}

// PutChecksum is Put bound to the body's bytes when checksum (the base64
// of its SHA-256, as CheckSHA256 admits) is set: x-amz-checksum-sha256 is
// then a signed header, and S3 refuses any other body (400 BadDigest).
func (p *Presigner) PutChecksum(ctx context.Context, key, contentType, checksum string, size int64, ttl time.Duration, now time.Time) (Upload, error) {
	switch {
	case checksum != "" && !CheckSHA256(checksum):
		return Upload{}, fmt.Errorf("presign put %s: %q is not the base64 of a SHA-256", key, checksum)
	case !visibleASCII(contentType):
		// The signature covers the header as sent; only such a value is
		// canonical as it is (validContentType admits no other).
		return Upload{}, fmt.Errorf("presign put %s: content type %q is not visible ASCII", key, contentType)
	case size < 1:
		return Upload{}, fmt.Errorf("presign put %s: size %d: an upload has at least one byte", key, size)
	case key == "" || key[0] == '/':
		return Upload{}, fmt.Errorf("presign put %q: not an object key", key)
	}
	creds, err := p.creds.Retrieve(ctx)
	if err != nil {
		return Upload{}, fmt.Errorf("presign put %s: credentials: %w", key, err)
	}
	var dayBuf [8]byte
	k := p.keys.get(creds, p.scope, now.UTC().AppendFormat(dayBuf[:0], "20060102"))
	// One buffer for the URL and, behind it, the canonical request (the
	// URL's path and query again, and the headers) and the string to sign.
	n := len(p.urlPrefix) + 3*len(key) + presignedLen(k)
	buf := make([]byte, 0, 2*n+len(contentType)+2*len(checksum)+256)
	buf = append(buf, p.urlPrefix...)
	buf = appendPathEscaped(buf, key)
	return Upload{
		URL: appendPresigned(buf, p.pathAt, p.scope, k, presignPut{
			creds: creds, at: now, expires: ttl, contentType: contentType, size: size, checksum: checksum,
		}),
		Headers: api.UploadHeaders{
			ContentLength:  strconv.FormatInt(size, 10),
			ContentType:    contentType,
			IfNoneMatch:    "*",
			ChecksumSHA256: checksum,
		},
	}, nil
}

// CheckSHA256 is whether s is the standard base64 of a SHA-256 digest:
// 44 characters, canonical, decoding to 32 bytes.
func CheckSHA256(s string) bool {
	if len(s) != 44 {
		return false
	}
	var d [33]byte
	n, err := base64.StdEncoding.Strict().Decode(d[:], []byte(s))
	return err == nil && n == sha256.Size
}

// checkAgainstSDK signs probe URLs, without and with a checksum, both
// here and with v4.Signer, and refuses an endpoint where the two differ,
// so a configuration the tests never saw cannot issue URLs S3 refuses. It
// also learns the host as v4.Signer signs it (the endpoint's, without a
// default port).
func (p *Presigner) checkAgainstSDK(ctx context.Context) error {
	creds, err := p.creds.Retrieve(ctx)
	if err != nil {
		return fmt.Errorf("aws credentials: %w", err)
	}
	const key = "incoming/self-check/0f8fad5b-d9cb-469f-a165-70867728950e"
	for _, sum := range []string{"", probeChecksum} {
		probe := presignPut{creds: creds, at: time.Now(), expires: 2 * time.Minute, contentType: "image/png", size: 5, checksum: sum}
		want, host, err := p.endpoint.presignWithSDK(ctx, key, probe)
		if err != nil {
			return err
		}
		p.scope.host = host
		got, err := p.PutChecksum(ctx, key, probe.contentType, probe.checksum, probe.size, probe.expires, probe.at)
		if err != nil {
			return err
		}
		if got.URL != want {
			return fmt.Errorf("this endpoint's URLs are not signed as the AWS SDK signs them (please report):\n  ours: %s\n  sdk:  %s", got.URL, want)
		}
	}
	return nil
}

// probeChecksum is the SHA-256 of "hello", base64: the start check's.
const probeChecksum = "LPJNul+wow4m6DsqxbninhsWHlwfp0JecwQzYpOLmCQ="

// presignWithSDK is the URL v4.Signer.PresignHTTP makes of the request
// PutObject's serializer builds for r to key, and the host it signed.
func (b bucketEndpoint) presignWithSDK(ctx context.Context, key string, r presignPut) (signedURL, host string, err error) {
	req := &http.Request{
		Method: http.MethodPut,
		URL: &url.URL{
			Scheme:   b.scheme,
			Host:     b.host,
			Path:     smithyhttp.JoinPath(b.path, key),
			RawPath:  smithyhttp.JoinPath(b.rawPath, httpbinding.EscapePath(key, false)),
			RawQuery: "X-Amz-Expires=" + strconv.FormatInt(int64(r.expires/time.Second), 10) + "&x-id=PutObject",
		},
		Host:          b.host,
		Header:        http.Header{"Content-Type": {r.contentType}, "If-None-Match": {"*"}},
		ContentLength: r.size,
	}
	if r.checksum != "" {
		// PutObject's serializer sets it as a header; v4.Signer keeps
		// x-amz-checksum-* there (it hoists other x-amz-* into the query).
		req.Header.Set("X-Amz-Checksum-Sha256", r.checksum)
	}
	// Set up as the S3 client's own signer: the canonical path is the
	// escaped path as sent, never escaped a second time.
	sdk := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
	signed, headers, err := sdk.PresignHTTP(ctx, r.creds, req, unsignedPayload, b.signingName, b.signingRegion, r.at)
	if err != nil {
		return "", "", fmt.Errorf("presign with v4.Signer: %w", err)
	}
	return signed, headers.Get("Host"), nil
}

// dirPath is p as the path objects are below: with a leading and a
// trailing "/", as smithyhttp.JoinPath joins them.
func dirPath(p string) string {
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	if !strings.HasSuffix(p, "/") {
		p += "/"
	}
	return p
}

// visibleASCII is s non-empty and all of 0x21–0x7E.
func visibleASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return s != ""
}
