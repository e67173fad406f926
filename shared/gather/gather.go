// Package gather gathers concurrent requests into batches, one call of a
// batch function for many callers: the machinery behind quota's Coalescers
// (one lane per tenant, one script call a batch) and the grant ledger's
// group commit (one lane, one ledger message a batch).
//
// Requests queue on a lane named by a key; requests of different lanes
// never share a batch. A lane's requests leave as one batch:
//
//   - at once while none of the lane's batches is in flight, so a lone
//     request waits no longer than it would alone;
//   - otherwise when the reply of one of the lane's batches comes back,
//     when the oldest waiting request has waited Window, or when MaxBatch
//     requests wait;
//   - never with MaxInFlight batches of the lane outstanding (when set),
//     and, while the lane is busy (GapFrom requests or more wait, but not a
//     full batch), never sooner than MinGap after the lane's previous batch
//     left (when set).
//
// The batch function answers every request of its batch, in order. A
// caller whose ctx ended before its batch left is not sent. The batch's
// ctx ends at the earliest deadline among its callers; a batch of one runs
// on its caller's own ctx, so it also ends when that caller gives up.
package gather

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// ErrClosed is what Do returns after Close.
var ErrClosed = errors.New("gather: closed")

// Config shapes a Gatherer's batches; every limit applies per lane.
type Config struct {
	// Window is the longest the oldest waiting request waits for company
	// while a batch of its lane is in flight.
	Window time.Duration
	// MaxBatch caps the requests of one batch (less than 1 is 1).
	MaxBatch int
	// MaxInFlight caps the batches awaiting their reply; 0: no cap.
	MaxInFlight int
	// MaxQueued, when above zero, caps the requests a batch may be formed
	// from: past it, requests wait for room, first come first in, without
	// joining a batch (back pressure on the callers).
	MaxQueued int
	// MinGap, when above zero, is the least time between two batches'
	// starts while the lane is busy: the requests that arrive meanwhile
	// share the next batch.
	MinGap time.Duration
	// GapFrom is how many waiting requests make the lane busy for MinGap
	// (at least 2): fewer is a caller or two asking one after another,
	// whose each request would wait the gap for nothing.
	GapFrom int
	// Clock is the time the Gatherer reads and waits on; nil: the real one.
	Clock Clock
}

// Clock is time.Now and time.AfterFunc, or a test's stand-in.
type Clock interface {
	Now() time.Time
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a *time.Timer as far as the Gatherer uses one.
type Timer interface{ Stop() bool }

type realClock struct{}

func (realClock) Now() time.Time                            { return time.Now() }
func (realClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// Gatherer gathers the requests (Q) of concurrent Do calls into calls of
// its batch function, which answers each (A). It is safe for concurrent use.
type Gatherer[Q, A any] struct {
	cfg Config
	run func(ctx context.Context, qs []Q) []A

	mu      sync.Mutex
	lanes   map[string]*lane[Q, A] // while a lane has requests waiting or in flight
	closed  bool
	running sync.WaitGroup // the batches in flight

	calls, items atomic.Int64 // batches sent and the requests they carried
}

// lane is one key's queue.
type lane[Q, A any] struct {
	key      string
	queue    []*waiting[Q, A]
	blocked  []*waiting[Q, A] // waiting for room in queue, oldest first
	inFlight int
	lastSend time.Time // when the last batch left, read only with a MinGap
	window   timer     // armed while requests wait behind a batch
	paced    timer     // armed while only the gap holds a batch back
	expired  bool      // the oldest waiting request's window is over, or a reply came back
}

// timer is one of a lane's timers; gen tells the current arming from a
// stopped one that fires anyway.
type timer struct {
	t   Timer
	gen uint64
}

type waiting[Q, A any] struct {
	ctx context.Context
	q   Q
	res chan answer[A] // buffered: a batch never waits for a caller that gave up
}

type answer[A any] struct {
	a   A
	err error
}

// New is a Gatherer whose batches run calls; run answers every request of
// its batch, in order.
func New[Q, A any](cfg Config, run func(ctx context.Context, qs []Q) []A) *Gatherer[Q, A] {
	cfg.MaxBatch = max(cfg.MaxBatch, 1)
	cfg.GapFrom = max(cfg.GapFrom, 2)
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	return &Gatherer[Q, A]{cfg: cfg, run: run, lanes: make(map[string]*lane[Q, A])}
}

// Do queues q on key's lane and waits for its answer. The error is
// ErrClosed after Close, or ctx's when ctx ended before the answer came:
// q was then not sent if its batch had not left yet, and may run if it had.
func (g *Gatherer[Q, A]) Do(ctx context.Context, key string, q Q) (A, error) {
	w := &waiting[Q, A]{ctx: ctx, q: q, res: make(chan answer[A], 1)}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		var zero A
		return zero, ErrClosed
	}
	l := g.lanes[key]
	if l == nil {
		l = &lane[Q, A]{key: key}
		g.lanes[key] = l
	}
	if g.cfg.MaxQueued > 0 && len(l.queue) >= g.cfg.MaxQueued {
		l.blocked = append(l.blocked, w)
	} else {
		l.queue = append(l.queue, w)
		g.flush(l)
	}
	g.mu.Unlock()
	select {
	case r := <-w.res:
		return r.a, r.err
	case <-ctx.Done():
		var zero A
		return zero, ctx.Err()
	}
}

// flush sends what l's rules let leave and arms the timers for the rest;
// under g.mu.
func (g *Gatherer[Q, A]) flush(l *lane[Q, A]) {
	for g.mayLeave(l) {
		if wait := g.gapLeft(l); wait > 0 {
			if l.paced.t == nil {
				g.arm(l, &l.paced, wait, func() {})
			}
			break
		}
		g.leave(l)
	}
	switch {
	case len(l.queue) > 0 && l.window.t == nil && !l.expired:
		g.arm(l, &l.window, g.cfg.Window, func() { l.expired = true })
	case len(l.queue) == 0 && l.inFlight == 0:
		// Nothing is lost with the lane: its next request finds nothing in
		// flight and fewer than GapFrom waiting, and leaves at once, as it
		// would have here.
		g.stop(&l.window)
		g.stop(&l.paced)
		delete(g.lanes, l.key)
	}
}

// mayLeave reports whether l's next batch may leave, the gap aside.
func (g *Gatherer[Q, A]) mayLeave(l *lane[Q, A]) bool {
	if len(l.queue) == 0 || (g.cfg.MaxInFlight > 0 && l.inFlight >= g.cfg.MaxInFlight) {
		return false
	}
	return l.inFlight == 0 || l.expired || g.closed || len(l.queue) >= g.cfg.MaxBatch
}

// gapLeft is how long the gap still holds l's next batch back.
func (g *Gatherer[Q, A]) gapLeft(l *lane[Q, A]) time.Duration {
	if g.cfg.MinGap <= 0 || g.closed || len(l.queue) < g.cfg.GapFrom || len(l.queue) >= g.cfg.MaxBatch {
		return 0
	}
	return g.cfg.MinGap - g.cfg.Clock.Now().Sub(l.lastSend)
}

// leave takes l's next batch off its queue and sends it; callers whose ctx
// ended are answered now and not sent.
func (g *Gatherer[Q, A]) leave(l *lane[Q, A]) {
	n := min(len(l.queue), g.cfg.MaxBatch)
	batch := make([]*waiting[Q, A], 0, n)
	for _, w := range l.queue[:n] {
		if err := w.ctx.Err(); err != nil {
			w.res <- answer[A]{err: err}
			continue
		}
		batch = append(batch, w)
	}
	clear(l.queue[:n])
	l.queue = l.queue[n:]
	g.admit(l)
	l.expired = false
	g.stop(&l.window)
	g.stop(&l.paced)
	if len(batch) == 0 {
		return
	}
	if g.cfg.MinGap > 0 {
		l.lastSend = g.cfg.Clock.Now()
	}
	l.inFlight++
	g.calls.Add(1)
	g.items.Add(int64(len(batch)))
	g.running.Add(1)
	go g.send(l, batch)
}

// admit moves the requests waiting for room into l's queue, as far as
// MaxQueued lets them (all of them once closed); those whose ctx ended are
// answered and dropped.
func (g *Gatherer[Q, A]) admit(l *lane[Q, A]) {
	i := 0
	for ; i < len(l.blocked) && (g.closed || len(l.queue) < g.cfg.MaxQueued); i++ {
		w := l.blocked[i]
		if err := w.ctx.Err(); err != nil {
			w.res <- answer[A]{err: err}
			continue
		}
		l.queue = append(l.queue, w)
	}
	clear(l.blocked[:i])
	l.blocked = l.blocked[i:]
}

// arm starts t to run fired and then flush l after d.
func (g *Gatherer[Q, A]) arm(l *lane[Q, A], t *timer, d time.Duration, fired func()) {
	t.gen++
	gen := t.gen
	t.t = g.cfg.Clock.AfterFunc(d, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if t.t == nil || t.gen != gen { // stopped: its batch left meanwhile
			return
		}
		t.t = nil
		fired()
		g.flush(l)
	})
}

func (g *Gatherer[Q, A]) stop(t *timer) {
	if t.t != nil {
		t.t.Stop()
		t.t = nil
	}
}

// send runs one batch and answers each of its callers.
func (g *Gatherer[Q, A]) send(l *lane[Q, A], batch []*waiting[Q, A]) {
	defer g.running.Done()
	ctx, cancel := batchContext(batch)
	defer cancel()
	qs := make([]Q, len(batch))
	for i, w := range batch {
		qs[i] = w.q
	}
	out := g.run(ctx, qs)
	for i, w := range batch {
		w.res <- answer[A]{a: out[i]}
	}
	g.mu.Lock()
	l.inFlight--
	// A reply lets the requests that waited behind it leave now, as one
	// batch, whether or not other batches of the lane are still out.
	l.expired = len(l.queue) > 0
	g.flush(l)
	g.mu.Unlock()
}

// batchContext ends at the earliest deadline among the batch's callers (no
// caller waits past its own), and carries the first caller's values. A lone
// caller's batch runs on that caller's own ctx, as a call made without the
// Gatherer would: nobody else waits on it, and it costs no context of its
// own.
func batchContext[Q, A any](batch []*waiting[Q, A]) (context.Context, context.CancelFunc) {
	if len(batch) == 1 {
		return batch[0].ctx, func() {}
	}
	var (
		first time.Time
		has   bool
	)
	for _, w := range batch {
		if dl, ok := w.ctx.Deadline(); ok && (!has || dl.Before(first)) {
			first, has = dl, true
		}
	}
	base := context.WithoutCancel(batch[0].ctx)
	if !has {
		return context.WithCancel(base)
	}
	return context.WithDeadline(base, first)
}

// Close sends every request waiting, at once (neither Window, MinGap nor
// MaxQueued holds it; MaxInFlight and MaxBatch still do), waits for every
// batch's reply, and makes Do return ErrClosed from then on. Calling it
// again waits the same.
func (g *Gatherer[Q, A]) Close() {
	g.mu.Lock()
	g.closed = true
	for _, l := range g.lanes {
		g.admit(l)
		g.flush(l)
	}
	g.mu.Unlock()
	g.running.Wait()
}

// Stats is how many batches the Gatherer sent and how many requests they
// carried.
func (g *Gatherer[Q, A]) Stats() (batches, requests int64) { return g.calls.Load(), g.items.Load() }

// Load is how many requests wait on key's lane (for room too) and how
// many of its batches are in flight.
func (g *Gatherer[Q, A]) Load(key string) (waiting, inFlight int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if l := g.lanes[key]; l != nil {
		return len(l.queue) + len(l.blocked), l.inFlight
	}
	return 0, 0
}

// Config is the Gatherer's configuration, its floors applied.
func (g *Gatherer[Q, A]) Config() Config { return g.cfg }
