package ledger

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mintgate/mintgate/shared/pipeline"
	"github.com/mintgate/mintgate/shared/testenv"
)

// recorder is a handler and an observer that remember everything.
type recorder struct {
	mu       sync.Mutex
	handled  map[string]int
	outcomes []Outcome
	fail     func(g Grant, n int) error // the error of the n-th call for g, from 1
}

func newRecorder() *recorder { return &recorder{handled: map[string]int{}} }

// handle counts every grant of b; fail, when set, decides for the batch by
// its first grant.
func (r *recorder) handle(_ context.Context, b Batch) error {
	r.mu.Lock()
	for _, g := range b.Grants {
		r.handled[g.URLID]++
	}
	n := r.handled[b.Grants[0].URLID]
	fail := r.fail
	r.mu.Unlock()
	if fail != nil {
		return fail(b.Grants[0], n)
	}
	return nil
}

func (r *recorder) observe(o Outcome) {
	r.mu.Lock()
	r.outcomes = append(r.outcomes, o)
	r.mu.Unlock()
}

func (r *recorder) count(a Action) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, o := range r.outcomes {
		if o.Action == a {
			n++
		}
	}
	return n
}

func (r *recorder) calls(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.handled[id]
}

func publishDue(t *testing.T, js jetstream.JetStream, body []byte) {
	t.Helper()
	if _, err := js.Publish(context.Background(), SubjectDue, body); err != nil {
		t.Fatal(err)
	}
}

// dueGrant publishes a sealed batch of one grant straight to the due
// subject, as a fired schedule would.
func dueGrant(t *testing.T, js jetstream.JetStream, id string) {
	t.Helper()
	body, err := Seal(testSecret, Batch{ID: "b-" + id, Grants: []Grant{testGrant(id, time.Now())}})
	if err != nil {
		t.Fatal(err)
	}
	publishDue(t, js, body)
}

func consume(t *testing.T, l *Client, h Handler, opts ...ConsumeOption) func() {
	t.Helper()
	stop, err := l.Consume(context.Background(), "sweeper", h, opts...)
	if err != nil {
		t.Fatalf("Consume: %v", err)
	}
	t.Cleanup(stop)
	return stop
}

func TestConsumeRetriesWithBackoffThenAcks(t *testing.T) {
	srv := testenv.StartNATS(t)
	l := dial(t, srv.URL(), Config{})
	_, js := connect(t, srv.URL())
	r := newRecorder()
	r.fail = func(g Grant, n int) error {
		if n <= 2 {
			return errors.New("redis down")
		}
		return nil
	}
	consume(t, l, r.handle, WithObserver(r.observe), WithBackoff(100*time.Millisecond, 150*time.Millisecond))
	for i := range 10 {
		dueGrant(t, js, fmt.Sprintf("r-%d", i))
	}
	waitFor(t, 15*time.Second, "10 acks", func() bool { return r.count(Acked) == 10 })
	if got := r.count(Retried); got != 20 {
		t.Errorf("%d retries, want 20", got)
	}
	for _, o := range r.outcomes {
		if o.Action == Acked && o.Attempt != 3 {
			t.Errorf("%s acked on attempt %d, want 3", o.Batch.ID, o.Attempt)
		}
		if o.Action == Retried && (o.Retry <= 0 || o.Retry > 150*time.Millisecond) {
			t.Errorf("retry delay %v outside the backoff", o.Retry)
		}
	}
	waitForIdle(t, js)
}

// waitForIdle waits until the durable consumer has nothing pending or unacked.
func waitForIdle(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	waitFor(t, 10*time.Second, "consumer idle", func() bool {
		c, err := js.Consumer(context.Background(), DefaultStream, "sweeper")
		if err != nil {
			return false
		}
		info, err := c.Info(context.Background())
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0 && info.NumRedelivered == 0
	})
}

func TestConsumeTerminatesWhatCanNeverApply(t *testing.T) {
	srv := testenv.StartNATS(t)
	l := dial(t, srv.URL(), Config{})
	_, js := connect(t, srv.URL())
	r := newRecorder()
	r.fail = func(g Grant, n int) error {
		if g.URLID == "bad-tier" {
			return fmt.Errorf("%w: tier %q", ErrMalformed, "gold")
		}
		return nil
	}
	consume(t, l, r.handle, WithObserver(r.observe), WithBackoff(50*time.Millisecond, 50*time.Millisecond))
	// Verified by the MAC but not a batch: a signer's bug, terminated.
	noGrants, _ := json.Marshal(envelope{V: sealVersion, Batch: []byte(`{"id":"x"}`), MAC: mac(testSecret, []byte(`{"id":"x"}`))})
	publishDue(t, js, noGrants)
	dueGrant(t, js, "bad-tier")
	dueGrant(t, js, "good")
	waitFor(t, 10*time.Second, "2 terminated, 1 acked", func() bool { return r.count(Terminated) == 2 && r.count(Acked) == 1 })
	waitForIdle(t, js)
	time.Sleep(300 * time.Millisecond) // a wrong redelivery would show by now
	if r.calls("bad-tier") != 1 || r.calls("good") != 1 || r.count(Terminated) != 2 {
		t.Errorf("calls %v, outcomes %v", r.handled, r.outcomes)
	}
}

// TestConsumeFollowsThePipeline: on a real server, the shared policy's
// classes: any poison is terminated after one call, an outage is
// redelivered with backoff until it passes, and a call cut by the handle
// timeout is tried again.
func TestConsumeFollowsThePipeline(t *testing.T) {
	srv := testenv.StartNATS(t)
	l := dial(t, srv.URL(), Config{})
	_, js := connect(t, srv.URL())
	r := newRecorder()
	r.fail = func(g Grant, n int) error {
		switch {
		case g.URLID == "poison":
			return fmt.Errorf("%w: no such tenant", pipeline.ErrPoison)
		case g.URLID == "outage" && n <= 2:
			return fmt.Errorf("%w: redis down", pipeline.ErrOutage)
		}
		return nil
	}
	slow := func(ctx context.Context, b Batch) error {
		if b.Grants[0].URLID == "slow" && r.calls("slow") == 0 {
			<-ctx.Done() // cut by the handle timeout, not by this test
			r.handle(ctx, b)
			return ctx.Err()
		}
		return r.handle(ctx, b)
	}
	consume(t, l, slow, WithObserver(r.observe), WithBackoff(50*time.Millisecond, 100*time.Millisecond), WithHandleTimeout(300*time.Millisecond))
	for _, id := range []string{"poison", "outage", "slow", "fine"} {
		dueGrant(t, js, id)
	}
	waitFor(t, 15*time.Second, "3 acked, 1 terminated", func() bool { return r.count(Acked) == 3 && r.count(Terminated) == 1 })
	waitForIdle(t, js)
	time.Sleep(300 * time.Millisecond) // a wrong redelivery would show by now
	if r.calls("poison") != 1 || r.calls("outage") != 3 || r.calls("slow") != 2 || r.calls("fine") != 1 || r.count(Retried) != 3 {
		t.Errorf("calls %v, outcomes %v", r.handled, r.outcomes)
	}
	for _, o := range r.outcomes {
		if o.Action == Terminated && !errors.Is(o.Err, pipeline.ErrPoison) {
			t.Errorf("terminated for %v", o.Err)
		}
		if o.Action == Retried && (o.Retry <= 0 || o.Retry > 100*time.Millisecond) {
			t.Errorf("retry delay %v outside the backoff", o.Retry)
		}
	}
}

// A message the secret does not verify is never handed to the handler:
// garbage, a grant from before batches, a batch sealed with another
// secret, and a sealed batch whose grants were altered on the way.
func TestConsumeNeverAppliesForgeries(t *testing.T) {
	srv := testenv.StartNATS(t)
	l := dial(t, srv.URL(), Config{})
	_, js := connect(t, srv.URL())
	r := newRecorder()
	consume(t, l, r.handle, WithObserver(r.observe))

	publishDue(t, js, []byte("{not json"))
	old, _ := json.Marshal(testGrant("v1-grant", time.Now())) // the format before batches: unsigned
	publishDue(t, js, old)
	other, err := Seal([]byte("another-secret-0123456789abcdefghijkl"), Batch{ID: "o", Grants: []Grant{testGrant("other-key", time.Now())}})
	if err != nil {
		t.Fatal(err)
	}
	publishDue(t, js, other)
	sealed, err := Seal(testSecret, Batch{ID: "t", Grants: []Grant{testGrant("tampered", time.Now())}})
	if err != nil {
		t.Fatal(err)
	}
	publishDue(t, js, bytes.Replace(sealed, []byte("u:alice"), []byte("u:mallory"), 1))
	dueGrant(t, js, "genuine")

	waitFor(t, 10*time.Second, "4 forged, 1 acked", func() bool { return r.count(Forged) == 4 && r.count(Acked) == 1 })
	waitForIdle(t, js)
	time.Sleep(300 * time.Millisecond)
	if len(r.handled) != 1 || r.calls("genuine") != 1 {
		t.Errorf("handled %v, want only the genuine grant", r.handled)
	}
}

func TestConsumeStopFinishesInFlightAndReleasesTheRest(t *testing.T) {
	srv := testenv.StartNATS(t)
	l := dial(t, srv.URL(), Config{})
	_, js := connect(t, srv.URL())
	const n = 40
	for i := range n {
		dueGrant(t, js, fmt.Sprintf("s-%02d", i))
	}

	first := newRecorder()
	started, unblock := make(chan string, n), make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	stop, err := l.Consume(ctx, "sweeper", func(ctx context.Context, b Batch) error {
		started <- b.ID
		<-unblock
		// The in-flight handler's context outlives the consumer's.
		if err := ctx.Err(); err != nil {
			return err
		}
		return first.handle(ctx, b)
	}, WithObserver(first.observe), WithWorkers(2), WithBatch(16))
	if err != nil {
		t.Fatal(err)
	}
	<-started
	<-started
	cancel() // shut down with two grants in flight and more pulled
	time.Sleep(100 * time.Millisecond)
	close(unblock)
	stop()
	if got := first.count(Acked); got != 2 {
		t.Errorf("first consumer acked %d, want the 2 in flight", got)
	}
	if first.count(Released) == 0 {
		t.Error("nothing pulled was released")
	}

	second := newRecorder()
	consume(t, l, second.handle, WithObserver(second.observe))
	waitFor(t, 10*time.Second, "the rest by the second consumer", func() bool { return first.count(Acked)+second.count(Acked) >= n })
	waitForIdle(t, js)
	for i := range n {
		id := fmt.Sprintf("s-%02d", i)
		if c := first.calls(id) + second.calls(id); c != 1 {
			t.Errorf("%s applied %d times", id, c)
		}
	}
}

func TestConsumersShareTheDurable(t *testing.T) {
	srv := testenv.StartNATS(t)
	l1 := dial(t, srv.URL(), Config{})
	l2 := dial(t, srv.URL(), Config{})
	_, js := connect(t, srv.URL())
	a, b := newRecorder(), newRecorder()
	consume(t, l1, a.handle, WithObserver(a.observe))
	consume(t, l2, b.handle, WithObserver(b.observe))
	const n = 200
	for i := range n {
		dueGrant(t, js, fmt.Sprintf("d-%03d", i))
	}
	waitFor(t, 15*time.Second, "all acked", func() bool { return a.count(Acked)+b.count(Acked) == n })
	waitForIdle(t, js)
	for i := range n {
		id := fmt.Sprintf("d-%03d", i)
		if c := a.calls(id) + b.calls(id); c != 1 {
			t.Errorf("%s handled %d times", id, c)
		}
	}
	t.Logf("split %d / %d", a.count(Acked), b.count(Acked))
}
