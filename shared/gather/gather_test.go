package gather_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mintgate/mintgate/shared/gather"
	"github.com/mintgate/mintgate/shared/gather/gathertest"
)

const window = time.Millisecond

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// future is where the callers' deadlines lie, on the real clock that
// contexts read: far enough that none ends during a test.
var future = time.Now().Add(24 * time.Hour)

// rig runs a Gatherer on a clock the test moves, with a batch function
// that holds each batch until the test replies to it. Every step waits
// until the Gatherer has acted on it (a request started waits in a lane,
// was handed to the batch function, or was answered; every batch that
// left reached the batch function; every reply was taken), so what a step
// checks next is decided, never raced.
type rig struct {
	t     *testing.T
	g     *gather.Gatherer[string, string]
	clock *gathertest.Clock

	mu        sync.Mutex
	handed    int             // requests the batch function got
	returned  int             // Do calls that returned
	keys      map[string]bool // the lanes used
	received  map[string]int  // per lane, batches the batch function got
	released  map[string]int  // per lane, batches the test replied to
	batches   chan *call      // every batch, as the batch function gets it
	held      []*call         // batches not replied to, oldest first
	closeDone chan struct{}   // closed when the Close of closing returns
	results   map[string]chan result
	cancels   map[string]context.CancelFunc
}

type call struct {
	key   string
	qs    []string
	ctx   context.Context
	reply chan struct{}
}

type result struct {
	a   string
	err error
}

func newRig(t *testing.T, cfg gather.Config) *rig {
	r := &rig{
		t: t, clock: gathertest.NewClock(t0),
		keys: map[string]bool{}, received: map[string]int{}, released: map[string]int{},
		batches: make(chan *call, 100), results: map[string]chan result{}, cancels: map[string]context.CancelFunc{},
	}
	cfg.Clock = r.clock
	r.g = gather.New(cfg, func(ctx context.Context, qs []string) []string {
		c := &call{key: keyOf(qs[0]), qs: qs, ctx: ctx, reply: make(chan struct{})}
		r.mu.Lock()
		r.received[c.key]++
		r.handed += len(qs)
		r.mu.Unlock()
		r.batches <- c
		<-c.reply
		out := make([]string, len(qs))
		for i, q := range qs {
			out[i] = "=" + q
		}
		return out
	})
	t.Cleanup(func() {
		go func() {
			for c := range r.batches {
				close(c.reply)
			}
		}()
		for _, c := range r.held {
			close(c.reply)
		}
		r.g.Close()
		close(r.batches)
	})
	return r
}

// keyOf is a request's lane: "k2:x" is on lane k2, "x" on lane k.
func keyOf(q string) string {
	if k, _, ok := strings.Cut(q, ":"); ok {
		return k
	}
	return "k"
}

// start begins a Do of q on its lane with ctx and waits until the
// Gatherer has taken it.
func (r *rig) start(ctx context.Context, q string) {
	r.t.Helper()
	res := make(chan result, 1)
	before := r.progress()
	r.mu.Lock()
	r.keys[keyOf(q)] = true
	r.results[q] = res
	r.mu.Unlock()
	go func() {
		a, err := r.g.Do(ctx, keyOf(q), q)
		r.mu.Lock()
		r.returned++
		r.mu.Unlock()
		res <- result{a, err}
	}()
	r.until(func() bool { return r.progress() > before })
	r.settle()
}

// progress grows by one with each request the Gatherer takes: it waits
// (for room too), or is handed to the batch function, or its Do returns.
func (r *rig) progress() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.handed + r.returned
	for k := range r.keys {
		waiting, _ := r.g.Load(k)
		n += waiting
	}
	return n
}

// settle waits until every batch that left reached the batch function and
// every reply was taken.
func (r *rig) settle() {
	r.t.Helper()
	r.until(func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		for k := range r.keys {
			if _, inFlight := r.g.Load(k); inFlight != r.received[k]-r.released[k] {
				return false
			}
		}
		return true
	})
}

// until waits for cond; it is how a step waits for the Gatherer's
// goroutines, never a check of how long they took.
func (r *rig) until(cond func() bool) {
	r.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			r.t.Fatal("the gatherer did not act on the step")
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// step is one thing a test does, or checks.
type step func(r *rig)

// do starts a Do of each q with no deadline.
func do(qs ...string) step {
	return func(r *rig) {
		for _, q := range qs {
			r.start(context.Background(), q)
		}
	}
}

// doCancellable starts a Do of q that cancel ends.
func doCancellable(q string) step {
	return func(r *rig) {
		r.start(cancellable(r, q), q)
	}
}

func cancellable(r *rig, q string) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	r.cancels[q] = cancel
	return ctx
}

// doUntil starts a Do of q whose ctx ends at future + in.
func doUntil(q string, in time.Duration) step {
	return func(r *rig) {
		ctx, cancel := context.WithDeadline(context.Background(), future.Add(in))
		r.t.Cleanup(cancel)
		r.start(ctx, q)
	}
}

// cancel ends q's ctx and requires its Do to fail with context.Canceled.
func cancel(q string) step {
	return func(r *rig) {
		r.cancels[q]()
		r.answered(q, "", context.Canceled)
		r.settle()
	}
}

// advance moves the clock.
func advance(d time.Duration) step {
	return func(r *rig) {
		r.clock.Add(d)
		r.settle()
	}
}

// batch requires the next batch to be exactly qs, in order.
func batch(qs ...string) step {
	return func(r *rig) {
		r.t.Helper()
		select {
		case c := <-r.batches:
			if !slices.Equal(c.qs, qs) {
				r.t.Fatalf("batch %v, want %v", c.qs, qs)
			}
			r.held = append(r.held, c)
		case <-time.After(5 * time.Second):
			r.t.Fatalf("no batch, want %v", qs)
		}
	}
}

// none requires that no batch left.
func none() step {
	return func(r *rig) {
		r.t.Helper()
		r.settle()
		select {
		case c := <-r.batches:
			r.t.Fatalf("batch %v left, want none", c.qs)
		default:
		}
	}
}

// reply answers the oldest batch held and requires each of its callers to
// get its own answer.
func reply() step {
	return func(r *rig) {
		r.t.Helper()
		c := r.held[0]
		r.held = r.held[1:]
		r.mu.Lock()
		r.released[c.key]++
		r.mu.Unlock()
		close(c.reply)
		for _, q := range c.qs {
			r.answered(q, "="+q, nil)
		}
		r.settle()
	}
}

// deadline requires the oldest batch held to end at future + in, or
// never (0).
func deadline(in time.Duration) step {
	return func(r *rig) {
		r.t.Helper()
		dl, ok := r.held[0].ctx.Deadline()
		if in == 0 && ok {
			r.t.Errorf("batch ends at %v, want no deadline", dl)
		}
		if in != 0 && !dl.Equal(future.Add(in)) {
			r.t.Errorf("batch ends at %v (%v), want the earliest caller's %v", dl, ok, future.Add(in))
		}
	}
}

// closing closes the Gatherer in the background, and waits until it has
// taken the close: a probe whose ctx is over (never sent) is refused.
// closed waits for Close to return.
func closing() step {
	return func(r *rig) {
		done := make(chan struct{})
		r.closeDone = done
		go func() { r.g.Close(); close(done) }()
		gone, cancel := context.WithCancel(context.Background())
		cancel()
		r.until(func() bool {
			_, err := r.g.Do(gone, "probe", "probe")
			return errors.Is(err, gather.ErrClosed)
		})
		r.settle()
	}
}

func closed() step {
	return func(r *rig) {
		r.t.Helper()
		select {
		case <-r.closeDone:
		case <-time.After(5 * time.Second):
			r.t.Fatal("Close did not return")
		}
	}
}

// refused requires a Do after Close to fail with ErrClosed, unsent.
func refused(q string) step {
	return func(r *rig) {
		r.start(context.Background(), q)
		r.answered(q, "", gather.ErrClosed)
	}
}

// answered requires q's Do to return a and err.
func (r *rig) answered(q, a string, err error) {
	r.t.Helper()
	r.mu.Lock()
	res := r.results[q]
	r.mu.Unlock()
	select {
	case got := <-res:
		if got.a != a || !errors.Is(got.err, err) || (err == nil && got.err != nil) {
			r.t.Fatalf("%s answered %q, %v; want %q, %v", q, got.a, got.err, a, err)
		}
	case <-time.After(5 * time.Second):
		r.t.Fatalf("%s was not answered", q)
	}
}

// base is the configuration of most cases; with changes it.
var base = gather.Config{Window: window, MaxBatch: 8}

func with(f func(*gather.Config)) gather.Config { c := base; f(&c); return c }

// gaps is base with the ledger's kind of gap.
var gaps = with(func(c *gather.Config) { c.MaxBatch, c.MaxInFlight, c.MinGap, c.GapFrom = 5, 1, 2*time.Millisecond, 3 })

// cases are the Gatherer's rules, each as what a test does and sees.
var cases = []struct {
	name  string
	cfg   gather.Config
	steps []step
}{
	{"a lone request leaves at once", base, []step{
		do("a"), batch("a"), reply(),
		do("b"), batch("b"), reply(),
	}},
	{"behind a batch, requests wait the window and leave together", base, []step{
		do("a"), batch("a"),
		do("b", "c"), none(),
		advance(window - time.Nanosecond), none(),
		advance(time.Nanosecond), batch("b", "c"),
		reply(), reply(),
	}},
	{"a reply lets the requests behind it leave", base, []step{
		do("a"), batch("a"),
		do("b", "c"), none(),
		reply(), batch("b", "c"), reply(),
	}},
	{"a reply lets them leave with another batch still out", with(func(c *gather.Config) { c.MaxInFlight = 3 }), []step{
		do("a"), batch("a"),
		do("b"), advance(window), batch("b"),
		do("c"), none(),
		reply(), batch("c"), reply(), reply(),
	}},
	{"a full batch leaves at once, and no batch is larger", with(func(c *gather.Config) { c.MaxBatch = 3 }), []step{
		do("a"), batch("a"),
		do("b", "c"), none(),
		do("d"), batch("b", "c", "d"),
		do("e"), none(),
		advance(window), batch("e"),
		reply(), reply(), reply(),
	}},
	{"lanes never share a batch nor wait for each other", base, []step{
		do("a"), batch("a"),
		do("k2:b"), batch("k2:b"),
		do("c", "k2:d"), none(),
		reply(), batch("c"),
		reply(), batch("k2:d"),
		reply(), reply(),
	}},
	{"the in-flight cap holds a batch past its window until a reply", with(func(c *gather.Config) { c.MaxInFlight = 1 }), []step{
		do("a"), batch("a"),
		do("b", "c"), advance(window), none(),
		do("d", "e", "f", "g", "h", "i"), none(), // a full batch waits for the slot too
		reply(), batch("b", "c", "d", "e", "f", "g", "h", "i"),
		reply(),
	}},
	{"a caller whose ctx ended before its batch left is not sent", base, []step{
		do("a"), batch("a"),
		doCancellable("b"), do("c"),
		cancel("b"),
		advance(window), batch("c"),
		reply(), reply(),
	}},
	{"a batch of callers that all gave up is not sent", base, []step{
		do("a"), batch("a"),
		doCancellable("b"), cancel("b"),
		advance(window), none(),
		reply(),
	}},
	{"the batch's ctx ends at its callers' earliest deadline", base, []step{
		do("a"), batch("a"), deadline(0),
		doUntil("b", 2*time.Hour), doUntil("c", time.Hour), do("d"),
		reply(), batch("b", "c", "d"), deadline(time.Hour),
		reply(),
	}},
	{"the gap holds a busy lane's batch, not a lone request or a full batch", gaps, []step{
		do("a"), batch("a"), reply(),
		do("b"), batch("b"), // within the gap, alone: at once
		do("c", "d", "e"), reply(), none(), // the reply came within the gap
		advance(time.Millisecond), none(),
		do("f"), none(),
		advance(time.Millisecond), batch("c", "d", "e", "f"),
		do("g"), do("h", "i", "j", "k"), none(),
		reply(), batch("g", "h", "i", "j", "k"), // full: the gap does not hold it
		reply(),
		advance(time.Second), do("l"), batch("l"), reply(),
	}},
	{"past MaxQueued, requests wait for room in order, and a ctx can end the wait unsent", with(func(c *gather.Config) { c.MaxBatch, c.MaxInFlight, c.MaxQueued = 2, 1, 2 }), []step{
		do("a"), batch("a"),
		do("b", "c"), doCancellable("d"), cancel("d"),
		do("e"),
		reply(), batch("b", "c"), none(),
		reply(), batch("e"), reply(),
	}},
	{"Close sends what waits, past the window and MaxQueued, and then refuses", with(func(c *gather.Config) { c.MaxInFlight, c.MaxQueued = 1, 1 }), []step{
		do("a"), batch("a"),
		do("b", "c"), closing(), none(),
		reply(), batch("b", "c"), reply(), closed(),
		refused("d"),
	}},
}

func TestGatherer(t *testing.T) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, tc.cfg)
			for _, s := range tc.steps {
				s(r)
			}
			if len(r.held) > 0 {
				t.Fatalf("%d batches not replied to", len(r.held))
			}
			none()(r)
		})
	}
}

// TestStats counts batches and the requests they carried.
func TestStats(t *testing.T) {
	r := newRig(t, gather.Config{Window: window, MaxBatch: 8})
	for _, s := range []step{do("a"), batch("a"), do("b", "c"), advance(window), batch("b", "c"), reply(), reply()} {
		s(r)
	}
	if batches, requests := r.g.Stats(); batches != 2 || requests != 3 {
		t.Errorf("stats %d batches, %d requests; want 2, 3", batches, requests)
	}
}
