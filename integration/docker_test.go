package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/ory/dockertest/v3"
	"github.com/ory/dockertest/v3/docker"

	"github.com/mintgate/mintgate/shared/testenv"
)

// Pinned images for the Docker path; the same versions as docker-compose.yml.
const (
	redisImage, redisTag           = "redis", "7.4.6-alpine"
	natsImage, natsTag             = "nats", "2.15.2-alpine"
	localstackImage, localstackTag = "localstack/localstack", "4.9.2"
)

// dockerInfra starts the servers from pinned images when a Docker engine
// answers (a developer's laptop), with LocalStack's real S3→SQS
// notifications in place of versitygw, fauxqs and our bridge. Set
// MINTGATE_INTEGRATION_DOCKER=off to force local processes. Our CI machines
// have no Docker engine, so this path is exercised only where one exists.
func dockerInfra(t *testing.T, opts stackOptions) (infra, bool) {
	t.Helper()
	if os.Getenv("MINTGATE_INTEGRATION_DOCKER") == "off" {
		return infra{}, false
	}
	pool, err := dockertest.NewPool("")
	if err != nil || pool.Client.Ping() != nil {
		return infra{}, false
	}
	pool.MaxWait = 90 * time.Second

	redisPort := testenv.FreePort(t)
	rdb := runContainer(t, pool, &dockertest.RunOptions{Repository: redisImage, Tag: redisTag,
		Cmd: []string{"redis-server", "--save", "", "--appendonly", "no"}}, "6379/tcp", redisPort)
	natsPort := testenv.FreePort(t)
	nats := runContainer(t, pool, &dockertest.RunOptions{Repository: natsImage, Tag: natsTag,
		Cmd: []string{"-js", "-sd", "/data"}}, "4222/tcp", natsPort)
	lsPort := testenv.FreePort(t)
	runContainer(t, pool, &dockertest.RunOptions{Repository: localstackImage, Tag: localstackTag,
		Env: []string{"SERVICES=s3,sqs"}}, "4566/tcp", lsPort)
	endpoint := fmt.Sprintf("http://127.0.0.1:%d", lsPort)

	in := infra{
		Redis: rdb, RedisAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(redisPort)),
		NATS: nats, NATSURL: fmt.Sprintf("nats://127.0.0.1:%d", natsPort),
		S3Endpoint: endpoint, Bucket: "mintgate-uploads", SQSEndpoint: endpoint, Kind: "docker",
	}
	var lastErr error
	for range 60 {
		if lastErr = provisionLocalstack(context.Background(), &in, opts); lastErr == nil {
			return in, true
		}
		time.Sleep(time.Second)
	}
	t.Fatalf("localstack: %v", lastErr)
	return infra{}, false
}

// container is a started container whose host port survives Stop/Start.
type container struct {
	t    *testing.T
	pool *dockertest.Pool
	res  *dockertest.Resource
	port int
}

func runContainer(t *testing.T, pool *dockertest.Pool, opts *dockertest.RunOptions, cport string, hostPort int) *container {
	t.Helper()
	opts.PortBindings = map[docker.Port][]docker.PortBinding{
		docker.Port(cport): {{HostIP: "127.0.0.1", HostPort: strconv.Itoa(hostPort)}},
	}
	res, err := pool.RunWithOptions(opts, func(hc *docker.HostConfig) { hc.AutoRemove = true })
	if err != nil {
		t.Fatalf("docker run %s:%s: %v", opts.Repository, opts.Tag, err)
	}
	t.Cleanup(func() { _ = pool.Purge(res) })
	c := &container{t: t, pool: pool, res: res, port: hostPort}
	c.wait()
	return c
}

func (c *container) wait() {
	if err := c.pool.Retry(func() error {
		conn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)), time.Second)
		if err != nil {
			return err
		}
		return conn.Close()
	}); err != nil {
		c.t.Fatalf("container %s: %v", c.res.Container.Name, err)
	}
}

// Stop stops the container, keeping it for Start.
func (c *container) Stop() {
	if err := c.pool.Client.StopContainer(c.res.Container.ID, 5); err != nil {
		c.t.Fatalf("docker stop: %v", err)
	}
}

// Start starts the stopped container again on the same host port.
func (c *container) Start() {
	if err := c.pool.Client.StartContainer(c.res.Container.ID, nil); err != nil {
		c.t.Fatalf("docker start: %v", err)
	}
	c.wait()
}

// provisionLocalstack creates the bucket, the queue with its dead-letter
// queue, and the bucket's ObjectCreated notification on incoming/.
func provisionLocalstack(ctx context.Context, in *infra, opts stackOptions) error {
	creds := awsCreds()
	sc := sqs.New(sqs.Options{Region: testenv.AWSRegion, BaseEndpoint: aws.String(in.SQSEndpoint), Credentials: creds})
	s3c := s3.New(s3.Options{Region: testenv.AWSRegion, BaseEndpoint: aws.String(in.S3Endpoint), Credentials: creds, UsePathStyle: true})

	dlq, err := sc.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("mintgate-uploads-dlq")})
	if err != nil {
		return err
	}
	dlqAttrs, err := sc.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: dlq.QueueUrl,
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
	if err != nil {
		return err
	}
	redrive, _ := json.Marshal(map[string]any{"deadLetterTargetArn": dlqAttrs.Attributes["QueueArn"], "maxReceiveCount": opts.MaxReceives})
	q, err := sc.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("mintgate-uploads"), Attributes: map[string]string{
		"RedrivePolicy": string(redrive), "VisibilityTimeout": strconv.Itoa(int(opts.Visibility / time.Second)),
	}})
	if err != nil {
		return err
	}
	qAttrs, err := sc.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: q.QueueUrl,
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
	if err != nil {
		return err
	}
	if _, err := s3c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(in.Bucket)}); err != nil {
		var owned *s3types.BucketAlreadyOwnedByYou
		if !errors.As(err, &owned) {
			return err
		}
	}
	_, err = s3c.PutBucketNotificationConfiguration(ctx, &s3.PutBucketNotificationConfigurationInput{
		Bucket: aws.String(in.Bucket),
		NotificationConfiguration: &s3types.NotificationConfiguration{QueueConfigurations: []s3types.QueueConfiguration{{
			QueueArn: aws.String(qAttrs.Attributes["QueueArn"]),
			Events:   []s3types.Event{"s3:ObjectCreated:*"},
			Filter: &s3types.NotificationConfigurationFilter{Key: &s3types.S3KeyFilter{FilterRules: []s3types.FilterRule{{
				Name: s3types.FilterRuleNamePrefix, Value: aws.String("incoming/"),
			}}}},
		}}},
	})
	if err != nil {
		return err
	}
	in.Queue = testenv.Queue{URL: aws.ToString(q.QueueUrl), DLQURL: aws.ToString(dlq.QueueUrl)}
	return nil
}

func awsCreds() aws.CredentialsProvider {
	return credentials.NewStaticCredentialsProvider(testenv.AWSAccessKey, testenv.AWSSecretKey, "")
}
