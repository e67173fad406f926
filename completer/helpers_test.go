package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/testenv"
)

// fixtureID is the urlId in the fixtures' keys; tests swap in a fresh one.
const fixtureID = "7c9e6679-7425-40de-944b-e07fc1f90ae7"

// fixtureBucket is the bucket of the fixtures' records (AWS's example name).
const fixtureBucket = "amzn-s3-demo-bucket"

// fixture is one of AWS's event bodies in shared/s3event/testdata, with
// its urlId replaced by id.
func fixture(t *testing.T, name, id string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "shared", "s3event", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.ReplaceAll(string(b), fixtureID, id)
}

// stack is a completer running in-process against a real redis-server and
// a real fauxqs queue with a dead-letter queue.
type stack struct {
	redis *testenv.Redis
	fq    *testenv.Fauxqs
	q     testenv.Queue
	sqs   *sqs.Client
	rdb   *redis.Client
	addr  string
	log   *testenv.Buffer
}

// maxReceives is the test queue's redrive maxReceiveCount.
const maxReceives = 2

// startStack starts Redis, fauxqs with a queue (visibility 1 s, redrive
// after maxReceives) and the completer; env adds to or overrides its
// environment.
func startStack(t *testing.T, env map[string]string) *stack {
	t.Helper()
	s := &stack{redis: testenv.StartRedis(t), fq: testenv.StartFauxqs(t), log: &testenv.Buffer{}}
	s.q = s.fq.CreateQueue(t, "uploads", testenv.QueueOptions{VisibilityTimeout: time.Second, MaxReceiveCount: maxReceives})
	s.sqs = s.fq.Client()
	s.rdb = redis.NewClient(&redis.Options{Addr: s.redis.Addr})
	t.Cleanup(func() { s.rdb.Close() })
	var vars map[string]string
	s.addr, vars = completerEnv(t, s.redis, s.fq, s.q, fixtureBucket)
	for k, v := range env {
		vars[k] = v
	}
	startCompleter(t, s.addr, vars, s.log)
	return s
}

// completerEnv is a free address for a completer and its environment:
// Redis, the queue on fauxqs, the bucket, the test's AWS credentials.
func completerEnv(t *testing.T, rs *testenv.Redis, fq *testenv.Fauxqs, q testenv.Queue, bucket string) (string, map[string]string) {
	addr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	vars := map[string]string{
		"MINTGATE_REDIS_URL":     rs.URL(),
		"MINTGATE_HTTP_ADDR":     addr,
		"MINTGATE_SQS_QUEUE_URL": q.URL,
		"MINTGATE_SQS_ENDPOINT":  fq.Endpoint,
		"MINTGATE_S3_BUCKET":     bucket,
		// The fixtures name objects no S3 holds, and these tests are of
		// the markers and events: the content checks are off (the size
		// check stays: no grant record, nothing to compare). The gate's
		// own tests turn them on (gate_test.go).
		"MINTGATE_VERIFY": "off",
	}
	for k, v := range testenv.AWSEnv() {
		vars[k] = v
	}
	return addr, vars
}

// sendThrice sends one upload's direct-put notification three times, as S3
// may, and waits until all three are deleted and its marker is set. It
// returns the upload's urlId.
func (s *stack) sendThrice(t *testing.T) string {
	t.Helper()
	id := uuid.NewString()
	body := fixture(t, "direct-put.json", id)
	for range 3 {
		s.send(t, body)
	}
	eventually(t, "all deleted", func() bool { return s.metric(t, deleted) == 3 && s.inQueue(t, s.q.URL) == 0 })
	s.waitDone(t, id, 15*time.Minute)
	return id
}

// readyz is the status code of the completer's /readyz, 0 if it does not
// answer.
func (s *stack) readyz() int {
	resp, err := http.Get("http://" + s.addr + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// startCompleter runs the completer in-process until the test ends, and
// checks then that it shut down cleanly.
func startCompleter(t *testing.T, addr string, vars map[string]string, log *testenv.Buffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- run(ctx, []string{"completer"}, func(k string) string { return vars[k] }, log) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-errc:
			if err != nil {
				t.Errorf("completer: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("completer did not stop:\n%s", log)
		}
	})
	eventually(t, "completer answers /healthz", func() bool {
		select {
		case err := <-errc:
			t.Fatalf("completer stopped: %v\n%s", err, log)
		default:
		}
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// send puts body in the completer's queue.
func (s *stack) send(t *testing.T, body string) {
	t.Helper()
	if _, err := s.sqs.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(s.q.URL), MessageBody: aws.String(body)}); err != nil {
		t.Fatal(err)
	}
}

// inQueue is how many messages the queue holds, visible or in flight.
func (s *stack) inQueue(t *testing.T, url string) int {
	t.Helper()
	n, err := queueDepth(context.Background(), s.sqs, url)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// metric is the value of one series on /metrics, such as
// `mintgate_completer_ignored_total{reason="test_event"}`; the test fails
// when there is no such series.
func (s *stack) metric(t *testing.T, series string) float64 {
	t.Helper()
	return scrape(t, s.addr, series)
}

// scrape is the value of one series on the /metrics of the completer at
// addr; the test fails when there is no such series.
func scrape(t *testing.T, addr, series string) float64 {
	t.Helper()
	return testenv.Metric(t, "http://"+addr+"/metrics", series)
}

// scrapeSeries is the value of one series on /metrics and whether it is
// there at all.
func scrapeSeries(t *testing.T, addr, series string) (float64, bool) {
	t.Helper()
	return testenv.MetricIfPresent(t, "http://"+addr+"/metrics", series)
}

// eventually polls cond until it holds or a generous deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// doneTTL is the TTL of a done marker, or a negative value when absent.
func (s *stack) doneTTL(t *testing.T, key string) time.Duration {
	t.Helper()
	ttl, err := s.rdb.PTTL(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return ttl
}
