package dial

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"

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
