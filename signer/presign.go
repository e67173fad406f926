package main

import (
	"context"
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
)

// presigner signs create-only PUT URLs for one bucket. Signing is local CPU
// work with the current credentials; no request reaches S3.
//
// It signs with v4.Signer directly rather than through s3.PresignClient,
// whose per-call middleware stack (endpoint rules, auth-scheme and identity
// resolution, checksum setup) cost more than a third of the signer's CPU
// and three quarters of its allocations. What that stack decides is the
// same for every URL of one bucket, so it is decided once, at start, by the
// SDK's own endpoint resolver; a test holds the URLs byte for byte equal to
// PresignClient's.
type presigner struct {
	creds aws.CredentialsProvider
	// signer is shared by every sign: its derived-key cache keeps the SigV4
	// signing key of the last access key per region and service, and
	// derives it again only when the UTC day or the access key changes.
	signer *v4.Signer
	bucket bucketEndpoint
}

// bucketEndpoint is where the bucket's objects are and how requests to
// them are signed, as the SDK's endpoint rules resolve it.
type bucketEndpoint struct {
	scheme, host string
	// path and rawPath lead every object path: "/<bucket>" in path style,
	// "/" (or the custom endpoint's own path) virtual-hosted.
	path, rawPath string
	signingName   string
	signingRegion string
}

// upload is a presigned PUT and the headers the uploader must send with it.
type upload struct {
	URL     string
	Headers map[string]string // every signed header but host
}

// unsignedPayload is the payload hash of every presigned S3 request: the
// body is not known when the URL is signed.
const unsignedPayload = "UNSIGNED-PAYLOAD"

// newPresigner loads the SDK configuration: region, endpoint and path style
// from our variables; credentials from AWS_* in the environment given to
// run, else the SDK's default chain (shared files, SSO, IMDS, IRSA …).
// It fails when no credentials can be found, so a misconfigured signer
// does not start.
func newPresigner(ctx context.Context, c cfg) (*presigner, error) {
	var opts []func(*awsconfig.LoadOptions) error
	if c.S3Region != "" {
		opts = append(opts, awsconfig.WithRegion(c.S3Region))
	}
	// A presigned URL lives only as long as the credentials that signed it:
	// refresh temporary ones (roles, IRSA) at least one URL lifetime early,
	// so no URL dies before its stated expiry.
	opts = append(opts, awsconfig.WithCredentialsCacheOptions(func(o *aws.CredentialsCacheOptions) {
		o.ExpiryWindow = c.URLTTL + time.Minute
	}))
	ac, err := c.AWS.Load(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("s3 presigner (region from MINTGATE_S3_REGION or AWS_REGION): %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := ac.Credentials.Retrieve(cctx); err != nil {
		return nil, fmt.Errorf("aws credentials: %w", err)
	}
	client := s3.NewFromConfig(ac, bucketAddressing(c.S3Endpoint, c.S3PathStyle))
	p, err := presignerFor(ctx, client.Options(), c.S3Bucket)
	if err != nil {
		return nil, fmt.Errorf("s3 presigner (MINTGATE_S3_BUCKET, MINTGATE_S3_ENDPOINT, MINTGATE_S3_PATH_STYLE): %w", err)
	}
	return p, nil
}

// bucketAddressing applies MINTGATE_S3_ENDPOINT (empty: AWS's own) and
// MINTGATE_S3_PATH_STYLE to an S3 client.
func bucketAddressing(endpoint string, pathStyle bool) func(*s3.Options) {
	return func(o *s3.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
		o.UsePathStyle = pathStyle
	}
}

// presignerFor signs for bucket with an S3 client's resolved options: its
// credentials (the SDK's cache, which refreshes them) and the endpoint its
// rules give a PutObject to bucket.
func presignerFor(ctx context.Context, o s3.Options, bucket string) (*presigner, error) {
	if o.Credentials == nil {
		return nil, errors.New("no AWS credentials provider")
	}
	ep, err := resolveBucket(ctx, o, bucket)
	if err != nil {
		return nil, err
	}
	return &presigner{creds: o.Credentials, signer: s3Signer(), bucket: ep}, nil
}

// s3Signer is a SigV4 signer set up as the S3 client's own: the canonical
// path is the escaped path as sent, never escaped a second time.
func s3Signer() *v4.Signer {
	return v4.NewSigner(func(so *v4.SignerOptions) { so.DisableURIPathEscaping = true })
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

// put signs a PUT of exactly size bytes of contentType to key, valid for
// ttl from now, that S3 refuses (412) when the key already exists. The
// signature covers host, if-none-match, content-length and content-type.
func (p *presigner) put(ctx context.Context, key, contentType string, size int64, ttl time.Duration, now time.Time) (upload, error) {
	creds, err := p.creds.Retrieve(ctx)
	if err != nil {
		return upload{}, fmt.Errorf("presign put %s: credentials: %w", key, err)
	}
	b := &p.bucket
	// The request PutObject's serializer builds for these inputs: the key
	// under the endpoint's path, escaped as S3 wants it, and the
	// operation's x-id; the signer adds the rest of the query.
	u := &url.URL{
		Scheme:   b.scheme,
		Host:     b.host,
		Path:     smithyhttp.JoinPath(b.path, key),
		RawPath:  smithyhttp.JoinPath(b.rawPath, httpbinding.EscapePath(key, false)),
		RawQuery: "X-Amz-Expires=" + strconv.FormatInt(int64(ttl/time.Second), 10) + "&x-id=PutObject",
	}
	r := &http.Request{
		Method: http.MethodPut,
		URL:    u,
		Host:   b.host,
		Header: http.Header{
			"Content-Type":  {contentType},
			"If-None-Match": {"*"},
		},
		ContentLength: size,
	}
	signed, _, err := p.signer.PresignHTTP(ctx, creds, r, unsignedPayload, b.signingName, b.signingRegion, now)
	if err != nil {
		return upload{}, fmt.Errorf("presign put %s: %w", key, err)
	}
	return upload{
		URL: signed,
		Headers: map[string]string{
			"If-None-Match":  "*",
			"Content-Type":   contentType,
			"Content-Length": strconv.FormatInt(size, 10),
		},
	}, nil
}
