package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/quota"
	"github.com/mintgate/mintgate/shared/testenv"
)

// TestUploadThroughVersityGWIsMarkedDone: the whole local S3 → SQS path.
// A PUT on the real versitygw fires its webhook, the bridge sends AWS's
// notification to fauxqs, and the completer marks the upload done; the
// test event of the start and a key that is no upload are ignored.
func TestUploadThroughVersityGWIsMarkedDone(t *testing.T) {
	rs := testenv.StartRedis(t)
	fq := testenv.StartFauxqs(t)
	q := fq.CreateQueue(t, "uploads", testenv.QueueOptions{VisibilityTimeout: 5 * time.Second, MaxReceiveCount: 3})
	bridge := testenv.StartBridge(t, q.URL, fq.Endpoint)
	gw := testenv.StartVersityGW(t, bridge.URL)

	addr, vars := completerEnv(t, rs, fq, q, gw.Bucket)
	log := &testenv.Buffer{}
	startCompleter(t, addr, vars, log)
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer rdb.Close()

	id := uuid.NewString()
	ctx := context.Background()
	// Another bucket on the same server notifies the same queue: its object
	// under our urlId's key must not mark the grant done.
	const foreign = "another-app"
	if _, err := gw.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(foreign)}); err != nil {
		t.Fatal(err)
	}
	foreignID := uuid.NewString()
	for _, put := range []struct{ bucket, key string }{
		{foreign, "incoming/acme/" + foreignID},
		{gw.Bucket, "incoming/acme/" + id},
		{gw.Bucket, "incoming/acme/my photo+1.jpg"},
	} {
		if _, err := gw.Client().PutObject(ctx, &s3.PutObjectInput{
			Bucket: aws.String(put.bucket), Key: aws.String(put.key), Body: strings.NewReader("hello"),
			ContentType: aws.String("image/jpeg"), IfNoneMatch: aws.String("*"),
		}); err != nil {
			t.Fatal(err)
		}
	}
	done := keys.Done("acme", id)
	eventually(t, "done marker "+done, func() bool { return rdb.Exists(ctx, done).Val() == 1 })
	// MINTGATE_DONE_TTL is 15 min, below quota.MarkerTTL: the marker
	// lives MarkerTTL, past every ledger message of its grant.
	if ttl := rdb.TTL(ctx, done).Val(); ttl <= quota.MarkerTTL-time.Minute || ttl > quota.MarkerTTL {
		t.Errorf("TTL %s", ttl)
	}
	eventually(t, "all four messages handled", func() bool {
		return scrape(t, addr, deleted) == 4 &&
			scrape(t, addr, ignored("test_event")) == 1 &&
			scrape(t, addr, ignored("bad_url_id")) == 1 &&
			scrape(t, addr, ignored("foreign_bucket")) == 1
	})
	if n := rdb.DBSize(ctx).Val(); n != 1 {
		t.Errorf("%d keys in Redis, want the one marker", n)
	}
}

// TestUploadThroughVersityGWPublishesOneEvent: a real PUT on versitygw,
// its webhook through the bridge and fauxqs, ends in exactly one
// upload-completed event with the object's size and ETag; the same S3
// event delivered a second time (the webhook body posted again) is still
// one event.
func TestUploadThroughVersityGWPublishesOneEvent(t *testing.T) {
	rs := testenv.StartRedis(t)
	es := startEventStream(t)
	fq := testenv.StartFauxqs(t)
	q := fq.CreateQueue(t, "uploads", testenv.QueueOptions{VisibilityTimeout: 5 * time.Second, MaxReceiveCount: 3})
	bridge := testenv.StartBridge(t, q.URL, fq.Endpoint)
	// Between versitygw and the bridge: keep each webhook body to post it
	// again.
	var mu sync.Mutex
	var posted [][]byte
	tap := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		posted = append(posted, body)
		mu.Unlock()
		resp, err := http.Post(bridge.URL, r.Header.Get("Content-Type"), bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		resp.Body.Close()
		w.WriteHeader(resp.StatusCode)
	}))
	t.Cleanup(tap.Close)
	gw := testenv.StartVersityGW(t, tap.URL)

	addr, vars := completerEnv(t, rs, fq, q, gw.Bucket)
	vars["MINTGATE_NATS_URL"] = es.nats.URL()
	startCompleter(t, addr, vars, &testenv.Buffer{})

	id := uuid.NewString()
	key := "incoming/acme/" + id
	body := "hello, events"
	out, err := gw.Client().PutObject(context.Background(), &s3.PutObjectInput{
		Bucket: aws.String(gw.Bucket), Key: aws.String(key), Body: strings.NewReader(body),
		ContentType: aws.String("image/jpeg"), IfNoneMatch: aws.String("*"),
	})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "one event published", func() bool { return scrape(t, addr, eventsPublished) == 1 })
	evs := es.events(t)
	if len(evs) != 1 {
		t.Fatalf("events %+v, want one", evs)
	}
	ev := evs[0]
	if ev.URLID != id || ev.Tenant != "acme" || ev.Key != key || ev.Size != int64(len(body)) ||
		ev.ETag != strings.Trim(aws.ToString(out.ETag), `"`) || time.Since(ev.CompletedAt).Abs() > time.Minute {
		t.Errorf("event %+v, want urlId %s, size %d, etag %s", ev, id, len(body), aws.ToString(out.ETag))
	}

	// The same S3 event again.
	mu.Lock()
	var again []byte
	for _, p := range posted {
		if bytes.Contains(p, []byte(id)) {
			again = p
		}
	}
	mu.Unlock()
	if again == nil {
		t.Fatal("the webhook never posted the upload's event")
	}
	resp, err := http.Post(bridge.URL, "application/json", bytes.NewReader(again))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	eventually(t, "the repeated record handled", func() bool { return scrape(t, addr, recordsDone) == 2 })
	if evs := es.events(t); len(evs) != 1 {
		t.Errorf("events %+v after the repeat, want one", evs)
	}
	if got := scrape(t, addr, eventsPublished); got != 1 {
		t.Errorf("published %v", got)
	}
}
