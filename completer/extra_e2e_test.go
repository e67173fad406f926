package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/google/uuid"

	"github.com/mintgate/mintgate/shared/events"
	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/quota"
)

// read is the body of key, failing the test when it is not there.
func (s *gateStack) read(t *testing.T, key string) []byte {
	t.Helper()
	out, err := s.gw.Client().GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String(s.gw.Bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func extraSeries(outcome string) string {
	return `mintgate_completer_extra_objects_total{outcome="` + outcome + `",tenant="acme"}`
}

// TestReputAfterRejection (issue 36, item 1): one grant, one object. An
// image/png grant holding HTML is rejected and its object quarantined,
// which empties incoming/<key>: the URL, still live, PUTs again (200).
// That object used to stay in incoming/ for good, unverified, with the
// status rejected and the completer silent. Now it is gone from incoming/
// within seconds, counted; the quarantined evidence is still the first
// object; the status stays rejected with its one rejected event, and no
// completed one. A completed upload's URL cannot PUT again: its object
// stays, and If-None-Match: * answers 412.
func TestReputAfterRejection(t *testing.T) {
	s := startGateStack(t, nil)
	first := []byte("<!DOCTYPE html><html><body>first</body></html>")
	second := []byte("<!DOCTYPE html><html><body>the second PUT</body></html>")
	id := s.upload(t, "image/png", len(first), first)
	s.assertRejected(t, id, reasonType, len(first))

	key, q := keys.Object("acme", id), events.QuarantineKey("acme", id)
	s.put(t, key, "image/png", second) // the same URL again: S3 takes it
	put := time.Now()
	eventually(t, "the second object removed from incoming/", func() bool { return !s.exists(t, key) })
	t.Logf("the second object was in incoming/ for %v at most", time.Since(put).Round(time.Millisecond))
	if got := scrape(t, s.addr, extraSeries(extraDeleted)); got != 1 {
		t.Errorf("extra_objects_total deleted = %v, want 1", got)
	}
	if got := s.read(t, q); !bytes.Equal(got, first) {
		t.Errorf("quarantine/ holds %q, want the first object %q", got, first)
	}
	if m := s.marker(id); m != quota.Rejected(reasonType) {
		t.Errorf("marker %q, want rejected", m)
	}
	s.rejectedEvent(t, id) // exactly one rejected event, no completed one
	if got := scrape(t, s.addr, rejectedSeries(reasonType)); got != 1 {
		t.Errorf("rejected_total %v, want 1", got)
	}

	good := realPNG(t, 8, 8)
	goodID := s.upload(t, "image/png", len(good), good)
	s.assertCompleted(t, goodID)
	_, err := s.gw.Client().PutObject(context.Background(), &s3.PutObjectInput{
		Bucket: aws.String(s.gw.Bucket), Key: aws.String(keys.Object("acme", goodID)), Body: bytes.NewReader(first),
		ContentType: aws.String("image/png"), IfNoneMatch: aws.String("*"),
	})
	if !isCode(err, "PreconditionFailed") {
		t.Errorf("a second PUT on a completed upload: %v, want 412 PreconditionFailed", err)
	}
	if got := s.read(t, keys.Object("acme", goodID)); !bytes.Equal(got, good) {
		t.Error("the completed object changed")
	}
}

// TestReputNeverOverwritesEvidence (issue 36, item 1): a completer killed
// after the quarantine's delete, before the marker reads rejected, leaves
// the intent; a re-PUT lands in incoming/ meanwhile. The redelivered
// record used to copy that second object over the quarantined first one:
// the evidence of the verdict overwritten by what the uploader chose.
// Now the quarantined object stays the first, the second is deleted and
// counted, and the rejection finishes once.
func TestReputNeverOverwritesEvidence(t *testing.T) {
	s := startGateStack(t, nil)
	ctx := context.Background()
	id := uuid.NewString()
	key, q := keys.Object("acme", id), events.QuarantineKey("acme", id)
	first := []byte("<html>the rejected object</html>")
	// The killed completer's writes: the intent, the copy in quarantine/
	// (outside incoming/: no notification), the delete.
	s.rdb.Set(ctx, keys.Done("acme", id), quota.Rejecting(reasonType), quota.MarkerTTL)
	s.put(t, q, "image/png", first)
	// The uploader's second PUT: its own record comes too.
	s.put(t, key, "image/png", []byte("<html>chosen after the verdict</html>"))

	record := strings.ReplaceAll(fixture(t, "direct-put.json", id), fixtureBucket, s.gw.Bucket)
	if _, err := s.fq.Client().SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(s.q.URL), MessageBody: aws.String(record)}); err != nil {
		t.Fatal(err)
	}
	s.waitMarker(t, id, quota.Rejected(reasonType))
	eventually(t, "incoming/ emptied", func() bool { return !s.exists(t, key) })
	eventually(t, "both records handled", func() bool { return scrape(t, s.addr, recordsDone) == 2 })
	if got := s.read(t, q); !bytes.Equal(got, first) {
		t.Errorf("quarantine/ holds %q, want the first object %q", got, first)
	}
	// The two records may be handled at once, and both deletes succeed
	// (S3 answers a delete of nothing with success): at least one.
	if got := scrape(t, s.addr, extraSeries(extraDeleted)); got < 1 || got > 2 {
		t.Errorf("extra_objects_total deleted = %v, want 1 or 2", got)
	}
	if ev := s.rejectedEvent(t, id); ev.Reason != reasonType {
		t.Errorf("rejected event %+v", ev)
	}
	time.Sleep(time.Second)
	if s.exists(t, key) || s.marker(id) != quota.Rejected(reasonType) {
		t.Errorf("after both records: in incoming/ %v, marker %q", s.exists(t, key), s.marker(id))
	}
}
