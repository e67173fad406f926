package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/s3event"
)

// fakeQueue records deletions; some receipt handles fail to delete.
type fakeQueue struct {
	mu       sync.Mutex
	deleted  []string
	failing  map[string]bool
	batchLen []int
}

func (f *fakeQueue) ReceiveMessage(ctx context.Context, _ *sqs.ReceiveMessageInput, _ ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (f *fakeQueue) DeleteMessageBatch(_ context.Context, in *sqs.DeleteMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.batchLen = append(f.batchLen, len(in.Entries))
	out := &sqs.DeleteMessageBatchOutput{}
	for _, e := range in.Entries {
		h := aws.ToString(e.ReceiptHandle)
		if f.failing[h] {
			out.Failed = append(out.Failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String("ReceiptHandleIsInvalid")})
			continue
		}
		f.deleted = append(f.deleted, h)
		out.Successful = append(out.Successful, types.DeleteMessageBatchResultEntry{Id: e.Id})
	}
	return out, nil
}

func msg(handle, body string) types.Message {
	return types.Message{ReceiptHandle: aws.String(handle), MessageId: aws.String(handle), Body: aws.String(body)}
}

func newTestConsumer(q queue, handle func(context.Context, s3event.Notification) error) (*consumer, *metrics) {
	m := newMetrics(prometheus.NewRegistry())
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	return &consumer{q: q, queueURL: "q", handle: handle, ready: func(context.Context) error { return nil },
		gate: newGate(), m: m, log: log, backoff: backoff{min: time.Millisecond, max: time.Millisecond}}, m
}

const goodBody = `{"Records":[{"eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"b"},"object":{"key":"incoming/acme/7c9e6679-7425-40de-944b-e07fc1f90ae7"}}}]}`

// TestBatchDeletesOnlyHandledMessages: unparseable messages stay for the
// DLQ; a handle failure stops the batch and leaves the rest; what was
// handled before it is deleted in one batch call.
func TestBatchDeletesOnlyHandledMessages(t *testing.T) {
	q := &fakeQueue{}
	calls := 0
	c, m := newTestConsumer(q, func(context.Context, s3event.Notification) error {
		calls++
		if calls == 3 {
			return errors.New("redis down")
		}
		return nil
	})
	ok := c.batch(context.Background(), c.log, []types.Message{
		msg("a", goodBody), msg("junk", "not json"), msg("b", goodBody), msg("fails", goodBody), msg("after", goodBody),
	})
	if ok {
		t.Error("batch reported success despite a failed handle")
	}
	if !slices.Equal(q.deleted, []string{"a", "b"}) || !slices.Equal(q.batchLen, []int{2}) {
		t.Errorf("deleted %v in batches %v", q.deleted, q.batchLen)
	}
	if calls != 3 {
		t.Errorf("handle called %d times; the batch must stop at the failure", calls)
	}
	if testutil.ToFloat64(m.unparseable) != 1 || testutil.ToFloat64(m.errors.WithLabelValues(opHandle)) != 1 || testutil.ToFloat64(m.deleted) != 2 {
		t.Errorf("metrics unparseable %v handle errors %v deleted %v", testutil.ToFloat64(m.unparseable),
			testutil.ToFloat64(m.errors.WithLabelValues(opHandle)), testutil.ToFloat64(m.deleted))
	}
}

func TestFailedDeletesAreCounted(t *testing.T) {
	q := &fakeQueue{failing: map[string]bool{"b": true}}
	c, m := newTestConsumer(q, func(context.Context, s3event.Notification) error { return nil })
	if !c.batch(context.Background(), c.log, []types.Message{msg("a", goodBody), msg("b", goodBody)}) {
		t.Fatal("batch failed")
	}
	if testutil.ToFloat64(m.deleted) != 1 || testutil.ToFloat64(m.errors.WithLabelValues(opDelete)) != 1 {
		t.Errorf("deleted %v, delete errors %v", testutil.ToFloat64(m.deleted), testutil.ToFloat64(m.errors.WithLabelValues(opDelete)))
	}
}

// TestGateCutsLongPolls: when one receiver finds the store down, the long
// polls of the others end instead of taking messages they cannot handle.
func TestGateCutsLongPolls(t *testing.T) {
	g := newGate()
	ctx, stop := g.whileUp(context.Background())
	defer stop()
	g.down()
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a long poll outlived the gate")
	}
	if !g.isDown() {
		t.Fatal("gate open")
	}
	g.up()
	ctx2, stop2 := g.whileUp(context.Background())
	defer stop2()
	if ctx2.Err() != nil || g.isDown() {
		t.Fatal("gate did not open again")
	}
}

func TestBackoffGrowsAndIsCapped(t *testing.T) {
	b := backoff{min: 100 * time.Millisecond, max: 5 * time.Second}
	for n, hi := range map[int]time.Duration{1: 100 * time.Millisecond, 3: 400 * time.Millisecond, 10: 5 * time.Second, 1000: 5 * time.Second} {
		if d := b.wait(n); d < hi/2 || d > hi {
			t.Errorf("wait(%d) = %s, want in [%s, %s]", n, d, hi/2, hi)
		}
	}
}

// fakeRedis fails SET after ok successes.
type fakeRedis struct {
	ok   int
	sets []string
}

func (f *fakeRedis) Set(ctx context.Context, key string, value any, ttl time.Duration) *redis.StatusCmd {
	cmd := redis.NewStatusCmd(ctx)
	if len(f.sets) >= f.ok {
		cmd.SetErr(errors.New("connection refused"))
		return cmd
	}
	f.sets = append(f.sets, key)
	return cmd
}

// TestHandleFailsWholeNotification: a Redis failure on any record fails the
// notification, so its message is not deleted and every record comes back.
func TestHandleFailsWholeNotification(t *testing.T) {
	const a, b = "7c9e6679-7425-40de-944b-e07fc1f90ae7", "0f8fad5b-d9cb-469f-a165-70867728950e"
	body := `{"Records":[` + strings.Join([]string{
		`{"eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"b"},"object":{"key":"incoming/acme/` + a + `"}}}`,
		`{"eventName":"ObjectRemoved:Delete","s3":{"bucket":{"name":"b"},"object":{"key":"incoming/acme/` + a + `"}}}`,
		`{"eventName":"ObjectCreated:Copy","s3":{"bucket":{"name":"b"},"object":{"key":"incoming/acme/` + b + `"}}}`,
	}, ",") + `]}`
	n, err := s3event.Parse([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	m := newMetrics(prometheus.NewRegistry())
	rdb := &fakeRedis{ok: 1}
	c := &completer{rdb: rdb, doneTTL: time.Minute, m: m, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if err := c.handle(context.Background(), n); err == nil {
		t.Fatal("handle succeeded with Redis failing")
	}
	rdb.ok = 10
	rdb.sets = nil
	if err := c.handle(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	if want := []string{keys.Done("acme", a), keys.Done("acme", b)}; !slices.Equal(rdb.sets, want) {
		t.Errorf("set %v, want %v", rdb.sets, want)
	}
}
