package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/mintgate/mintgate/shared/s3event"
	"github.com/mintgate/mintgate/shared/testenv"
)

// receiveBodies long-polls q until it holds n messages or the deadline
// passes, deleting what it reads.
func receiveBodies(t *testing.T, c *sqs.Client, queueURL string, n int) []string {
	t.Helper()
	ctx := context.Background()
	var bodies []string
	deadline := time.Now().Add(20 * time.Second)
	for len(bodies) < n && time.Now().Before(deadline) {
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(queueURL), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range out.Messages {
			bodies = append(bodies, aws.ToString(m.Body))
			if _, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(queueURL), ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(bodies) < n {
		t.Fatalf("%d of %d messages arrived: %q", len(bodies), n, bodies)
	}
	return bodies
}

// TestVersityEventsReachSQSInAWSFormat: a PUT on the real versitygw becomes
// an SQS message exactly as S3 would send it, after the test event S3 also
// sends when notifications are set up.
func TestVersityEventsReachSQSInAWSFormat(t *testing.T) {
	fq := testenv.StartFauxqs(t)
	q := fq.CreateQueue(t, "uploads", testenv.QueueOptions{})
	bridge := testenv.StartBridge(t, q.URL, fq.Endpoint)
	gw := testenv.StartVersityGW(t, bridge.URL)
	c := fq.Client()

	test, err := s3event.Parse([]byte(receiveBodies(t, c, q.URL, 1)[0]))
	if err != nil || !test.IsTest() || test.Test.Service != "Amazon S3" {
		t.Fatalf("first message %+v, %v; want the test event", test, err)
	}

	key := "incoming/acme/my photo+1 ü.jpg"
	put, err := gw.Client().PutObject(context.Background(), &s3.PutObjectInput{
		Bucket: aws.String(gw.Bucket), Key: aws.String(key),
		Body: strings.NewReader("hello"), IfNoneMatch: aws.String("*"),
	})
	if err != nil {
		t.Fatal(err)
	}
	body := receiveBodies(t, c, q.URL, 1)[0]
	var raw struct {
		Records []map[string]json.RawMessage
	}
	if err := json.Unmarshal([]byte(body), &raw); err != nil || len(raw.Records) != 1 {
		t.Fatalf("body %s: %v", body, err)
	}
	n, err := s3event.Parse([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	r := n.Records[0]
	if r.EventName != "ObjectCreated:Put" || r.EventVersion != "2.1" || r.EventSource != "aws:s3" || r.AWSRegion != testenv.AWSRegion {
		t.Errorf("record header %+v", r)
	}
	if r.S3.Bucket.Name != gw.Bucket || r.S3.Bucket.Arn != "arn:aws:s3:::"+gw.Bucket {
		t.Errorf("bucket %+v", r.S3.Bucket)
	}
	o := r.S3.Object
	if o.Key != "incoming/acme/my+photo%2B1+%C3%BC.jpg" || o.Size != 5 || o.Sequencer == "" {
		t.Errorf("object %+v", o)
	}
	if want := strings.Trim(aws.ToString(put.ETag), `"`); o.ETag != want || strings.Contains(o.ETag, `"`) {
		t.Errorf("eTag %q, want %q", o.ETag, want)
	}
	if got := r.S3.Object.URLDecodedKey; got != key {
		t.Errorf("decoded key %q", got)
	}
	if strings.Contains(body, `"s3:Object`) || strings.Contains(body, "glacierEventData") {
		t.Errorf("versitygw dialect leaked: %s", body)
	}

	// A second PUT of the same key is refused (412) and notifies nothing.
	_, err = gw.Client().PutObject(context.Background(), &s3.PutObjectInput{
		Bucket: aws.String(gw.Bucket), Key: aws.String(key),
		Body: strings.NewReader("again"), IfNoneMatch: aws.String("*"),
	})
	if err == nil {
		t.Fatal("second create-only PUT succeeded")
	}
	out, err := c.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.URL), WaitTimeSeconds: 1})
	if err != nil || len(out.Messages) != 0 {
		t.Fatalf("after a refused PUT: %d messages, %v", len(out.Messages), err)
	}
}

// TestBridgeRejectsForeignBodies: a body that is no versitygw event is a
// 400 and nothing is queued.
func TestBridgeRejectsForeignBodies(t *testing.T) {
	fq := testenv.StartFauxqs(t)
	q := fq.CreateQueue(t, "uploads", testenv.QueueOptions{})
	bridge := testenv.StartBridge(t, q.URL, fq.Endpoint)
	resp, err := http.Post(bridge.URL, "application/json", strings.NewReader(`{"hello":"world"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("status %d", resp.StatusCode)
	}
	attrs, err := fq.Client().GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(q.URL), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages},
	})
	if err != nil || attrs.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)] != "0" {
		t.Fatalf("queue %v, %v", attrs.Attributes, err)
	}
}

// TestBridgeRefusesPostsWithoutTheToken (issue 17): the bridge turned any
// post into an SQS event, so a page open in a developer's browser could
// forge an upload's done marker through the loopback port (a form post
// needs no CORS preflight). Now a post without the token, or with another,
// is a 401 and queues nothing, while versitygw, given the token in its
// webhook URL, still delivers (TestVersityEventsReachSQSInAWSFormat).
func TestBridgeRefusesPostsWithoutTheToken(t *testing.T) {
	fq := testenv.StartFauxqs(t)
	q := fq.CreateQueue(t, "uploads", testenv.QueueOptions{})
	bridge := testenv.StartBridge(t, q.URL, fq.Endpoint)
	forged := string(fixture(t, "versitygw-put.json"))
	for _, url := range []string{
		"http://" + bridge.Addr + "/events",
		"http://" + bridge.Addr + "/events?token=",
		"http://" + bridge.Addr + "/events?token=" + strings.Repeat("0", len(bridge.Token)),
		"http://" + bridge.Addr + "/events?token=" + bridge.Token[:len(bridge.Token)-1],
		"http://" + bridge.Addr + "/" + bridge.Token,
	} {
		for _, ct := range []string{"application/json", "text/plain"} { // text/plain: what a page's form may post
			resp, err := http.Post(url, ct, strings.NewReader(forged))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("POST %s (%s): status %d, want 401", url, ct, resp.StatusCode)
			}
		}
	}
	attrs, err := fq.Client().GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(q.URL), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages},
	})
	if err != nil || attrs.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)] != "0" {
		t.Fatalf("queue after forged posts: %v, %v", attrs.Attributes, err)
	}
	if out := bridge.Output(); !strings.Contains(out, "without the token refused") || !strings.Contains(out, `"refused":10`) {
		t.Errorf("refusals not logged and counted:\n%s", out)
	}
	// The token is what makes a post an event.
	resp, err := http.Post(bridge.URL, "application/json", strings.NewReader(forged))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("post with the token: status %d", resp.StatusCode)
	}
	receiveBodies(t, fq.Client(), q.URL, 1)
}
