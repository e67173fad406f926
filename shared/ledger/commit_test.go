package ledger

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mintgate/mintgate/shared/gather"
	"github.com/mintgate/mintgate/shared/gather/gathertest"
)

// fakeLedger drives a committer with a clock the test holds: the window
// elapses only when the test says so, and each publish waits for the test
// to answer it.
type fakeLedger struct {
	t         *testing.T
	c         *committer
	clock     *gathertest.Clock // the committer's clock; tick moves it
	sent      chan Batch        // each batch as it is published
	answers   chan error        // the answer to the oldest publish waiting
	ids       int
	started   int // Records started by record
	published int // grants published
	mu        sync.Mutex
}

const fakeWindow = time.Millisecond

func newFake(t *testing.T, maxBatch, maxInFlight int, opts ...func(*gather.Config)) *fakeLedger {
	f := &fakeLedger{t: t, sent: make(chan Batch, 100), answers: make(chan error)}
	cfg := commitConfig(fakeWindow, maxBatch, maxInFlight, 0)
	cfg.Clock = gathertest.NewClock(time.Unix(1_700_000_000, 0))
	for _, o := range opts {
		o(&cfg)
	}
	f.clock = cfg.Clock.(*gathertest.Clock)
	f.c = newCommitter(cfg, f.newID, func(b Batch) error {
		f.mu.Lock()
		f.published += len(b.Grants)
		f.mu.Unlock()
		f.sent <- b
		return <-f.answers
	})
	t.Cleanup(func() {
		closed := make(chan struct{})
		go func() { // answer whatever close still sends
			for {
				select {
				case f.answers <- nil:
				case <-closed:
					return
				}
			}
		}()
		f.c.close()
		close(closed)
	})
	return f
}

func (f *fakeLedger) newID() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ids++
	return fmt.Sprintf("batch-%d", f.ids)
}

// record starts a Record of g and returns where its result arrives.
func (f *fakeLedger) record(g Grant) <-chan error {
	f.mu.Lock()
	f.started++
	f.mu.Unlock()
	res := make(chan error, 1)
	go func() { res <- f.c.record(context.Background(), g) }()
	return res
}

// tick makes the armed window elapse.
func (f *fakeLedger) tick() { f.clock.Add(fakeWindow) }

func (f *fakeLedger) next() Batch {
	f.t.Helper()
	select {
	case b := <-f.sent:
		return b
	case <-time.After(5 * time.Second):
		f.t.Fatal("no batch was published")
		return Batch{}
	}
}

func (f *fakeLedger) none() {
	f.t.Helper()
	select {
	case b := <-f.sent:
		f.t.Fatalf("batch %s of %d grants published too soon", b.ID, len(b.Grants))
	case <-time.After(50 * time.Millisecond):
	}
}

func ids(b Batch) []string {
	var out []string
	for _, g := range b.Grants {
		out = append(out, g.URLID)
	}
	return out
}

func at(id string, exp time.Time) Grant { return testGrant(id, exp) }

// waitQueued waits until every grant record started and not yet published
// waits in the committer.
func waitQueued(t *testing.T, f *fakeLedger) {
	t.Helper()
	waitWaiting(t, f, func(waiting int) bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return waiting+f.published == f.started
	})
}

// waitWaiting waits until the committer's count of waiting grants
// satisfies ok.
func waitWaiting(t *testing.T, f *fakeLedger, ok func(waiting int) bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if waiting, _ := f.c.g.Load(""); ok(waiting) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the committer did not take the queued grants")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestLoneGrantLeavesAtOnce(t *testing.T) {
	f := newFake(t, 8, 2)
	res := f.record(at("solo", time.Now()))
	b := f.next() // no tick: nothing was in flight, so no window either
	if len(b.Grants) != 1 || b.Grants[0].URLID != "solo" {
		t.Fatalf("batch %v", ids(b))
	}
	f.answers <- nil
	if err := <-res; err != nil {
		t.Fatal(err)
	}
}

// While a publish is in flight, grants wait for company until the window
// elapses, then leave together, due at the latest of their due times.
func TestGrantsBehindAPublishShareTheNextOne(t *testing.T) {
	f := newFake(t, 8, 2)
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	first := f.record(at("g1", t0.Add(5*time.Second)))
	f.next() // in flight, unanswered
	r2 := f.record(at("g2", t0.Add(9*time.Second)))
	r3 := f.record(at("g3", t0.Add(7*time.Second)))
	waitQueued(t, f)
	f.none()
	f.tick()
	b := f.next()
	if got := ids(b); len(got) != 2 || !slices.Contains(got, "g2") || !slices.Contains(got, "g3") {
		t.Fatalf("second batch %v, want g2 and g3", got)
	}
	grace := 30 * time.Second
	if due, want := b.DueAt(grace), t0.Add(9*time.Second+grace); !due.Equal(want) {
		t.Errorf("due %v, want the latest grant's %v", due, want)
	}
	f.answers <- nil
	f.answers <- errors.New("stalled")
	// Answers go in publish order: the first publish got nil, the second the error.
	if err := <-first; err != nil {
		t.Errorf("g1: %v", err)
	}
	for _, r := range []<-chan error{r2, r3} {
		if err := <-r; err == nil {
			t.Error("a grant of a failed batch was reported recorded")
		}
	}
}

// At the in-flight limit, an elapsed window waits for an ack; a full batch
// never grows past MaxBatch.
func TestInFlightLimitAndMaxBatch(t *testing.T) {
	f := newFake(t, 4, 1)
	now := time.Now()
	r0 := f.record(at("a0", now))
	f.next()
	var rs []<-chan error
	for i := range 10 {
		rs = append(rs, f.record(at(fmt.Sprintf("q%d", i), now)))
	}
	// Two full batches waiting for the slot leave no room: the rest wait
	// for it (back pressure).
	waitWaiting(t, f, func(waiting int) bool { return waiting == 10 })
	f.tick()
	f.none() // the window elapsed, but one publish is the limit
	f.answers <- nil
	if err := <-r0; err != nil {
		t.Fatal(err)
	}
	var sizes []int
	for len(sizes) < 3 {
		b := f.next()
		sizes = append(sizes, len(b.Grants))
		f.answers <- nil
	}
	if sizes[0] != 4 || sizes[1] != 4 || sizes[2] != 2 {
		t.Errorf("batch sizes %v, want [4 4 2]", sizes)
	}
	for _, r := range rs {
		if err := <-r; err != nil {
			t.Error(err)
		}
	}
}

// Whatever the arrival order and expiries, no batch is due before any of
// its grants (a refund is never early) and none later than the latest.
func TestBatchIsNeverDueBeforeAnyOfItsGrants(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	const grace = 30 * time.Second
	for range 200 {
		b := Batch{ID: "b"}
		latest := time.Time{}
		for i := range 1 + rng.IntN(40) {
			exp := t0.Add(time.Duration(rng.IntN(5000)) * time.Millisecond)
			b.Grants = append(b.Grants, at(fmt.Sprint(i), exp))
			if exp.After(latest) {
				latest = exp
			}
		}
		due := b.DueAt(grace)
		for _, g := range b.Grants {
			if due.Before(g.ExpiresAt.Add(grace)) {
				t.Fatalf("batch due %v before grant %s due %v", due, g.URLID, g.ExpiresAt.Add(grace))
			}
		}
		if !due.Equal(latest.Add(grace)) {
			t.Fatalf("batch due %v, want %v", due, latest.Add(grace))
		}
	}
}

// Close sends what is queued and answers every Record.
func TestCloseFlushesQueuedGrants(t *testing.T) {
	f := newFake(t, 8, 1)
	r0 := f.record(at("a", time.Now()))
	f.next()
	r1 := f.record(at("b", time.Now()))
	waitQueued(t, f)
	closed := make(chan struct{})
	go func() { f.c.close(); close(closed) }()
	f.answers <- nil
	b := f.next()
	if got := ids(b); len(got) != 1 || got[0] != "b" {
		t.Fatalf("flushed %v", got)
	}
	f.answers <- nil
	<-closed
	for _, r := range []<-chan error{r0, r1} {
		if err := <-r; err != nil {
			t.Error(err)
		}
	}
	if err := f.c.record(context.Background(), at("late", time.Now())); !errors.Is(err, errClosed) {
		t.Errorf("Record after close: %v", err)
	}
}

// alone records grant id and requires it to leave at once, in a batch of
// its own, and be acknowledged.
func (f *fakeLedger) alone(id string) {
	f.t.Helper()
	res := f.record(at(id, time.Now()))
	if b := f.next(); !slices.Equal(ids(b), []string{id}) {
		f.t.Fatalf("batch %v, want [%s] at once", ids(b), id)
	}
	f.answers <- nil
	if err := <-res; err != nil {
		f.t.Fatal(err)
	}
}

// batchOf requires the next batch to carry n grants, acknowledges it and
// waits for the Records rs of its grants.
func (f *fakeLedger) batchOf(n int, rs []<-chan error) {
	f.t.Helper()
	if b := f.next(); len(b.Grants) != n {
		f.t.Fatalf("batch %v, want %d grants together", ids(b), n)
	}
	f.answers <- nil
	for _, r := range rs {
		if err := <-r; err != nil {
			f.t.Fatal(err)
		}
	}
}

// With a gap, a busy ledger (gapFrom grants waiting) starts a publish no
// sooner than gap after the previous one, even with nothing in flight: the
// grants that come meanwhile share it. Fewer grants, as from one caller
// signing again and again, leave at once; so does a full batch.
func TestGapSpacesPublishes(t *testing.T) {
	clock := gathertest.NewClock(time.Unix(1_700_000_000, 0))
	const gap = 2 * time.Millisecond
	f := newFake(t, gapFrom+2, 1, func(c *gather.Config) { c.MinGap, c.Clock = gap, clock })

	f.alone("a")

	// One grant right after: the ledger is not busy, it leaves at once.
	one := f.record(at("b", time.Now()))
	if b := f.next(); !slices.Equal(ids(b), []string{"b"}) {
		t.Fatalf("a lone grant within the gap: %v, want it at once", ids(b))
	}
	// gapFrom grants arrive while b is in flight; its ack comes back
	// before the gap has passed: they wait for it, and one more joins.
	var rs []<-chan error
	for i := range gapFrom {
		rs = append(rs, f.record(at(fmt.Sprintf("c%d", i), time.Now())))
	}
	waitQueued(t, f)
	f.answers <- nil
	if err := <-one; err != nil {
		t.Fatal(err)
	}
	f.none()
	rs = append(rs, f.record(at("late", time.Now())))
	waitQueued(t, f)
	f.none()
	clock.Add(gap)
	f.tick() // the paced timer
	f.batchOf(gapFrom+1, rs)

	// A full batch, gathered behind a publish, leaves without waiting for
	// the gap once that publish's ack is back.
	x := f.record(at("x", time.Now()))
	f.next()
	rs = nil
	for i := range gapFrom + 2 {
		rs = append(rs, f.record(at(fmt.Sprintf("d%d", i), time.Now())))
	}
	waitQueued(t, f)
	f.answers <- nil
	if err := <-x; err != nil {
		t.Fatal(err)
	}
	f.batchOf(gapFrom+2, rs)

	// After a quiet gap, a lone grant leaves at once again.
	clock.Add(time.Second)
	f.alone("g")
}
