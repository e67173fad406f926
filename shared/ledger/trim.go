package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// trimTimeout bounds one trim (a consumer info and a purge).
const trimTimeout = 5 * time.Second

// Trim is one attempt to remove what the durable has finished with.
type Trim struct {
	// Floor is the durable's ack floor: every due message at or below
	// this stream sequence was acked or terminated; 0 if unknown.
	Floor uint64
	// Err is why nothing was removed; the messages stay until the next
	// trim, or until MaxAge.
	Err error
}

// trimLoop removes, every trim interval until the loop stops, the due
// messages the durable has finished with, after rescuing the overdue
// schedules (see rescue).
//
// Why: the stream keeps limits retention (see LedgerConfig.StreamConfig),
// so nothing else removes a handled grant before MaxAge, days later. The
// schedule message needs no removing: nats-server purges a fired one-shot
// "@at" schedule itself, in the same write that stores its due message
// (which carries "Nats-Schedule-Next: purge"). Only the due message stays,
// and only the durable knows when it was applied.
//
// How: one purge of SubjectDue below the durable's ack floor. Every due
// message at or below the floor was acked, after its handler returned nil
// (applied), or terminated (can never apply; its body was logged), so the
// purge removes nothing unapplied. A grant that keeps failing holds the
// floor, and the messages after it wait for it (at worst until MaxAge).
//
// Why not a delete per message after its ack: with sync_interval always,
// every stream write is fsynced on its own, and a stream's fsyncs a second
// are a budget shared with the signer's Record (docs/production.md), so a
// delete per grant would take a third of it and cap the sweep rate near
// it; one purge per interval costs one write however many it removes. Why not Nats-Schedule-TTL: the due message is stored when
// the schedule fires and MaxAge ages it from then, so a TTL equal to
// MaxAge removes nothing sooner, and a shorter one would drop grants no
// sweeper applied during a long outage; it would also need allow_msg_ttl,
// which a stream can never turn off again.
func (c *consumeLoop) trimLoop() {
	t := time.NewTicker(c.o.trimInterval)
	defer t.Stop()
	var trimmed uint64 // the floor of the last purge that worked
	for {
		select {
		case <-c.stopping:
			return
		case <-t.C:
		}
		if c.o.rescueAfter > 0 {
			c.rescue()
		}
		floor, err := c.trim(trimmed)
		if err == nil && floor == trimmed {
			continue // nothing new finished: no write
		}
		if err != nil {
			c.o.log.Warn("due grants: removing the finished ones failed; they stay until the next try", "floor", floor, "err", err)
		} else {
			trimmed = floor
		}
		if c.o.observeTrim != nil {
			c.o.observeTrim(Trim{Floor: floor, Err: err})
		}
	}
}

// trim purges the due messages at or below the durable's ack floor, unless
// the floor is 0 or done (already purged). A floor below done (the stream
// or the durable was recreated) is purged too. It returns the floor.
func (c *consumeLoop) trim(done uint64) (uint64, error) {
	ctx, cancel := context.WithTimeout(c.run, trimTimeout) // a stop does not wait for a slow server
	defer cancel()
	// A fresh info: the floor only moves up, so purging below a floor read
	// a moment ago is safe however far the consumer has gone since.
	cons, err := c.stream.Consumer(ctx, c.cfg.Durable)
	if err != nil {
		return 0, fmt.Errorf("consumer %s info: %w", c.cfg.Durable, err)
	}
	floor := cons.CachedInfo().AckFloor.Stream
	if c.o.trimHold != "" {
		held, err := c.stream.Consumer(ctx, c.o.trimHold)
		switch {
		case errors.Is(err, jetstream.ErrConsumerNotFound):
		case err != nil:
			return 0, fmt.Errorf("consumer %s info: %w", c.o.trimHold, err)
		default:
			floor = min(floor, held.CachedInfo().AckFloor.Stream)
		}
	}
	if floor == 0 || floor == done {
		return floor, nil
	}
	if err := c.stream.Purge(ctx, jetstream.WithPurgeSubject(SubjectDue), jetstream.WithPurgeSequence(floor+1)); err != nil {
		return floor, fmt.Errorf("purge %s below sequence %d: %w", SubjectDue, floor+1, err)
	}
	return floor, nil
}
