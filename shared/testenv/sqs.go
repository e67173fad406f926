package testenv

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// The region and credentials every test AWS server and client uses. fauxqs
// ignores credentials but keys queues by the region of the request's
// signature; versitygw checks both.
const (
	AWSRegion    = "us-east-1"
	AWSAccessKey = "mintgate-test"
	AWSSecretKey = "mintgate-test-secret"
)

// AWSEnv is the environment a service under test needs to reach the test
// AWS servers through the SDK's default chain.
func AWSEnv() map[string]string {
	return map[string]string{
		"AWS_REGION":            AWSRegion,
		"AWS_ACCESS_KEY_ID":     AWSAccessKey,
		"AWS_SECRET_ACCESS_KEY": AWSSecretKey,
	}
}

func awsCredentials() aws.CredentialsProvider {
	return credentials.NewStaticCredentialsProvider(AWSAccessKey, AWSSecretKey, "")
}

// Fauxqs is an in-memory fauxqs SQS server the test started (fauxqs 2.4 on
// Node 22, installed by deploy/local/tools.sh fauxqs). Stopping it loses
// every queue and message.
type Fauxqs struct {
	*Process
	// Endpoint is the SDK's BaseEndpoint for it: http://127.0.0.1:<port>.
	Endpoint string
}

// StartFauxqs starts fauxqs on a free port and waits until it answers.
func StartFauxqs(tb testing.TB) *Fauxqs {
	tb.Helper()
	port := FreePort(tb)
	f := &Fauxqs{Process: newProcess(tb, Binary(tb, "fauxqs")), Endpoint: "http://" + addr(port)}
	f.Env = []string{"FAUXQS_PORT=" + strconv.Itoa(port), "FAUXQS_LOGGER=false",
		"FAUXQS_DEFAULT_REGION=" + AWSRegion, fauxqsLoopback(tb)}
	f.Start()
	return f
}

// fauxqsLoopback is the NODE_OPTIONS that keeps fauxqs on 127.0.0.1: it
// binds 0.0.0.0 whatever it is told, so deploy/local/fauxqs-loopback.mjs
// (which the local stack preloads too) rewrites its listen.
func fauxqsLoopback(tb testing.TB) string {
	tb.Helper()
	root, err := Root()
	if err != nil {
		tb.Fatalf("testenv: fauxqs: %v", err)
	}
	return `NODE_OPTIONS=--import="` + filepath.Join(root, "deploy", "local", "fauxqs-loopback.mjs") + `"`
}

// Start starts the server and waits until GET /health answers 200.
func (f *Fauxqs) Start() {
	f.tb.Helper()
	f.Process.Start()
	waitHTTP(f.tb, f.Process, f.Endpoint+"/health")
}

// Client is an SQS client for the server, region AWSRegion.
func (f *Fauxqs) Client() *sqs.Client {
	return sqs.New(sqs.Options{
		Region:       AWSRegion,
		BaseEndpoint: aws.String(f.Endpoint),
		Credentials:  awsCredentials(),
	})
}

// QueueOptions shape a queue made by CreateQueue.
type QueueOptions struct {
	// VisibilityTimeout is the queue's own; whole seconds, 0 keeps SQS's 30 s.
	VisibilityTimeout time.Duration
	// MaxReceiveCount > 0 gives the queue a dead-letter queue, <name>-dlq,
	// and a redrive policy moving a message there once it was received
	// that many times without being deleted.
	MaxReceiveCount int
}

// Queue is a queue the test created, and its dead-letter queue if any.
type Queue struct {
	URL    string
	DLQURL string
}

// CreateQueue creates the queue name (and its dead-letter queue).
func (f *Fauxqs) CreateQueue(tb testing.TB, name string, opts QueueOptions) Queue {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := f.Client()
	attrs := map[string]string{}
	if opts.VisibilityTimeout > 0 {
		attrs[string(types.QueueAttributeNameVisibilityTimeout)] = strconv.Itoa(int(opts.VisibilityTimeout / time.Second))
	}
	var q Queue
	if opts.MaxReceiveCount > 0 {
		dlq, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name + "-dlq")})
		if err != nil {
			tb.Fatalf("testenv: create %s-dlq: %v", name, err)
		}
		q.DLQURL = aws.ToString(dlq.QueueUrl)
		got, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
			QueueUrl: dlq.QueueUrl, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
		})
		if err != nil {
			tb.Fatalf("testenv: %s-dlq arn: %v", name, err)
		}
		policy, _ := json.Marshal(map[string]any{
			"deadLetterTargetArn": got.Attributes[string(types.QueueAttributeNameQueueArn)],
			"maxReceiveCount":     opts.MaxReceiveCount,
		})
		attrs[string(types.QueueAttributeNameRedrivePolicy)] = string(policy)
	}
	out, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		tb.Fatalf("testenv: create queue %s: %v", name, err)
	}
	q.URL = aws.ToString(out.QueueUrl)
	return q
}

// waitHTTP waits until url answers 200.
func waitHTTP(tb testing.TB, p *Process, url string) {
	tb.Helper()
	if err := p.WaitHTTP(context.Background(), 30*time.Second, url); err != nil {
		tb.Fatalf("testenv: %s did not answer %s: %v\n%s", p.Bin, url, err, p.Output())
	}
}
