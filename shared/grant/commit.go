package grant

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Defaults of the group commit (LedgerConfig).
const (
	DefaultWindow   = time.Millisecond
	DefaultMaxBatch = 256
	// One publish at a time: the grants that arrive during its fsync
	// share the next one. More in flight made more, smaller messages,
	// and every message is one more fsynced write when its schedule
	// fires: at 5k grants/s, 4 in flight fired 2.7 s late at p99 and
	// recorded 54k grants/s at 512 callers; 1 fired 1.5 s late and
	// recorded 89k/s (sweeper's load report, same machine, same hour).
	DefaultMaxInFlight = 1
	// Two publishes start at least 2 ms apart (a full batch excepted), so
	// a stream fires at most ~500 schedules a second per signer. On an R1
	// ledger with sync always, each fire is two fsynced writes, one after
	// another, and at 5k grants/s the 4.2 grants per message that "as soon
	// as the ack is back" made fired 1.4 s late at p99; with the gap, 14
	// grants per message fired 0.36 s late (sweeper's load report, -gap).
	// A lone grant, or a few, still leave at once (gapFrom).
	DefaultMinGap = 2 * time.Millisecond
)

// gapFrom is how many grants must wait for the gap to hold them: fewer is
// a caller or two signing one after another, whose each sign would wait
// the gap for nothing (one sequential caller: 362 Records/s with the gap
// for every batch, against ~1k/s without).
const gapFrom = 4

// errClosed is what Record returns after Close.
var errClosed = errors.New("grant: ledger closed")

// committer gathers the grants of concurrent Record calls into batches:
// one ledger message, one fsync, however many grants it carries.
//
// When a batch leaves: at once while no publish is in flight (a lone grant
// waits no longer than it would alone); otherwise as soon as a publish's
// ack is back, or when the oldest waiting grant has waited window, or when
// maxBatch grants wait — never with more than maxInFlight publishes
// outstanding (one by default). Under load the grants that arrive during one fsync share
// the next one.
//
// A grant's Record returns the error of the publish that carried it, so a
// sign answers 201 only once its own batch is acknowledged, and every sign
// of a failed batch fails (and undoes its spend) together.
type committer struct {
	in          chan *pending
	publish     func(Batch) error
	newID       func() string
	after       func(time.Duration) <-chan time.Time // time.After; tests hold the window open
	window      time.Duration
	maxBatch    int
	maxInFlight int
	// gap, when above zero, is the least time between two publishes'
	// starts while the ledger is busy (gapFrom grants or more wait, but
	// not a full batch): the grants that arrive meanwhile share the next
	// message. Zero: none (see LedgerConfig.MinGap).
	gap  time.Duration
	now  func() time.Time
	stop chan struct{}
	done chan struct{}
}

type pending struct {
	ctx context.Context // the Record's: once it is done, nobody waits for this grant
	g   Grant
	res chan error // buffered: the loop never waits for a Record that gave up
}

func newCommitter(window time.Duration, maxBatch, maxInFlight int, newID func() string, publish func(Batch) error) *committer {
	return &committer{
		in:          make(chan *pending, maxBatch),
		publish:     publish,
		newID:       newID,
		after:       time.After,
		window:      window,
		maxBatch:    maxBatch,
		maxInFlight: maxInFlight,
		now:         time.Now,
		stop:        make(chan struct{}),
		done:        make(chan struct{}),
	}
}

// record queues g and waits for the ack of the batch that carries it.
// When ctx ends first, the grant may still be committed: the caller treats
// that as a failure and undoes the sign, and the undo's refunded marker
// keeps the sweeper from refunding the same grant again.
func (c *committer) record(ctx context.Context, g Grant) error {
	p := &pending{ctx: ctx, g: g, res: make(chan error, 1)}
	select {
	case c.in <- p:
	case <-ctx.Done():
		return fmt.Errorf("queue grant %s: %w", g.URLID, ctx.Err())
	case <-c.done:
		return errClosed
	}
	select {
	case err := <-p.res:
		return err
	case <-ctx.Done():
		return fmt.Errorf("grant %s: waiting for the ledger's ack: %w", g.URLID, ctx.Err())
	case <-c.done:
		select { // the loop answers everything it took before it ends
		case err := <-p.res:
			return err
		default:
			return errClosed
		}
	}
}

// run is the loop that forms and sends batches until close. It is longer
// than our 60 lines on purpose: one select over the loop's local state
// (the queue, the publishes in flight, the window and the gap), which
// split into pieces would have to move into shared fields and be read in
// several places instead of one.
func (c *committer) run() {
	defer close(c.done)
	var (
		queue    []*pending
		inflight int
		acks     = make(chan struct{}, c.maxInFlight)
		window   <-chan time.Time // armed while grants wait behind a publish
		expired  bool
		stopping bool
		stop     = c.stop // closed by close; nil once seen
		lastSend time.Time
		paced    <-chan time.Time // armed while only the gap holds a batch back
	)
	for {
		for len(queue) > 0 && inflight < c.maxInFlight &&
			(inflight == 0 || expired || stopping || len(queue) >= c.maxBatch) {
			if wait := c.gap - c.now().Sub(lastSend); wait > 0 && !stopping && len(queue) >= gapFrom && len(queue) < c.maxBatch {
				if paced == nil {
					paced = c.after(wait)
				}
				break
			}
			paced, lastSend = nil, c.now()
			n := min(len(queue), c.maxBatch)
			batch := live(queue[:n])
			queue = append(queue[:0], queue[n:]...)
			expired, window = false, nil
			if len(batch) == 0 {
				continue
			}
			inflight++
			go c.send(batch, acks)
		}
		if stopping && len(queue) == 0 && inflight == 0 {
			return
		}
		if len(queue) > 0 && window == nil && !expired {
			window = c.after(c.window)
		}
		in := c.in
		if len(queue) >= c.maxBatch || stopping {
			in = nil // a full batch waits for a free slot: push back on Record
		}
		select {
		case p := <-in:
			queue = append(queue, p)
		case <-acks:
			inflight--
		case <-window:
			expired, window = true, nil
		case <-paced:
			paced = nil
		case <-stop:
			stop, stopping = nil, true
			for drained := false; !drained; {
				select {
				case p := <-c.in:
					queue = append(queue, p)
				default:
					drained = true
				}
			}
		}
	}
}

// live copies the grants whose Record still waits. A Record that gave up
// (its sign answered 503 and undid the spend) is not sent: storing it
// would be harmless, since the undo's marker stops its refund, but useless.
func live(ps []*pending) []*pending {
	out := make([]*pending, 0, len(ps))
	for _, p := range ps {
		if p.ctx.Err() == nil {
			out = append(out, p)
		} else {
			p.res <- p.ctx.Err()
		}
	}
	return out
}

// send publishes one batch and answers each of its grants.
func (c *committer) send(ps []*pending, acks chan<- struct{}) {
	b := Batch{ID: c.newID(), Grants: make([]Grant, len(ps))}
	for i, p := range ps {
		b.Grants[i] = p.g
	}
	err := c.publish(b)
	for _, p := range ps {
		p.res <- err
	}
	acks <- struct{}{}
}

// close sends what is queued, waits for every publish, and ends the loop.
func (c *committer) close() {
	select {
	case <-c.done:
		return
	default:
	}
	close(c.stop)
	<-c.done
}
