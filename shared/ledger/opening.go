package ledger

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"
)

// Opening is a ledger a service opens in the background, so that it
// serves /readyz (failing, with the reason in its log) while the stream is
// missing, misconfigured or without a leader, instead of exiting or
// creating the stream. Until the ledger is open, Record and Ping fail with
// ErrUnavailable and the reason of the last try.
type Opening struct {
	nc     *nats.Conn
	cancel context.CancelFunc
	done   chan struct{} // closed once the ledger is open or the opening ended

	mu     sync.Mutex
	ledger *Client
	last   error // why the ledger is not open yet
}

// errOpening is Ping's answer before the first try has ended.
var errOpening = errors.New("ledger: being opened")

// DialOpening connects as Dial does (ctx's deadline, if any, bounds the
// connect), tries to open the ledger once and returns: if that failed,
// it goes on opening it in the background until it succeeds, ctx ends
// or Close is called; every error of a try is retried with backoff, since only the
// operator (or a healed cluster) can fix it. What no retry can fix is
// returned now: a connection refused, a bad cfg, a server that cannot
// schedule messages.
func DialOpening(ctx context.Context, natsURL string, cfg Config, opts ...nats.Option) (*Opening, error) {
	nc, js, err := dialConn(ctx, natsURL, cfg, opts...)
	if err != nil {
		return nil, err
	}
	if err := preflight(js, cfg); err != nil {
		nc.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	p := &Opening{nc: nc, cancel: cancel, done: make(chan struct{}), last: errOpening}
	// The first try before returning: with the stream in place (the
	// usual case) the ledger is open when the service starts to serve.
	try, cancelTry := context.WithTimeout(ctx, openTry)
	l, err := open(try, js, cfg)
	cancelTry()
	if err == nil {
		l.ownsNC = true
		p.ledger = l
		close(p.done)
		return p, nil
	}
	p.last = err
	cfg.logger().Error("grant ledger: not open yet; serving unready and retrying in the background", "err", err)
	go func() {
		defer close(p.done)
		l, err := openLoop(ctx, js, cfg, func(error) bool { return true }, p.tried)
		p.mu.Lock()
		defer p.mu.Unlock()
		if err != nil {
			p.last = err
			return
		}
		l.ownsNC = true
		p.ledger = l
	}()
	return p, nil
}

func (p *Opening) tried(err error) {
	p.mu.Lock()
	p.last = err
	p.mu.Unlock()
}

// Done is closed once the opening has ended: Ledger then says how.
func (p *Opening) Done() <-chan struct{} { return p.done }

// Ledger is the open ledger, or nil and why it is not open (yet).
func (p *Opening) Client() (*Client, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ledger != nil {
		return p.ledger, nil
	}
	return nil, fmt.Errorf("%w: not open: %w", ErrUnavailable, p.last)
}

// Wait returns the ledger once it is open, or an error when ctx ends or
// the opening ended without one.
func (p *Opening) Wait(ctx context.Context) (*Client, error) {
	select {
	case <-p.done:
		return p.Client()
	case <-ctx.Done():
		_, err := p.Client()
		return nil, fmt.Errorf("%w (%w)", err, ctx.Err())
	}
}

// Record is the open ledger's Record; before it is open, ErrUnavailable.
func (p *Opening) Record(ctx context.Context, g Grant) error {
	l, err := p.Client()
	if err != nil {
		return err
	}
	return l.Record(ctx, g)
}

// Ping is the readiness check: the open ledger's Ping, or why it is not
// open yet.
func (p *Opening) Ping(ctx context.Context) error {
	l, err := p.Client()
	if err != nil {
		return err
	}
	return l.Ping(ctx)
}

// Close stops the opening, then closes the ledger if it is open (sending
// its queued grants first) and the connection.
func (p *Opening) Close() {
	p.cancel()
	<-p.done
	if l, _ := p.Client(); l != nil {
		l.Close()
		return
	}
	p.nc.Close()
}
