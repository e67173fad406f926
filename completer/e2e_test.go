package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/keys"
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

	addr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	vars := map[string]string{
		"MINTGATE_REDIS_URL":     rs.URL(),
		"MINTGATE_HTTP_ADDR":     addr,
		"MINTGATE_SQS_QUEUE_URL": q.URL,
		"MINTGATE_SQS_ENDPOINT":  fq.Endpoint,
		"MINTGATE_S3_BUCKET":     gw.Bucket,
	}
	for k, v := range testenv.AWSEnv() {
		vars[k] = v
	}
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
	if ttl := rdb.TTL(ctx, done).Val(); ttl <= 14*time.Minute || ttl > 15*time.Minute {
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
