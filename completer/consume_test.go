package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/backoff"
	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/pipeline"
	"github.com/mintgate/mintgate/shared/quota"
	"github.com/mintgate/mintgate/shared/s3event"
	"github.com/mintgate/mintgate/shared/testenv"
)

// fakeQueue records deletions and visibility changes; some receipt
// handles fail to delete. A receive returns the next batch sent on deliver
// (never, when deliver is nil) or ends with its context.
type fakeQueue struct {
	mu         sync.Mutex
	deleted    []string
	failing    map[string]bool
	batchLen   []int
	extended   []string // receipt handles, once per extension
	visibility []int32
	deliver    chan []types.Message
	receives   int // ReceiveMessage calls
	cut        int // of which ended by their context
}

func (f *fakeQueue) ReceiveMessage(ctx context.Context, _ *sqs.ReceiveMessageInput, _ ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	f.mu.Lock()
	f.receives++
	f.mu.Unlock()
	select {
	case msgs := <-f.deliver:
		return &sqs.ReceiveMessageOutput{Messages: msgs}, nil
	case <-ctx.Done():
		f.mu.Lock()
		f.cut++
		f.mu.Unlock()
		return nil, ctx.Err()
	}
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

func (f *fakeQueue) ChangeMessageVisibilityBatch(_ context.Context, in *sqs.ChangeMessageVisibilityBatchInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := &sqs.ChangeMessageVisibilityBatchOutput{}
	for _, e := range in.Entries {
		f.extended = append(f.extended, aws.ToString(e.ReceiptHandle))
		f.visibility = append(f.visibility, e.VisibilityTimeout)
		out.Successful = append(out.Successful, types.ChangeMessageVisibilityBatchResultEntry{Id: e.Id})
	}
	return out, nil
}

// state is a copy of what f saw.
func (f *fakeQueue) state() (deleted, extended []string, receives, cut int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.deleted), slices.Clone(f.extended), f.receives, f.cut
}

func (f *fakeQueue) visibilitySeen() []int32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.visibility)
}

func msg(handle, body string) types.Message {
	return types.Message{ReceiptHandle: aws.String(handle), MessageId: aws.String(handle), Body: aws.String(body)}
}

func newTestConsumer(q queue, handle func(context.Context, s3event.Notification) error) (*consumer, *metrics) {
	m := newMetrics(prometheus.NewRegistry())
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	return &consumer{q: q, queueURL: "q", handle: handle, ready: func(context.Context) error { return nil },
		polls: newPolls(), m: m, log: log, backoff: backoff.Policy{Min: time.Millisecond, Max: time.Millisecond, Jitter: 0.5}}, m
}

const goodBody = `{"Records":[{"eventSource":"aws:s3","eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"b"},"object":{"key":"incoming/acme/7c9e6679-7425-40de-944b-e07fc1f90ae7"}}}]}`

// TestBatchDeletesOnlyHandledMessages: unparseable messages stay for the
// DLQ; a handle failure stops the batch and returns the rest (to hold); what
// was handled before it is deleted in one batch call.
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
	rest := c.batch(context.Background(), c.log, []types.Message{
		msg("a", goodBody), msg("junk", "not json"), msg("b", goodBody), msg("fails", goodBody), msg("after", goodBody),
	})
	if len(rest) != 2 || aws.ToString(rest[0].msg.ReceiptHandle) != "fails" || aws.ToString(rest[1].msg.ReceiptHandle) != "after" {
		t.Errorf("not handled: %v, want fails and after", rest)
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
	if rest := c.batch(context.Background(), c.log, []types.Message{msg("a", goodBody), msg("b", goodBody)}); len(rest) != 0 {
		t.Fatalf("batch left %v", rest)
	}
	if testutil.ToFloat64(m.deleted) != 1 || testutil.ToFloat64(m.errors.WithLabelValues(opDelete)) != 1 {
		t.Errorf("deleted %v, delete errors %v", testutil.ToFloat64(m.deleted), testutil.ToFloat64(m.errors.WithLabelValues(opDelete)))
	}
}

// store is a fake Redis for the consumer: handle and ready fail while
// it is down; handle records what it marked.
type store struct {
	down   atomic.Bool
	mu     sync.Mutex
	tries  int
	marked []string
}

func (s *store) handle(_ context.Context, n s3event.Notification) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tries++
	if s.down.Load() {
		return errors.New("connection refused")
	}
	key := n.Records[0].S3.Object.URLDecodedKey
	s.marked = append(s.marked, key)
	return nil
}

func (s *store) ready(context.Context) error {
	if s.down.Load() {
		return errors.New("connection refused")
	}
	return nil
}

func (s *store) state() (tries int, marked []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tries, slices.Clone(s.marked)
}

// startHolding runs one receiver against q and st with fast extensions,
// until the test ends or stop is called.
func startHolding(t *testing.T, q *fakeQueue, st *store) (*consumer, *metrics, func()) {
	t.Helper()
	c, m := newTestConsumer(q, st.handle)
	c.ready = st.ready
	c.hold, c.extendEvery = 30*time.Second, 5*time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.run(ctx, 1) }()
	stop := func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("consumer did not stop")
		}
	}
	t.Cleanup(stop)
	return c, m, stop
}

// TestOutageHoldsAndExtends: a message whose handling fails because the
// store is down stays with its receiver, its visibility extended, not
// released for a second receive; the receiver starts no new poll; once the
// store answers it is handled once and deleted, and the extensions stop.
func TestOutageHoldsAndExtends(t *testing.T) {
	q := &fakeQueue{deliver: make(chan []types.Message)}
	st := &store{}
	st.down.Store(true)
	c, m, _ := startHolding(t, q, st)
	q.deliver <- []types.Message{msg("a", goodBody), msg("junk", "not json")}

	eventually(t, "held message extended several times", func() bool {
		_, ext, _, _ := q.state()
		return len(ext) >= 5
	})
	deleted, ext, receives, _ := q.state()
	if len(deleted) != 0 || receives != 1 {
		t.Fatalf("during the outage: deleted %v, %d receives; want none deleted and no new poll", deleted, receives)
	}
	for _, h := range ext {
		if h != "a" {
			t.Fatalf("extended %q; only the held message (not the unparseable one) is extended", h)
		}
	}
	if got := slices.Compact(q.visibilitySeen()); !slices.Equal(got, []int32{30}) {
		t.Errorf("visibility timeouts %v, want 30", got)
	}
	if !c.polls.held() || testutil.ToFloat64(m.held) != 1 || testutil.ToFloat64(m.extended) < 5 {
		t.Errorf("polls held %v, held %v, extended %v", c.polls.held(), testutil.ToFloat64(m.held), testutil.ToFloat64(m.extended))
	}

	st.down.Store(false)
	eventually(t, "held message handled and deleted", func() bool {
		deleted, _, _, _ := q.state()
		return slices.Equal(deleted, []string{"a"})
	})
	eventually(t, "receiving again", func() bool {
		_, _, receives, _ := q.state()
		return receives == 2
	})
	_, ext, _, _ = q.state()
	time.Sleep(50 * time.Millisecond)
	if _, ext2, _, _ := q.state(); len(ext2) != len(ext) {
		t.Errorf("%d extensions after the message was deleted", len(ext2)-len(ext))
	}
	if _, marked := st.state(); len(marked) != 1 {
		t.Errorf("marked %v, want the one upload once", marked)
	}
	if c.polls.held() || testutil.ToFloat64(m.held) != 0 || testutil.ToFloat64(m.unparseable) != 1 || testutil.ToFloat64(m.deleted) != 1 {
		t.Errorf("polls held %v, held %v, unparseable %v, deleted %v", c.polls.held(), testutil.ToFloat64(m.held),
			testutil.ToFloat64(m.unparseable), testutil.ToFloat64(m.deleted))
	}
}

// TestPollInFlightWhenPollsAreHeld: a long poll in flight when polls are held
// closes is not cut short (SQS would complete it server-side anyway); what
// it returns is held without trying the store, and handled once it answers.
func TestPollInFlightWhenPollsAreHeld(t *testing.T) {
	q := &fakeQueue{deliver: make(chan []types.Message)}
	st := &store{}
	c, m, _ := startHolding(t, q, st)
	eventually(t, "poll in flight", func() bool {
		_, _, receives, _ := q.state()
		return receives == 1
	})
	st.down.Store(true)
	c.polls.hold() // another receiver found the store down
	time.Sleep(20 * time.Millisecond)
	q.deliver <- []types.Message{msg("a", goodBody)}
	eventually(t, "message held", func() bool {
		_, ext, _, _ := q.state()
		return len(ext) >= 2
	})
	if tries, _ := st.state(); tries != 0 {
		t.Errorf("handle tried %d times while polls were held", tries)
	}
	if _, _, receives, cut := q.state(); receives != 1 || cut != 0 {
		t.Errorf("%d receives, %d cut short; want the one poll, run to its end", receives, cut)
	}
	st.down.Store(false)
	eventually(t, "held message handled and deleted", func() bool {
		deleted, _, _, _ := q.state()
		return slices.Equal(deleted, []string{"a"})
	})
	if tries, marked := st.state(); tries != 1 || len(marked) != 1 || testutil.ToFloat64(m.held) != 0 {
		t.Errorf("handle tried %d times, marked %v, held %v", tries, marked, testutil.ToFloat64(m.held))
	}
}

// TestShutdownWhileHolding: on shutdown a holder stops extending and leaves
// its messages to reappear; nothing not handled is deleted.
func TestShutdownWhileHolding(t *testing.T) {
	q := &fakeQueue{deliver: make(chan []types.Message)}
	st := &store{}
	st.down.Store(true)
	_, m, stop := startHolding(t, q, st)
	q.deliver <- []types.Message{msg("a", goodBody), msg("b", goodBody)}
	eventually(t, "messages held", func() bool {
		_, ext, _, _ := q.state()
		return len(ext) >= 4
	})
	stop()
	deleted, ext, _, _ := q.state()
	time.Sleep(30 * time.Millisecond)
	if _, ext2, _, _ := q.state(); len(deleted) != 0 || len(ext2) != len(ext) {
		t.Errorf("after shutdown: deleted %v, %d more extensions", deleted, len(ext2)-len(ext))
	}
	if testutil.ToFloat64(m.held) != 0 {
		t.Errorf("held %v after shutdown", testutil.ToFloat64(m.held))
	}
}

// poisonBody is a notification the tests' handlers call poison.
const poisonBody = `{"Records":[{"eventSource":"aws:s3","eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"b"},"object":{"key":"incoming/acme/poison"}}}]}`

// poisonous is st's handler, but a notification of the key in poisonBody
// can never be applied.
func poisonous(st *store) func(context.Context, s3event.Notification) error {
	return func(ctx context.Context, n s3event.Notification) error {
		if n.Records[0].S3.Object.URLDecodedKey == "incoming/acme/poison" {
			return fmt.Errorf("%w: no such upload", pipeline.ErrPoison)
		}
		return st.handle(ctx, n)
	}
}

// TestPoisonIsLetGoNotHeld: a notification that can never be applied is
// made visible again at once (for the redrive policy), counted as a handle
// error, and does not hold the polls: the messages around it are handled
// and deleted, and the receiver polls again at once.
func TestPoisonIsLetGoNotHeld(t *testing.T) {
	q := &fakeQueue{deliver: make(chan []types.Message)}
	st := &store{}
	c, m, _ := startHolding(t, q, st)
	c.handle = poisonous(st) // before the first delivery, which the receiver waits for
	q.deliver <- []types.Message{msg("a", goodBody), msg("p", poisonBody), msg("b", goodBody)}
	eventually(t, "good messages deleted, polling again", func() bool {
		deleted, _, receives, _ := q.state()
		return slices.Equal(deleted, []string{"a", "b"}) && receives == 2
	})
	if _, ext, _, _ := q.state(); !slices.Equal(ext, []string{"p"}) || !slices.Equal(q.visibilitySeen(), []int32{0}) {
		t.Errorf("visibility changes %v to %v; want the poison message made visible at once", ext, q.visibilitySeen())
	}
	if c.polls.held() || testutil.ToFloat64(m.errors.WithLabelValues(opHandle)) != 1 || testutil.ToFloat64(m.held) != 0 ||
		testutil.ToFloat64(m.extended) != 0 || testutil.ToFloat64(m.unparseable) != 0 {
		t.Errorf("polls held %v, handle errors %v, held %v, extended %v, unparseable %v", c.polls.held(),
			testutil.ToFloat64(m.errors.WithLabelValues(opHandle)), testutil.ToFloat64(m.held),
			testutil.ToFloat64(m.extended), testutil.ToFloat64(m.unparseable))
	}
}

// TestPoisonFoundWhileHolding: a held message that turns out to be poison
// once the store answers is let go at once; the others are deleted and the
// receiver holds nothing more.
func TestPoisonFoundWhileHolding(t *testing.T) {
	q := &fakeQueue{deliver: make(chan []types.Message)}
	st := &store{}
	st.down.Store(true)
	c, m, _ := startHolding(t, q, st)
	c.handle = poisonous(st) // before the first delivery, which the receiver waits for
	q.deliver <- []types.Message{msg("a", goodBody), msg("p", poisonBody)}
	eventually(t, "held", func() bool { return testutil.ToFloat64(m.held) == 2 })
	st.down.Store(false)
	eventually(t, "receiving again", func() bool {
		_, _, receives, _ := q.state()
		return receives == 2
	})
	deleted, _, _, _ := q.state()
	vis := q.visibilitySeen()
	if !slices.Equal(deleted, []string{"a"}) || len(vis) == 0 || vis[len(vis)-1] != 0 {
		t.Errorf("deleted %v, visibility timeouts %v; want a deleted, p made visible at once last", deleted, vis)
	}
	if c.polls.held() || testutil.ToFloat64(m.held) != 0 {
		t.Errorf("polls held %v, held %v", c.polls.held(), testutil.ToFloat64(m.held))
	}
}

// TestPoisonGoesToTheDLQAtOnce: on real Redis and a real queue, a
// notification the handler calls poison reaches the dead-letter queue
// after maxReceiveCount receives in quick succession, not one visibility
// timeout (the queue's own, 30 s) per receive, with its body; the upload
// sent after it is marked done; nothing is held.
func TestPoisonGoesToTheDLQAtOnce(t *testing.T) {
	s := &stack{redis: testenv.StartRedis(t), fq: testenv.StartFauxqs(t), log: &testenv.Buffer{}}
	s.q = s.fq.CreateQueue(t, "uploads", testenv.QueueOptions{MaxReceiveCount: maxReceives})
	s.sqs = s.fq.Client()
	s.rdb = redis.NewClient(&redis.Options{Addr: s.redis.Addr})
	t.Cleanup(func() { s.rdb.Close() })
	m := newMetrics(prometheus.NewRegistry())
	log := slog.New(slog.NewTextHandler(s.log, nil))
	comp := &completer{store: quota.New(s.rdb), bucket: fixtureBucket, doneTTL: 15 * time.Minute, gate: &gate{}, m: m, log: log}
	poisonID, goodID := uuid.NewString(), uuid.NewString()
	c := &consumer{q: s.sqs, queueURL: s.q.URL, m: m, log: log, polls: newPolls(),
		backoff: backoff.Policy{Min: 100 * time.Millisecond, Max: time.Second, Jitter: 0.5},
		ready:   func(ctx context.Context) error { return s.rdb.Ping(ctx).Err() },
		handle: func(ctx context.Context, n s3event.Notification) error {
			if strings.HasSuffix(n.Records[0].S3.Object.URLDecodedKey, poisonID) {
				return fmt.Errorf("%w: upload %s", pipeline.ErrPoison, poisonID)
			}
			return comp.handle(ctx, n)
		}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.run(ctx, 2) }()
	t.Cleanup(func() { cancel(); <-done })

	start := time.Now()
	poison := fixture(t, "direct-put.json", poisonID)
	s.send(t, poison)
	s.send(t, fixture(t, "direct-put.json", goodID))
	eventually(t, "poison message in the DLQ", func() bool { return s.inQueue(t, s.q.DLQURL) == 1 })
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("poison reached the DLQ after %v: it waited out visibility timeouts", took)
	}
	s.waitDone(t, goodID, 15*time.Minute)
	eventually(t, "main queue empty", func() bool { return s.inQueue(t, s.q.URL) == 0 })
	out, err := s.sqs.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(s.q.DLQURL), WaitTimeSeconds: 1})
	if err != nil || len(out.Messages) != 1 || aws.ToString(out.Messages[0].Body) != poison {
		t.Fatalf("DLQ holds %+v, %v", out.Messages, err)
	}
	if n := s.rdb.Exists(context.Background(), keys.Done("acme", poisonID)).Val(); n != 0 {
		t.Error("the poison upload got a done marker")
	}
	if got := testutil.ToFloat64(m.errors.WithLabelValues(opHandle)); got != maxReceives {
		t.Errorf("handle errors %v, want one per receive: %d", got, maxReceives)
	}
	if testutil.ToFloat64(m.held) != 0 || testutil.ToFloat64(m.extended) != 0 || testutil.ToFloat64(m.deleted) != 1 || c.polls.held() {
		t.Errorf("held %v, extended %v, deleted %v, polls held %v", testutil.ToFloat64(m.held), testutil.ToFloat64(m.extended),
			testutil.ToFloat64(m.deleted), c.polls.held())
	}
	if !strings.Contains(s.log.String(), "notification can never be applied") || !strings.Contains(s.log.String(), poisonID) {
		t.Errorf("no log line with the poison body:\n%s", s.log)
	}
}

// fakeRedis fails setting a done marker after ok successes.
type fakeRedis struct {
	ok   int
	sets []string
}

func (f *fakeRedis) Complete(ctx context.Context, now time.Time, c quota.Completion) (quota.Completed, error) {
	if len(f.sets) >= f.ok {
		return quota.Completed{}, errors.New("connection refused")
	}
	f.sets = append(f.sets, keys.Done(c.Tenant, c.URLID))
	return quota.Completed{}, nil
}

// Settle moves every marker: this fake holds no values.
func (f *fakeRedis) Settle(ctx context.Context, tenant, urlID, from, to string) (string, bool, error) {
	return from, true, nil
}

// Shape finds no grant record.
func (f *fakeRedis) Shape(ctx context.Context, tenant, urlID string) (quota.GrantShape, error) {
	return quota.GrantShape{}, nil
}

// TestHandleFailsWholeNotification: a Redis failure on any record fails the
// notification, so its message is not deleted and every record comes back.
func TestHandleFailsWholeNotification(t *testing.T) {
	const a, b = "7c9e6679-7425-40de-944b-e07fc1f90ae7", "0f8fad5b-d9cb-469f-a165-70867728950e"
	body := `{"Records":[` + strings.Join([]string{
		`{"eventSource":"aws:s3","eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"b"},"object":{"key":"incoming/acme/` + a + `"}}}`,
		`{"eventSource":"aws:s3","eventName":"ObjectRemoved:Delete","s3":{"bucket":{"name":"b"},"object":{"key":"incoming/acme/` + a + `"}}}`,
		`{"eventSource":"aws:s3","eventName":"ObjectCreated:Copy","s3":{"bucket":{"name":"b"},"object":{"key":"incoming/acme/` + b + `"}}}`,
	}, ",") + `]}`
	n, err := s3event.Parse([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	m := newMetrics(prometheus.NewRegistry())
	rdb := &fakeRedis{ok: 1}
	c := &completer{store: rdb, bucket: "b", doneTTL: time.Minute, gate: &gate{}, m: m, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
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
