package integration

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/mintgate/mintgate/api"
	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/testenv"
)

// Tiers with a refill slow enough (one token an hour) that every token a
// test sees come back is a refund.
const slowTiers = "anonymous=5:5/60s,user=3:1/1h,tenant=600:1/1h"

// TestUploadJourney: sign three URLs, upload two, leave one unused. The two
// uploads are marked done and never refunded; the unused one is refunded
// exactly once, after its expiry plus the grace and not before.
func TestUploadJourney(t *testing.T) {
	s := newStack(t, stackOptions{URLTTL: 3 * time.Second, Grace: 2 * time.Second, Tiers: slowTiers})
	rdb := s.redis(t)
	ctx := ctxT(t)
	tok := s.token(t, "acme", "journey")
	body := []byte("\x89PNG\r\n\x1a\n-journey")

	var g [3]api.SignResponse
	for i := range g {
		g[i] = s.mustSign(t, tok, len(body))
	}
	if code, _, _ := s.sign(t, tok, len(body)); code != http.StatusTooManyRequests {
		t.Fatalf("4th sign: %d, want 429", code)
	}
	for _, u := range g[:2] {
		if code := put(t, u, body); code != http.StatusOK {
			t.Fatalf("PUT %s: %d", u.Key, code)
		}
	}
	for _, u := range g[:2] {
		s.waitStatus(t, tok, u.URLID, "completed", 30*time.Second)
	}
	// The same URL again: create-only.
	if code := put(t, g[0], body); code != http.StatusPreconditionFailed {
		t.Fatalf("second PUT: %d, want 412", code)
	}
	// Before its due time the unused grant is not refunded.
	due := g[2].ExpiresAt.Add(2 * time.Second)
	if time.Until(due) > 500*time.Millisecond {
		if st := s.status(t, tok, g[2].URLID); st == "refunded" {
			t.Fatalf("refunded before due")
		}
	}
	s.waitStatus(t, tok, g[2].URLID, "refunded", 30*time.Second)
	if time.Now().Before(due) {
		t.Fatalf("refunded at %v, before due %v", time.Now(), due)
	}
	// After the expired URL's refund, it still cannot be used.
	if code := put(t, g[2], body); code != http.StatusForbidden {
		t.Fatalf("PUT after expiry: %d, want 403", code)
	}
	// Let the uploaded grants come due too: done means no refund.
	time.Sleep(time.Until(g[1].ExpiresAt.Add(4 * time.Second)))
	for _, u := range g[:2] {
		if st := s.status(t, tok, u.URLID); st != "completed" {
			t.Fatalf("uploaded %s: status %q", u.URLID, st)
		}
	}
	tokens, err := rdb.HGet(ctx, keys.Bucket("acme", keys.UserSubject("journey")), "t").Float64()
	if err != nil {
		t.Fatal(err)
	}
	if int(tokens) != 1 {
		t.Fatalf("user bucket holds %.6f tokens, want 1 (exactly one refund)", tokens)
	}
}

// TestTamperedAndOversize: a URL with one signed parameter changed is
// refused, and so is a body longer than the signed length.
func TestTamperedAndOversize(t *testing.T) {
	s := newStack(t, stackOptions{})
	tok := s.token(t, "acme", "tamper")
	body := []byte("12345")

	g := s.mustSign(t, tok, len(body))
	u, _ := url.Parse(g.URL)
	q := u.Query()
	exp, _ := strconv.Atoi(q.Get("X-Amz-Expires"))
	q.Set("X-Amz-Expires", strconv.Itoa(exp+600))
	u.RawQuery = q.Encode()
	bad := g
	bad.URL = u.String()
	if code := put(t, bad, body); code != http.StatusForbidden {
		t.Fatalf("tampered URL: %d, want 403", code)
	}

	g = s.mustSign(t, tok, len(body))
	if code := put(t, g, []byte("1234567890")); code < 400 || code >= 500 {
		t.Fatalf("oversize body: %d, want a 4xx refusal", code)
	}
	// The refused URL still works for the signed size: nothing was stored.
	if code := put(t, g, body); code != http.StatusOK {
		t.Fatalf("PUT after refusal: %d", code)
	}
}

// TestExpiredURL: after its expiry the URL is refused.
func TestExpiredURL(t *testing.T) {
	s := newStack(t, stackOptions{URLTTL: time.Second})
	tok := s.token(t, "acme", "late")
	g := s.mustSign(t, tok, 3)
	time.Sleep(time.Until(g.ExpiresAt) + 1500*time.Millisecond)
	if code := put(t, g, []byte("abc")); code != http.StatusForbidden {
		t.Fatalf("expired URL: %d, want 403", code)
	}
}

// TestCompleterSurvivesPoisonAndRedisOutage: a malformed message ends in
// the dead-letter queue while good ones are handled; with Redis down the
// completer deletes nothing, and once Redis is back every upload is done;
// a duplicated event leaves one marker and no error.
func TestCompleterSurvivesPoisonAndRedisOutage(t *testing.T) {
	s := newStack(t, stackOptions{Visibility: time.Second, MaxReceives: 2})
	ctx := ctxT(t)
	rdb := s.redis(t)
	sq := sqsClient(s)
	tok := s.token(t, "acme", "outage")
	body := []byte("abcde")

	if _, err := sq.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(s.Queue.URL), MessageBody: aws.String("{not json")}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "poison message in the DLQ", func() bool {
		return queueDepth(ctx, t, sq, s.Queue.DLQURL) == 1
	})

	var grants []api.SignResponse
	for range 3 {
		grants = append(grants, s.mustSign(t, tok, len(body)))
	}
	s.Redis.Stop()
	for _, g := range grants {
		if code := put(t, g, body); code != http.StatusOK {
			t.Fatalf("PUT: %d", code)
		}
	}
	// Events arrive while Redis is down: they stay in the queue.
	eventually(t, 20*time.Second, "events queued while Redis is down", func() bool {
		return queueDepth(ctx, t, sq, s.Queue.URL) >= len(grants)
	})
	time.Sleep(3 * time.Second)
	if n := queueDepth(ctx, t, sq, s.Queue.URL); n < len(grants) {
		t.Fatalf("%d messages left in the queue while Redis was down, want %d", n, len(grants))
	}
	s.Redis.Start()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("queue depth %d, DLQ depth %d", queueDepth(context.Background(), t, sq, s.Queue.URL), queueDepth(context.Background(), t, sq, s.Queue.DLQURL))
		}
	})
	for _, g := range grants {
		eventually(t, 30*time.Second, "done marker for "+g.URLID, func() bool {
			return rdb.Exists(ctx, keys.Done("acme", g.URLID)).Val() == 1
		})
	}
	eventually(t, 20*time.Second, "queue drained", func() bool { return queueDepth(ctx, t, sq, s.Queue.URL) == 0 })
	if n := queueDepth(ctx, t, sq, s.Queue.DLQURL); n != 1 {
		t.Fatalf("DLQ holds %d, want only the poison message", n)
	}
}

func sqsClient(s *stack) *sqs.Client {
	return sqs.New(sqs.Options{Region: testenv.AWSRegion, BaseEndpoint: aws.String(s.SQSEndpoint),
		Credentials: awsCreds()})
}

// queueDepth is visible plus in-flight messages.
func queueDepth(ctx context.Context, t *testing.T, c *sqs.Client, queueURL string) int {
	t.Helper()
	out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(queueURL),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
	if err != nil {
		t.Fatalf("queue attributes: %v", err)
	}
	a, _ := strconv.Atoi(out.Attributes["ApproximateNumberOfMessages"])
	b, _ := strconv.Atoi(out.Attributes["ApproximateNumberOfMessagesNotVisible"])
	return a + b
}

// TestDuplicateEventDeliveries: S3 delivers at least once. The same
// ObjectCreated event arriving twice more, as AWS would send it, leaves one
// done marker and no completer error.
func TestDuplicateEventDeliveries(t *testing.T) {
	s := newStack(t, stackOptions{})
	ctx := ctxT(t)
	rdb := s.redis(t)
	sq := sqsClient(s)
	tok := s.token(t, "acme", "dup")
	body := []byte("dup!")

	g := s.mustSign(t, tok, len(body))
	if code := put(t, g, body); code != http.StatusOK {
		t.Fatalf("PUT: %d", code)
	}
	s.waitStatus(t, tok, g.URLID, "completed", 30*time.Second)
	event := `{"Records":[{"eventVersion":"2.1","eventSource":"aws:s3","awsRegion":"us-east-1",` +
		`"eventTime":"2026-11-29T12:00:00.000Z","eventName":"ObjectCreated:Put",` +
		`"s3":{"s3SchemaVersion":"1.0","bucket":{"name":"` + s.Bucket + `","arn":"arn:aws:s3:::` + s.Bucket + `"},` +
		`"object":{"key":"` + g.Key + `","size":4,"eTag":"0","sequencer":"01"}}}]}`
	for range 2 {
		if _, err := sq.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(s.Queue.URL), MessageBody: aws.String(event)}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 20*time.Second, "duplicates handled", func() bool {
		return metric(t, s.CompleterURL, "mintgate_completer_records_done_total") >= 3
	})
	if n := rdb.Exists(ctx, keys.Done("acme", g.URLID)).Val(); n != 1 {
		t.Fatalf("done markers: %d", n)
	}
	if ttl := rdb.TTL(ctx, keys.Done("acme", g.URLID)).Val(); ttl <= 14*time.Minute {
		t.Fatalf("done marker TTL %v, want about MINTGATE_DONE_TTL (15m)", ttl)
	}
	if e := metric(t, s.CompleterURL, "mintgate_completer_errors_total"); e != 0 {
		t.Fatalf("completer errors: %v", e)
	}
	if st := s.status(t, tok, g.URLID); st != "completed" {
		t.Fatalf("status %q", st)
	}
}
