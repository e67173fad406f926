package config

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
)

// AWS is what the environment given to a service's run says about AWS: a
// region and static credentials, each optional. Reading them through
// getenv, rather than letting the SDK read the process environment, lets a
// test give each in-process service its own.
type AWS struct {
	Region                             string
	AccessKey, SecretKey, SessionToken string
}

// AWS reads AWS_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
// AWS_SESSION_TOKEN; a key without its secret (or the reverse) is a problem.
func (e *Env) AWS() AWS {
	a := AWS{
		Region:       e.String("AWS_REGION", ""),
		AccessKey:    e.String("AWS_ACCESS_KEY_ID", ""),
		SecretKey:    string(e.Secret("AWS_SECRET_ACCESS_KEY")),
		SessionToken: string(e.Secret("AWS_SESSION_TOKEN")),
	}
	if (a.AccessKey == "") != (a.SecretKey == "") {
		e.Fail("AWS_ACCESS_KEY_ID", "set both AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or neither")
	}
	return a
}

// Load is the SDK configuration: the region and static credentials given,
// else the SDK's default chain (shared files, SSO, IMDS, IRSA …). Options in
// extra come last and win. A configuration without a region is an error.
func (a AWS) Load(ctx context.Context, extra ...func(*awsconfig.LoadOptions) error) (aws.Config, error) {
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
