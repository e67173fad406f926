package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// presigner signs create-only PUT URLs for one bucket. Signing is local CPU
// work with the current credentials; no request reaches S3.
type presigner struct {
	client *s3.PresignClient
	bucket string
}

// upload is a presigned PUT and the headers the uploader must send with it.
type upload struct {
	URL     string
	Headers map[string]string // every signed header but host
}

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
	client := s3.NewFromConfig(ac, func(o *s3.Options) {
		if c.S3Endpoint != "" {
			o.BaseEndpoint = aws.String(c.S3Endpoint)
		}
		o.UsePathStyle = c.S3PathStyle
	})
	return &presigner{client: s3.NewPresignClient(client), bucket: c.S3Bucket}, nil
}

// put signs a PUT of exactly size bytes of contentType to key, valid for
// ttl, that S3 refuses (412) when the key already exists. The signature
// covers host, if-none-match, content-length and content-type.
func (p *presigner) put(ctx context.Context, key, contentType string, size int64, ttl time.Duration) (upload, error) {
	req, err := p.client.PresignPutObject(ctx, &s3.PutObjectInput{
		Bucket:        aws.String(p.bucket),
		Key:           aws.String(key),
		ContentType:   aws.String(contentType),
		ContentLength: aws.Int64(size),
		IfNoneMatch:   aws.String("*"),
	}, s3.WithPresignExpires(ttl))
	if err != nil {
		return upload{}, fmt.Errorf("presign put %s: %w", key, err)
	}
	if req.Method != http.MethodPut {
		return upload{}, fmt.Errorf("presign put %s: method %s", key, req.Method)
	}
	return upload{
		URL: req.URL,
		Headers: map[string]string{
			"If-None-Match":  "*",
			"Content-Type":   contentType,
			"Content-Length": strconv.FormatInt(size, 10),
		},
	}, nil
}
