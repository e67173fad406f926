package main

import (
	"context"
	"sync"
	"time"

	"github.com/mintgate/mintgate/shared/events"
	"github.com/mintgate/mintgate/shared/ledger"
	"github.com/mintgate/mintgate/shared/records"
)

// recordsBus is the signer's side of the upload records' feed: the
// events it publishes (the per-minute tallies, a caller's aborts) on the
// ledger's NATS connection, once the ledger is open.
type recordsBus struct {
	led *ledger.Opening
	mu  sync.Mutex
	pub *events.Publisher
}

// publisher is the events publisher on the open ledger's connection, or
// the error of an opening still under way.
func (b *recordsBus) publisher() (*events.Publisher, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pub != nil {
		return b.pub, nil
	}
	l, err := b.led.Client()
	if err != nil {
		return nil, err
	}
	b.pub = events.New(l.JetStream())
	return b.pub, nil
}

// publishTally is the tallier's publish.
func (b *recordsBus) publishTally(ctx context.Context, signer string, t records.Tally) error {
	p, err := b.publisher()
	if err != nil {
		return err
	}
	_, err = p.PublishTally(ctx, signer, t.ID, t)
	return err
}

// aborted publishes the aborted event of a multipart upload its caller
// just ended (DELETE /uploads/{urlId}), best effort: the DELETE has
// succeeded whatever happens here. Unpublished (NATS away, or a SIGKILL
// between the abort's refund and this line), the grant's row reads
// refunded once the sweeper meets its refunded marker at its due time.
func (d deps) aborted(ctx context.Context, tenant, urlID, key string) {
	if d.bus == nil {
		return
	}
	p, err := d.bus.publisher()
	if err == nil {
		_, err = p.PublishAborted(ctx, events.Ended{URLID: urlID, Tenant: tenant, Key: key, At: d.now().UTC()})
	}
	if err != nil {
		d.log.Warn("aborted event not published; the upload's record will read refunded", "tenant", tenant, "urlId", urlID, "err", err)
	}
}

// startRecords turns the upload records on when MINTGATE_POSTGRES_URL is
// set: the store of the routes, the tallier (run until ctx ends; the
// function returned waits for its last flush) and the bus on the signer's
// own ledger (none when a test stands in for it: no tallies then).
func (d *deps) startRecords(ctx context.Context) (func(), error) {
	led, _ := d.ledger.(*ledger.Opening)
	if d.cfg.Postgres == "" {
		return func() {}, nil
	}
	st, err := records.Open(ctx, d.cfg.Postgres)
	if err != nil {
		return nil, err
	}
	d.records = st
	if led == nil {
		return st.Close, nil
	}
	d.bus = &recordsBus{led: led}
	d.tally = newTallier(d.now, d.log)
	d.tally.pub = func(ctx context.Context, t records.Tally) error { return d.bus.publishTally(ctx, d.tally.instance, t) }
	tctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.tally.run(tctx)
	}()
	return func() {
		stop()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
		st.Close()
	}, nil
}
