package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/google/uuid"

	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/quota"
)

const (
	received     = "mintgate_completer_messages_received_total"
	deleted      = "mintgate_completer_messages_deleted_total"
	recordsDone  = "mintgate_completer_records_done_total"
	unparseable  = "mintgate_completer_unparseable_total"
	handleErrs   = `mintgate_completer_errors_total{op="handle"}`
	messagesHeld = "mintgate_completer_messages_held"
	extensions   = "mintgate_completer_visibility_extensions_total"
)

func ignored(reason string) string {
	return `mintgate_completer_ignored_total{reason="` + reason + `"}`
}

// waitDone waits for the done marker of acme's urlId and checks its TTL is
// the configured one (15 min by default), or quota.MarkerTTL where that is
// longer: a done marker outlives every ledger message that could still
// carry its grant, so no late or replayed copy refunds a completed upload.
func (s *stack) waitDone(t *testing.T, urlID string, ttl time.Duration) {
	t.Helper()
	ttl = max(ttl, quota.MarkerTTL)
	key := keys.Done("acme", urlID)
	// The marker reads verifying until the gate's verdict, then 1.
	eventually(t, "done marker "+key+" = 1", func() bool { return s.rdb.Get(context.Background(), key).Val() == "1" })
	if got := s.doneTTL(t, key); got <= ttl-time.Minute || got > ttl {
		t.Errorf("%s TTL %s, want about %s", key, got, ttl)
	}
}

func TestDirectEventMarksDone(t *testing.T) {
	s := startStack(t, nil)
	id := uuid.NewString()
	s.send(t, fixture(t, "direct-put.json", id))
	s.waitDone(t, id, 15*time.Minute)
	eventually(t, "message deleted", func() bool { return s.metric(t, deleted) == 1 && s.inQueue(t, s.q.URL) == 0 })
	if s.metric(t, recordsDone) != 1 {
		t.Errorf("records done %v", s.metric(t, recordsDone))
	}
}

func TestEveryCreatedKindAndEnvelopeMarksDone(t *testing.T) {
	s := startStack(t, map[string]string{"MINTGATE_DONE_TTL": "30h"})
	for _, name := range []string{"sns-put.json", "direct-multipart.json"} {
		t.Run(name, func(t *testing.T) {
			id := uuid.NewString()
			s.send(t, fixture(t, name, id))
			s.waitDone(t, id, 30*time.Hour)
		})
	}
	t.Run("URL-encoded key", func(t *testing.T) {
		id := uuid.NewString()
		encoded := "incoming%2Facme%2F" + strings.Replace(id, "-", "%2D", 1)
		s.send(t, strings.Replace(fixture(t, "direct-put.json", id), "incoming/acme/"+id, encoded, 1))
		s.waitDone(t, id, 30*time.Hour)
	})
	eventually(t, "queue empty", func() bool { return s.inQueue(t, s.q.URL) == 0 })
}

// TestIgnoredMessagesAreDeleted: S3's test event (direct or through SNS),
// other event types and keys that are not incoming/<tenant>/<uuid> are
// handled by ignoring them: deleted and counted, no marker.
func TestIgnoredMessagesAreDeleted(t *testing.T) {
	s := startStack(t, nil)
	id := uuid.NewString()
	put := fixture(t, "direct-put.json", id)
	bodies := map[string]string{
		"test-event.json":            ignored("test_event"),
		"sns-test-event.json":        ignored("test_event"),
		"direct-removed.json":        ignored("not_created"),
		"aws-example.json":           ignored("outside_incoming"),
		"direct-space-plus-key.json": ignored("bad_url_id"),
	}
	for name := range bodies {
		s.send(t, fixture(t, name, id))
	}
	s.send(t, strings.Replace(put, "incoming/acme/", "incoming/ac%7Bme%7D/", 1))
	s.send(t, strings.Replace(put, id, strings.ToUpper(id), 1))
	eventually(t, "all deleted", func() bool { return s.metric(t, deleted) == 7 && s.inQueue(t, s.q.URL) == 0 })
	want := map[string]float64{ignored("test_event"): 2, ignored("not_created"): 1, ignored("outside_incoming"): 1,
		ignored("bad_url_id"): 2, ignored("bad_tenant"): 1, recordsDone: 0, unparseable: 0}
	for series, n := range want {
		if got := s.metric(t, series); got != n {
			t.Errorf("%s = %v, want %v", series, got, n)
		}
	}
	if n := s.rdb.DBSize(context.Background()).Val(); n != 0 {
		t.Errorf("%d keys in Redis, want none", n)
	}
}

// TestForeignRecordsAreIgnored: a record of another bucket, or from a
// source other than S3, marks nothing (issue 10, finding 7: anyone who can
// write to the queue, or a second bucket notifying it, could mark any
// grant done and so stop its refund). It is deleted and counted.
func TestForeignRecordsAreIgnored(t *testing.T) {
	s := startStack(t, nil)
	id := uuid.NewString()
	put := fixture(t, "direct-put.json", id)
	s.send(t, strings.ReplaceAll(put, fixtureBucket, "someone-elses-bucket"))
	s.send(t, strings.Replace(put, `"eventSource": "aws:s3"`, `"eventSource": "aws:lambda"`, 1))
	s.send(t, strings.Replace(put, `"eventSource": "aws:s3"`, `"eventSource": ""`, 1))
	eventually(t, "all deleted", func() bool { return s.metric(t, deleted) == 3 && s.inQueue(t, s.q.URL) == 0 })
	want := map[string]float64{ignored("foreign_bucket"): 1, ignored("foreign_source"): 2, recordsDone: 0}
	for series, n := range want {
		if got := s.metric(t, series); got != n {
			t.Errorf("%s = %v, want %v", series, got, n)
		}
	}
	if n := s.rdb.Exists(context.Background(), keys.Done("acme", id)).Val(); n != 0 {
		t.Error("a foreign record set the done marker")
	}
	// The same record from our bucket still counts.
	s.send(t, put)
	s.waitDone(t, id, 15*time.Minute)
}

// TestMalformedMessageGoesToDLQ: a message that is no S3 notification is
// never deleted, so the redrive policy moves it to the dead-letter queue,
// and the completer goes on with the messages after it.
func TestMalformedMessageGoesToDLQ(t *testing.T) {
	s := startStack(t, map[string]string{"MINTGATE_SQS_VISIBILITY_TIMEOUT": "1s"})
	const bad = `{"Records":[{"eventName":"ObjectCreated:Put"}]}`
	s.send(t, bad)
	eventually(t, "malformed message in the DLQ", func() bool { return s.inQueue(t, s.q.DLQURL) == 1 })
	out, err := s.sqs.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(s.q.DLQURL), WaitTimeSeconds: 1})
	if err != nil || len(out.Messages) != 1 || aws.ToString(out.Messages[0].Body) != bad {
		t.Fatalf("DLQ holds %+v, %v", out.Messages, err)
	}
	if got := s.metric(t, unparseable); got != maxReceives {
		t.Errorf("unparseable %v, want one per receive: %d", got, maxReceives)
	}
	id := uuid.NewString()
	s.send(t, fixture(t, "direct-put.json", id))
	s.waitDone(t, id, 15*time.Minute)
	if !strings.Contains(s.log.String(), "unparseable message left for the dead-letter queue") {
		t.Errorf("no log line for the malformed message:\n%s", s.log)
	}
}

// TestRedisOutage: events that arrive while Redis is down are not deleted
// (and not pushed into the DLQ by repeated receives); once Redis is back,
// every upload is marked done.
func TestRedisOutage(t *testing.T) {
	s := startStack(t, nil)
	s.redis.Stop()
	eventually(t, "/readyz reports redis", func() bool { return s.readyz() == http.StatusServiceUnavailable })
	ids := make([]string, 5)
	for i := range ids {
		ids[i] = uuid.NewString()
		s.send(t, fixture(t, "direct-put.json", ids[i]))
	}
	eventually(t, "a failed handle", func() bool { return s.metric(t, handleErrs) >= 1 })
	// The receivers stop receiving while they probe Redis with backoff, and
	// those holding messages keep them invisible: twenty probes span several
	// visibility timeouts (1 s), so a receiver that kept receiving, or a
	// held message that was let go, would have been received a second time.
	eventually(t, "receivers probing Redis instead of receiving", func() bool {
		return strings.Count(s.log.String(), "store unavailable, ") >= 20
	})
	if got := s.metric(t, received); got > float64(len(ids)) {
		t.Fatalf("%v receives of %d messages while Redis was down", got, len(ids))
	}
	if s.metric(t, messagesHeld) < 1 || s.metric(t, extensions) < 1 {
		t.Fatalf("held %v, visibility extensions %v during the outage", s.metric(t, messagesHeld), s.metric(t, extensions))
	}
	if got := s.metric(t, deleted); got != 0 {
		t.Fatalf("%v messages deleted while Redis was down", got)
	}
	if n := s.inQueue(t, s.q.URL); n != len(ids) {
		t.Fatalf("queue holds %d messages, want %d", n, len(ids))
	}
	s.redis.Start()
	for _, id := range ids {
		s.waitDone(t, id, 15*time.Minute)
	}
	eventually(t, "all deleted", func() bool { return s.metric(t, deleted) == float64(len(ids)) && s.inQueue(t, s.q.URL) == 0 })
	if n := s.inQueue(t, s.q.DLQURL); n != 0 {
		t.Errorf("%d messages went to the DLQ during the outage", n)
	}
	if got := s.metric(t, received); got != float64(len(ids)) {
		t.Errorf("%v receives of %d messages: the outage added receives", got, len(ids))
	}
	if got := s.metric(t, messagesHeld); got != 0 {
		t.Errorf("%v messages still held after Redis came back", got)
	}
	if code := s.readyz(); code != http.StatusOK {
		t.Errorf("/readyz %d after Redis came back", code)
	}
}

// TestDuplicateDeliveries: S3 delivers at least once; the same event
// three times is three deletions, one marker, no error.
func TestDuplicateDeliveries(t *testing.T) {
	s := startStack(t, nil)
	s.sendThrice(t)
	keys, err := s.rdb.Keys(context.Background(), "*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("keys %v, %v", keys, err)
	}
	if s.metric(t, recordsDone) != 3 || s.metric(t, handleErrs) != 0 || s.metric(t, unparseable) != 0 {
		t.Errorf("done %v, errors %v", s.metric(t, recordsDone), s.metric(t, handleErrs))
	}
	if s.metric(t, received) < 3 {
		t.Errorf("received %v", s.metric(t, received))
	}
}
