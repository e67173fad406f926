package quota

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// gatherer gathers concurrent requests of one tenant (one hash tag, one
// Redis Cluster slot) into one call of run, the machinery behind the
// Coalescer (Spends) and the FinishCoalescer (Finishes): per tenant, a
// request leaves at once while none of that tenant's is in flight, so a
// lone request waits no longer than it would alone; otherwise it waits for
// the reply of a call of that tenant's, or until the oldest waiting request
// has waited the window, or until maxBatch wait. Requests of different
// tenants never share a call.
//
// run answers every request of its batch, in order (a call that failed
// answers each with its error). A caller whose ctx ended before its batch
// left is not sent and is answered gaveUp(ctx.Err()), as is one that stops
// waiting. The call's ctx ends at the earliest deadline among its callers.
type gatherer[Q, A any] struct {
	window   time.Duration
	maxBatch int
	run      func(ctx context.Context, qs []Q) []A
	gaveUp   func(error) A

	mu    sync.Mutex
	lanes map[string]*lane[Q, A] // per tenant, while it has requests waiting or in flight

	calls, items atomic.Int64 // calls of run made and the requests they carried
}

// lane is one tenant's queue.
type lane[Q, A any] struct {
	tenant   string
	queue    []*waiting[Q, A]
	inFlight int         // calls of this tenant not yet answered
	timer    *time.Timer // armed while requests wait behind a call
	armed    uint64      // counts the timers armed: a stopped one that fires anyway is not the current one
	expired  bool        // the window of the oldest waiting request is over
}

type waiting[Q, A any] struct {
	ctx context.Context
	q   Q
	res chan A // buffered: a batch never waits for a caller that gave up
}

// newGatherer is a gatherer of run's calls; a window or maxBatch of zero or
// less is the default (DefaultCoalesceWindow, DefaultCoalesceBatch).
func newGatherer[Q, A any](window time.Duration, maxBatch int, run func(context.Context, []Q) []A, gaveUp func(error) A) *gatherer[Q, A] {
	if window <= 0 {
		window = DefaultCoalesceWindow
	}
	if maxBatch <= 0 {
		maxBatch = DefaultCoalesceBatch
	}
	return &gatherer[Q, A]{window: window, maxBatch: maxBatch, run: run, gaveUp: gaveUp, lanes: make(map[string]*lane[Q, A])}
}

// do queues q on tenant's lane and waits for its answer or for ctx.
func (g *gatherer[Q, A]) do(ctx context.Context, tenant string, q Q) A {
	w := &waiting[Q, A]{ctx: ctx, q: q, res: make(chan A, 1)}
	g.mu.Lock()
	l := g.lanes[tenant]
	if l == nil {
		l = &lane[Q, A]{tenant: tenant}
		g.lanes[tenant] = l
	}
	l.queue = append(l.queue, w)
	g.flush(l)
	g.mu.Unlock()
	select {
	case r := <-w.res:
		return r
	case <-ctx.Done():
		// Sent or not, this caller gives up as on a single call's timeout.
		return g.gaveUp(ctx.Err())
	}
}

// flush sends what l's rules let leave and arms the window for the rest;
// under g.mu.
func (g *gatherer[Q, A]) flush(l *lane[Q, A]) {
	for len(l.queue) > 0 && (l.inFlight == 0 || l.expired || len(l.queue) >= g.maxBatch) {
		n := min(len(l.queue), g.maxBatch)
		batch := make([]*waiting[Q, A], 0, n)
		for _, w := range l.queue[:n] {
			if w.ctx.Err() != nil {
				w.res <- g.gaveUp(w.ctx.Err())
				continue
			}
			batch = append(batch, w)
		}
		clear(l.queue[:n])
		l.queue = l.queue[n:]
		l.expired = false
		if l.timer != nil {
			l.timer.Stop()
			l.timer = nil
		}
		if len(batch) == 0 {
			continue
		}
		l.inFlight++
		go g.send(l, batch)
	}
	switch {
	case len(l.queue) > 0 && l.timer == nil && !l.expired:
		l.armed++
		armed := l.armed
		l.timer = time.AfterFunc(g.window, func() { g.expire(l, armed) })
	case len(l.queue) == 0 && l.inFlight == 0:
		delete(g.lanes, l.tenant)
	}
}

// expire ends the window of l's oldest waiting request.
func (g *gatherer[Q, A]) expire(l *lane[Q, A], armed uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if l.timer == nil || l.armed != armed { // stopped: its batch left meanwhile
		return
	}
	l.timer, l.expired = nil, true
	g.flush(l)
}

// send runs one batch and answers each of its callers.
func (g *gatherer[Q, A]) send(l *lane[Q, A], batch []*waiting[Q, A]) {
	ctx, cancel := batchContext(batch)
	defer cancel()
	qs := make([]Q, len(batch))
	for i, w := range batch {
		qs[i] = w.q
	}
	g.calls.Add(1)
	g.items.Add(int64(len(qs)))
	out := g.run(ctx, qs)
	for i, w := range batch {
		w.res <- out[i]
	}
	g.mu.Lock()
	l.inFlight--
	// A reply lets the requests that waited behind it leave now, as one
	// call, whether or not other calls of the tenant are still out.
	l.expired = len(l.queue) > 0
	g.flush(l)
	g.mu.Unlock()
}

// batchContext ends at the earliest deadline among the batch's callers (no
// caller waits past its own), and carries the first caller's values.
func batchContext[Q, A any](batch []*waiting[Q, A]) (context.Context, context.CancelFunc) {
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

// stats is how many calls the gatherer made and how many requests they
// carried.
func (g *gatherer[Q, A]) stats() (calls, items int64) { return g.calls.Load(), g.items.Load() }
