package ledger

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mintgate/mintgate/shared/testenv"
)

// streamState is the ledger stream's state, with a count per subject.
func streamState(t *testing.T, js jetstream.JetStream) jetstream.StreamState {
	t.Helper()
	s, err := js.Stream(context.Background(), DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background(), jetstream.WithSubjectFilter(">"))
	if err != nil {
		t.Fatal(err)
	}
	return info.State
}

func streamMsgs(t *testing.T, js jetstream.JetStream) uint64 { return streamState(t, js).Msgs }

// dueIDs are the urlIds of the due messages left in the stream.
func dueIDs(t *testing.T, js jetstream.JetStream) map[string]bool {
	t.Helper()
	ctx := context.Background()
	c, err := js.OrderedConsumer(ctx, DefaultStream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{SubjectDue}})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for {
		m, err := c.Next(jetstream.FetchMaxWait(300 * time.Millisecond))
		if err != nil {
			return ids
		}
		b, err := UnsealAny(m.Data(), testSecret)
		if err != nil {
			ids[string(m.Data())] = true
		}
		for _, g := range b.Grants {
			ids[g.URLID] = true
		}
	}
}

// trims records what the trimming goroutine reports.
type trims struct {
	mu  sync.Mutex
	all []Trim
}

func (tr *trims) observe(x Trim) {
	tr.mu.Lock()
	tr.all = append(tr.all, x)
	tr.mu.Unlock()
}

func (tr *trims) get() []Trim {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]Trim(nil), tr.all...)
}

// Handled grants leave nothing in the stream: the server purges each fired
// schedule, the consume loop purges the due messages acked or terminated.
// A grant whose handler keeps failing stays, and so do the ones after it,
// until it is applied.
func TestHandledGrantsLeaveNothingBehind(t *testing.T) {
	srv := testenv.StartNATS(t)
	l := dial(t, srv.URL(), Config{Grace: 100 * time.Millisecond})
	_, js := connect(t, srv.URL())
	r, tr := newRecorder(), &trims{}
	var stuck atomic.Bool
	stuck.Store(true)
	r.fail = func(g Grant, n int) error {
		if g.URLID == "stuck" && stuck.Load() {
			return errors.New("redis down")
		}
		return nil
	}
	consume(t, l, r.handle, WithObserver(r.observe), WithBackoff(50*time.Millisecond, 100*time.Millisecond),
		WithTrimInterval(100*time.Millisecond), WithTrimObserver(tr.observe))

	const half = 25
	// Late enough that nothing fires (and is trimmed) while the test records.
	t0 := time.Now().Add(1500 * time.Millisecond)
	record := func(id string, at time.Time) {
		t.Helper()
		if err := l.Record(context.Background(), testGrant(id, at)); err != nil {
			t.Fatal(err)
		}
	}
	// Two waves; within one, due messages come in the order of recording.
	const before = 10 // of the first wave, due before the stuck grant
	for i := range half {
		if i == before {
			record("stuck", t0)
		}
		record(fmt.Sprintf("a-%02d", i), t0)
	}
	for i := range half {
		record(fmt.Sprintf("b-%02d", i), t0.Add(500*time.Millisecond))
	}
	if got := streamMsgs(t, js); got != 2*half+1 {
		t.Fatalf("%d messages after recording %d grants", got, 2*half+1)
	}
	publishDue(t, js, []byte("{not json")) // forged, terminated: trimmed too

	waitFor(t, 15*time.Second, "the good grants acked", func() bool { return r.count(Acked) == 2*half })
	const after = 2*half - before // acked, but after the stuck grant
	waitFor(t, 10*time.Second, "the stuck grant and those after it left", func() bool { return streamMsgs(t, js) == after+1 })
	waitFor(t, 10*time.Second, "more failed attempts", func() bool { return r.calls("stuck") >= 5 })
	st := streamState(t, js)
	left := dueIDs(t, js)
	if st.Msgs != after+1 || st.Subjects[SubjectDue] != after+1 || !left["stuck"] || left[fmt.Sprintf("a-%02d", before-1)] || !left[fmt.Sprintf("a-%02d", before)] {
		t.Fatalf("with one grant failing: %d messages, subjects %v, due %v; want it and the %d after it", st.Msgs, st.Subjects, left, after)
	}

	stuck.Store(false)
	waitFor(t, 10*time.Second, "the stuck grant acked", func() bool { return r.count(Acked) == 2*half+1 })
	waitFor(t, 10*time.Second, "an empty stream", func() bool { return streamMsgs(t, js) == 0 })
	waitForIdle(t, js)
	for id, n := range r.handled {
		if want := map[bool]int{true: 1, false: r.calls("stuck")}[id != "stuck"]; n != want {
			t.Errorf("%s handled %d times", id, n)
		}
	}
	if r.count(Forged) != 1 {
		t.Errorf("%d forged, want 1", r.count(Forged))
	}
	all := tr.get()
	for _, x := range all {
		if x.Err != nil {
			t.Errorf("trim failed: %v", x.Err)
		}
	}
	t.Logf("%d trims, last floor %d", len(all), all[len(all)-1].Floor)

	// Idle: no more purges.
	n := len(tr.get())
	time.Sleep(500 * time.Millisecond)
	if got := len(tr.get()); got != n {
		t.Errorf("%d purges with nothing new finished", got-n)
	}
	// And the consumer still takes new grants.
	record("later", time.Now())
	waitFor(t, 10*time.Second, "a later grant", func() bool { return r.calls("later") == 1 })
	waitFor(t, 10*time.Second, "an empty stream again", func() bool { return streamMsgs(t, js) == 0 })
}

// A trim that fails (here: the server is down) is reported and tried
// again; the grant stays acked, and its message goes once a trim works.
func TestFailedTrimIsReportedAndRetried(t *testing.T) {
	srv := testenv.StartNATS(t)
	l := dial(t, srv.URL(), Config{})
	_, js := connect(t, srv.URL())
	r, tr := newRecorder(), &trims{}
	consume(t, l, r.handle, WithObserver(r.observe), WithTrimInterval(300*time.Millisecond), WithTrimObserver(tr.observe))
	dueGrant(t, js, "kept")
	waitFor(t, 10*time.Second, "the ack", func() bool { return r.count(Acked) == 1 })
	srv.Stop()
	waitFor(t, 10*time.Second, "a failed trim", func() bool {
		all := tr.get()
		return len(all) > 0 && all[len(all)-1].Err != nil
	})
	srv.Start()
	waitFor(t, 15*time.Second, "a trim that works", func() bool {
		all := tr.get()
		return all[len(all)-1].Err == nil && all[len(all)-1].Floor == 1
	})
	waitFor(t, 10*time.Second, "an empty stream", func() bool { return streamMsgs(t, js) == 0 })
	if r.calls("kept") != 1 {
		t.Errorf("handled %d times, want once", r.calls("kept"))
	}
	for _, x := range tr.get() {
		t.Logf("trim %+v", x)
	}
}
