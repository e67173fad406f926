package ledger

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mintgate/mintgate/shared/backoff"
)

// Pulls expire after pullExpiry and the server sends an idle heartbeat
// every pullHeartbeat while one waits. Two missed heartbeats (10 s) tell
// the iterator its pull is gone (the node holding it died without a word)
// and it pulls again: that bounds how long a lost pull stalls the sweep.
//
// Not shorter: a server that is only paused (a stall, a long GC) still
// holds the pull, and answers both it and the new one when it resumes —
// more than the iterator's buffer of one batch, and nats.go drops the rest
// as a slow consumer, to come back after the ack wait: the heartbeats
// must outlast the stalls a healthy server has, or every stall delays
// refunds by the ack wait.
const (
	pullExpiry    = 15 * time.Second
	pullHeartbeat = 5 * time.Second
)

// consumerConfig is the sweepers' durable pull consumer of the due grants.
func consumerConfig(durable string, o consumeOptions) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       durable,
		Description:   "mintgate sweepers: due grants",
		FilterSubject: SubjectDue,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       o.ackWait,
		MaxAckPending: o.maxAckPending,
		MaxDeliver:    -1, // a refund is retried until it is applied, never dropped
		Replicas:      0,  // the stream's
	}
}

// subscribe finds the stream, creates or updates the durable and starts
// pulling. A clustered stream or consumer without a leader (a node was just
// killed, an election is under way) answers with timeouts, or with
// "temporarily unavailable", for a while: that is retried with backoff until ctx ends, instead of ending the
// service, which would only be restarted into the same election.
func (l *Client) subscribe(ctx context.Context, cfg jetstream.ConsumerConfig, o consumeOptions) (jetstream.Stream, jetstream.MessagesContext, error) {
	for n := 1; ; n++ {
		stream, it, err := l.trySubscribe(ctx, cfg, o)
		if err == nil {
			return stream, it, nil
		}
		err = fmt.Errorf("%w: stream %s, consumer %s: %w", ErrUnavailable, l.cfg.Stream, cfg.Durable, err)
		if !passing(err) {
			return nil, nil, err // not a passing election: say so now
		}
		wait := electionBackoff.Delay(n)
		o.log.Warn("due grants: the ledger does not answer yet; retrying", "retryIn", wait, "err", err)
		if backoff.Sleep(ctx, wait) != nil {
			return nil, nil, err
		}
	}
}

// trySubscribe is one try of subscribe, its requests bounded by openTry (a
// request that reached a cluster without a meta leader may get no answer).
func (l *Client) trySubscribe(ctx context.Context, cfg jetstream.ConsumerConfig, o consumeOptions) (jetstream.Stream, jetstream.MessagesContext, error) {
	try, cancel := context.WithTimeout(ctx, openTry)
	defer cancel()
	stream, err := l.js.Stream(try, l.cfg.Stream)
	if err != nil {
		return nil, nil, err
	}
	cons, err := l.js.CreateOrUpdateConsumer(try, l.cfg.Stream, cfg)
	if err != nil {
		return nil, nil, err
	}
	it, err := messages(cons, o)
	if err != nil {
		return nil, nil, err
	}
	return stream, it, nil
}

// messages starts pulling, o.batch messages a pull, with heartbeats.
func messages(cons jetstream.Consumer, o consumeOptions) (jetstream.MessagesContext, error) {
	return cons.Messages(jetstream.PullMaxMessages(o.batch), jetstream.PullExpiry(pullExpiry), jetstream.PullHeartbeat(pullHeartbeat))
}

// resubscribe makes a new iterator in place of old (stopped: whatever it
// had pulled comes back after the ack wait), retrying until it works or
// the loop stops.
func (c *consumeLoop) resubscribe(old jetstream.MessagesContext) {
	old.Stop()
	for n := 1; ; n++ {
		if backoff.Sleep(c.run, electionBackoff.Delay(n)) != nil {
			return // stopping
		}
		ctx, cancel := context.WithTimeout(c.hctx, 5*time.Second)
		cons, err := c.l.js.CreateOrUpdateConsumer(ctx, c.l.cfg.Stream, c.cfg)
		cancel()
		if err != nil {
			c.o.log.Warn("due grants: consumer unavailable", "err", err)
			continue
		}
		it, err := messages(cons, c.o)
		if err != nil {
			c.o.log.Warn("due grants: subscribe failed", "err", err)
			continue
		}
		c.mu.Lock()
		c.it = it
		if c.isStopping() {
			it.Drain()
		}
		c.mu.Unlock()
		return
	}
}
