package dial

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/mintgate/mintgate/shared/config"
)

// AWS is the SDK configuration of a: the region and static credentials given,
// else the SDK's default chain (shared files, SSO, IMDS, IRSA …). Options in
// extra come last and win. A configuration without a region is an error.
func AWS(ctx context.Context, a config.AWS, extra ...func(*awsconfig.LoadOptions) error) (aws.Config, error) {
	var opts []func(*awsconfig.LoadOptions) error
	if a.Region != "" {
		opts = append(opts, awsconfig.WithRegion(a.Region))
	}
	if a.AccessKey != "" && a.SecretKey != "" {
		opts = append(opts, awsconfig.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(a.AccessKey, a.SecretKey, a.SessionToken)))
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, append(opts, extra...)...)
	if err != nil {
		return aws.Config{}, fmt.Errorf("aws config: %w", err)
	}
	if cfg.Region == "" {
		return aws.Config{}, errors.New("AWS_REGION: required (the SDK found no region in the environment or a profile)")
	}
	return cfg, nil
}

// S3Addressing applies MINTGATE_S3_ENDPOINT (empty: AWS's own) and
// MINTGATE_S3_PATH_STYLE to an S3 client.
func S3Addressing(endpoint string, pathStyle bool) func(*s3.Options) {
	return func(o *s3.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
		o.UsePathStyle = pathStyle
	}
}

// S3 is an S3 client for the services' own calls to s (its region, when
// set, over a's; its CallEndpoint), with a's credentials or the SDK's
// chain.
func S3(ctx context.Context, a config.AWS, s config.S3) (*s3.Client, error) {
	var opts []func(*awsconfig.LoadOptions) error
	if s.Region != "" {
		opts = append(opts, awsconfig.WithRegion(s.Region))
	}
	ac, err := AWS(ctx, a, opts...)
	if err != nil {
		return nil, fmt.Errorf("s3 (region from MINTGATE_S3_REGION or AWS_REGION): %w", err)
	}
	return s3.NewFromConfig(ac, S3Addressing(s.CallEndpoint(), s.PathStyle)), nil
}
