package quota

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of a Coalescer.
const (
	DefaultCoalesceWindow = 200 * time.Microsecond
	DefaultCoalesceBatch  = 32
)

// Coalescer gathers concurrent Spends of one tenant (one hash tag, one
// Redis Cluster slot) into one script call, SpendBatch, the way the
// ledger's committer gathers grants: per tenant, a Spend leaves at once
// while none of that tenant's is in flight, so a lone Spend waits no
// longer than it would alone; otherwise it waits for the reply of a call
// of that tenant's, or until the oldest waiting Spend has waited the
// window, or until maxBatch wait. Spends of different tenants never share
// a call.
//
// Each caller gets its own Decision, exactly what Store.Spend would have
// answered had the Spends of its batch run one after another. A call that
// fails fails every Spend in it with the same error a single Spend would
// have had, so a caller tells "may still run" from "never ran" as before.
// A caller whose ctx ended before its batch left is not sent. The call's
// ctx ends at the earliest deadline among its callers.
type Coalescer struct {
	store    *Store
	window   time.Duration
	maxBatch int

	mu    sync.Mutex
	lanes map[string]*lane // per tenant, while it has Spends waiting or in flight

	calls, spends atomic.Int64 // script calls made and Spends they carried
}

// lane is one tenant's queue.
type lane struct {
	tenant   string
	queue    []*waiting
	inFlight int         // calls of this tenant not yet answered
	timer    *time.Timer // armed while Spends wait behind a call
	armed    uint64      // counts the timers armed: a stopped one that fires anyway is not the current one
	expired  bool        // the window of the oldest waiting Spend is over
}

type waiting struct {
	ctx context.Context
	sp  Spending
	res chan Spent // buffered: a batch never waits for a caller that gave up
}

// NewCoalescer gathers Spends on store; a window or maxBatch of zero or less
// is the default (DefaultCoalesceWindow, DefaultCoalesceBatch). maxBatch 1
// sends every Spend alone.
func NewCoalescer(store *Store, window time.Duration, maxBatch int) *Coalescer {
	if window <= 0 {
		window = DefaultCoalesceWindow
	}
	if maxBatch <= 0 {
		maxBatch = DefaultCoalesceBatch
	}
	return &Coalescer{store: store, window: window, maxBatch: maxBatch, lanes: make(map[string]*lane)}
}

// Spend is Store.Spend, sharing a script call with the concurrent Spends
// of a's tenant. An error of ctx while the Spend waited to leave means it
// was not sent; once it left, the Spend may run as a single Spend that
// timed out may.
func (c *Coalescer) Spend(ctx context.Context, now time.Time, a Ask, inFlight time.Duration) (Decision, error) {
	if err := checkSpend(a, inFlight); err != nil {
		return Decision{}, err
	}
	w := &waiting{ctx: ctx, sp: Spending{Now: now, Ask: a, InFlight: inFlight}, res: make(chan Spent, 1)}
	c.mu.Lock()
	l := c.lanes[a.Tenant]
	if l == nil {
		l = &lane{tenant: a.Tenant}
		c.lanes[a.Tenant] = l
	}
	l.queue = append(l.queue, w)
	c.flush(l)
	c.mu.Unlock()
	select {
	case r := <-w.res:
		return r.Decision, r.Err
	case <-ctx.Done():
		// Sent or not, this caller gives up as on a single Spend's timeout.
		return Decision{}, unavailable("spend", ctx.Err())
	}
}

// flush sends what l's rules let leave and arms the window for the rest;
// under c.mu.
func (c *Coalescer) flush(l *lane) {
	for len(l.queue) > 0 && (l.inFlight == 0 || l.expired || len(l.queue) >= c.maxBatch) {
		n := min(len(l.queue), c.maxBatch)
		batch := make([]*waiting, 0, n)
		for _, w := range l.queue[:n] {
			if w.ctx.Err() != nil {
				w.res <- Spent{Err: unavailable("spend", w.ctx.Err())}
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
		go c.send(l, batch)
	}
	switch {
	case len(l.queue) > 0 && l.timer == nil && !l.expired:
		l.armed++
		armed := l.armed
		l.timer = time.AfterFunc(c.window, func() { c.expire(l, armed) })
	case len(l.queue) == 0 && l.inFlight == 0:
		delete(c.lanes, l.tenant)
	}
}

// expire ends the window of l's oldest waiting Spend.
func (c *Coalescer) expire(l *lane, armed uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l.timer == nil || l.armed != armed { // stopped: its batch left meanwhile
		return
	}
	l.timer, l.expired = nil, true
	c.flush(l)
}

// send runs one batch and answers each of its callers.
func (c *Coalescer) send(l *lane, batch []*waiting) {
	ctx, cancel := batchContext(batch)
	defer cancel()
	ss := make([]Spending, len(batch))
	for i, w := range batch {
		ss[i] = w.sp
	}
	c.calls.Add(1)
	c.spends.Add(int64(len(ss)))
	var (
		out []Spent
		err error
	)
	if len(ss) == 1 {
		// Alone: the plain script, byte for byte a Store.Spend.
		var d Decision
		d, err = c.store.Spend(ctx, ss[0].Now, ss[0].Ask, ss[0].InFlight)
		out = []Spent{{Decision: d, Err: err}}
	} else {
		out, err = c.store.SpendBatch(ctx, ss)
	}
	for i, w := range batch {
		if err != nil {
			w.res <- Spent{Err: err}
		} else {
			w.res <- out[i]
		}
	}
	c.mu.Lock()
	l.inFlight--
	// A reply lets the Spends that waited behind it leave now, as one
	// call, whether or not other calls of the tenant are still out.
	l.expired = len(l.queue) > 0
	c.flush(l)
	c.mu.Unlock()
}

// batchContext ends at the earliest deadline among the batch's callers (no
// caller waits past its own), and carries the first caller's values.
func batchContext(batch []*waiting) (context.Context, context.CancelFunc) {
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

// Stats is how many script calls the Coalescer made and how many Spends
// they carried.
func (c *Coalescer) Stats() (calls, spends int64) { return c.calls.Load(), c.spends.Load() }

// String describes the Coalescer's settings.
func (c *Coalescer) String() string {
	return fmt.Sprintf("coalescer window %v, up to %d spends a call", c.window, c.maxBatch)
}
