package main

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mintgate/mintgate/shared/testenv"
)

const (
	dlqMessages = "mintgate_completer_dlq_messages"
	dlqErrs     = `mintgate_completer_errors_total{op="dlq"}`
)

// sendTo puts n messages straight into the queue at url.
func sendTo(t *testing.T, c *sqs.Client, url string, n int) {
	t.Helper()
	for range n {
		if _, err := c.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("dead")}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDLQDepthExported: the completer finds the dead-letter queue through
// its queue's redrive policy, with nothing configured, and exports its
// depth at start.
func TestDLQDepthExported(t *testing.T) {
	rs, fq := testenv.StartRedis(t), testenv.StartFauxqs(t)
	q := fq.CreateQueue(t, "uploads", testenv.QueueOptions{MaxReceiveCount: maxReceives})
	sendTo(t, fq.Client(), q.DLQURL, 2)
	addr, vars := completerEnv(t, rs, fq, q, fixtureBucket)
	log := &testenv.Buffer{}
	start := time.Now()
	startCompleter(t, addr, vars, log)
	eventually(t, "dlq_messages 2", func() bool {
		v, ok := scrapeSeries(t, addr, dlqMessages)
		return ok && v == 2
	})
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("depth exported after %s, want at start", d)
	}
	if n := scrape(t, addr, dlqErrs); n != 0 {
		t.Errorf("dlq errors %v\n%s", n, log)
	}
	if !strings.Contains(log.String(), q.DLQURL) {
		t.Errorf("no log line naming the DLQ %s:\n%s", q.DLQURL, log)
	}
}

// dlqTest is a watcher polling every 20 ms, on its own registry.
type dlqTest struct {
	w      *dlqWatcher
	m      *metrics
	log    *testenv.Buffer
	cancel context.CancelFunc
	done   chan struct{}
}

func startWatcher(t *testing.T, q dlqQueue, queueURL string) *dlqTest {
	t.Helper()
	d := &dlqTest{m: newMetrics(prometheus.NewRegistry()), log: &testenv.Buffer{}, done: make(chan struct{})}
	d.w = &dlqWatcher{q: q, queueURL: queueURL, every: 20 * time.Millisecond, m: d.m, log: slog.New(slog.NewJSONHandler(d.log, nil))}
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	go func() { d.w.run(ctx); close(d.done) }()
	t.Cleanup(d.stop)
	return d
}

func (d *dlqTest) stop() {
	d.cancel()
	<-d.done
}

// depth is the gauge's value and whether it is exported.
func (d *dlqTest) depth() (float64, bool) {
	if testutil.CollectAndCount(d.m.dlqMessages) == 0 {
		return 0, false
	}
	return testutil.ToFloat64(d.m.dlqMessages), true
}

func (d *dlqTest) waitDepth(t *testing.T, want float64) {
	t.Helper()
	eventually(t, "dlq depth", func() bool { v, ok := d.depth(); return ok && v == want })
}

func (d *dlqTest) waitAbsent(t *testing.T) {
	t.Helper()
	eventually(t, "no dlq series", func() bool { _, ok := d.depth(); return !ok })
}

func (d *dlqTest) errors() float64 { return testutil.ToFloat64(d.m.errors.WithLabelValues(opDLQ)) }

// logged is how many log lines contain s.
func (d *dlqTest) logged(s string) int { return strings.Count(d.log.String(), s) }

// TestDLQWatcherFollowsTheQueue, on fauxqs: no series while the queue has
// no redrive policy (logged once); a policy set while running is followed;
// messages waiting and in flight count; a failing SQS is counted and logged
// once, the gauge keeping its value; after it the watcher goes on.
func TestDLQWatcherFollowsTheQueue(t *testing.T) {
	fq := testenv.StartFauxqs(t)
	c := fq.Client()
	ctx := context.Background()
	plain := fq.CreateQueue(t, "plain", testenv.QueueOptions{})
	other := fq.CreateQueue(t, "other", testenv.QueueOptions{MaxReceiveCount: 3})
	d := startWatcher(t, c, plain.URL)

	const noPolicy = "no redrive policy"
	eventually(t, "no-policy log line", func() bool { return d.logged(noPolicy) == 1 })
	time.Sleep(100 * time.Millisecond) // several polls
	if _, ok := d.depth(); ok || d.logged(noPolicy) != 1 || d.errors() != 0 {
		t.Fatalf("without a redrive policy: series exported %v, %d log lines, %v errors\n%s", ok, d.logged(noPolicy), d.errors(), d.log)
	}

	// The policy of "other", copied onto "plain", names other-dlq.
	attrs, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(other.URL), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameRedrivePolicy}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(plain.URL), Attributes: attrs.Attributes}); err != nil {
		t.Fatal(err)
	}
	d.waitDepth(t, 0)
	sendTo(t, c, other.DLQURL, 2)
	d.waitDepth(t, 2)
	got, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(other.DLQURL), VisibilityTimeout: 60})
	if err != nil || len(got.Messages) != 1 {
		t.Fatalf("receive from the DLQ: %v, %v", got, err)
	}
	time.Sleep(100 * time.Millisecond)
	d.waitDepth(t, 2) // one in flight still counts
	if _, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(other.DLQURL), ReceiptHandle: got.Messages[0].ReceiptHandle}); err != nil {
		t.Fatal(err)
	}
	d.waitDepth(t, 1)

	const failed = "reading the dead-letter queue's depth failed"
	fq.Stop()
	eventually(t, "dlq errors counted", func() bool { return d.errors() >= 3 })
	if v, ok := d.depth(); !ok || v != 1 || d.logged(failed) != 1 {
		t.Errorf("SQS down: depth %v (exported %v), want the last value 1; %d failure log lines, want 1\n%s", v, ok, d.logged(failed), d.log)
	}

	// A new, empty fauxqs: the queue again, without a policy.
	fq.Start()
	fq.CreateQueue(t, "plain", testenv.QueueOptions{})
	d.waitAbsent(t)
	eventually(t, "recovery logged", func() bool { return d.logged("depth again") == 1 && d.logged(noPolicy) == 2 })
}

// policyQueue answers GetQueueAttributes with a fixed RedrivePolicy and
// counts GetQueueUrl calls.
type policyQueue struct {
	policy string
	urls   []*sqs.GetQueueUrlInput
}

func (p *policyQueue) GetQueueAttributes(_ context.Context, in *sqs.GetQueueAttributesInput, _ ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	if aws.ToString(in.QueueUrl) != "main" {
		return &sqs.GetQueueAttributesOutput{Attributes: map[string]string{"ApproximateNumberOfMessages": "4", "ApproximateNumberOfMessagesNotVisible": "1"}}, nil
	}
	return &sqs.GetQueueAttributesOutput{Attributes: map[string]string{"RedrivePolicy": p.policy}}, nil
}

func (p *policyQueue) GetQueueUrl(_ context.Context, in *sqs.GetQueueUrlInput, _ ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error) {
	p.urls = append(p.urls, in)
	return &sqs.GetQueueUrlOutput{QueueUrl: aws.String("https://sqs/" + aws.ToString(in.QueueName))}, nil
}

// TestDLQRedrivePolicies: the DLQ is named by the ARN's last segment and
// owned by its account, whichever type maxReceiveCount has; a policy or an
// ARN that cannot be read is an error, not a crash; the URL is resolved
// once per ARN.
func TestDLQRedrivePolicies(t *testing.T) {
	for _, policy := range []string{
		`{"deadLetterTargetArn":"arn:aws:sqs:eu-west-1:111122223333:up-dlq","maxReceiveCount":5}`,
		`{"deadLetterTargetArn":"arn:aws:sqs:eu-west-1:111122223333:up-dlq","maxReceiveCount":"5"}`,
	} {
		q := &policyQueue{policy: policy}
		d := startWatcher(t, q, "main")
		d.waitDepth(t, 5)
		d.stop()
		if len(q.urls) != 1 || aws.ToString(q.urls[0].QueueName) != "up-dlq" || aws.ToString(q.urls[0].QueueOwnerAWSAccountId) != "111122223333" {
			t.Errorf("%s: GetQueueUrl calls %+v, want one for up-dlq of 111122223333", policy, q.urls)
		}
	}
	for _, policy := range []string{`not json`, `{"deadLetterTargetArn":"up-dlq"}`, `{"deadLetterTargetArn":"arn:aws:sns:eu-west-1:111122223333:topic"}`} {
		q := &policyQueue{policy: policy}
		d := startWatcher(t, q, "main")
		eventually(t, "errors counted", func() bool { return d.errors() >= 2 })
		d.stop()
		if _, ok := d.depth(); ok || len(q.urls) != 0 {
			t.Errorf("%s: depth exported %v, GetQueueUrl calls %d", policy, ok, len(q.urls))
		}
	}
}
