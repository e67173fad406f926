// Package pipeline is the failure policy both consume loops share. A
// handler is a plain function of one message; what its error means — try
// again later, hold while a dependency is down, never apply — is decided
// here, the same for the sweeper's JetStream durable and the completer's
// SQS queue. Each loop maps the Decision to its broker's primitives and
// keeps its own mechanics (pulling, acking, holding); policies that wrap a
// handler are middleware, as in watermill.
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Handler applies one message. It returns nil once the message is applied;
// otherwise an error whose class (see Decide) says what becomes of it. It
// must be idempotent: a message can arrive more than once.
type Handler[T any] func(ctx context.Context, msg T) error

// Middleware wraps a handler in a policy of its own.
type Middleware[T any] func(Handler[T]) Handler[T]

// Chain is h wrapped in mws, the first outermost.
func Chain[T any](h Handler[T], mws ...Middleware[T]) Handler[T] {
	for i := len(mws) - 1; i >= 0; i-- {
		h = mws[i](h)
	}
	return h
}

// The classes of handler errors. Wrap one (fmt.Errorf("%w: …", ErrPoison))
// to say which; an error of neither class is retried.
var (
	// ErrPoison marks a message that can never be applied, however often
	// it is tried: it is terminated, or left for the dead-letter queue.
	ErrPoison = errors.New("pipeline: message can never be applied")
	// ErrOutage marks a failure of a dependency (a store is down): the
	// message is kept, without counting an attempt, until it is back.
	ErrOutage = errors.New("pipeline: a dependency is unavailable")
)

// Decision is what a consume loop does with a message once its handler
// returned.
type Decision int

// The decisions, and the primitives the loops map them to.
const (
	// Ack: applied. JetStream Ack; SQS DeleteMessageBatch.
	Ack Decision = iota
	// Retry: not applied; deliver it again after a backoff, counting an
	// attempt. JetStream NakWithDelay.
	Retry
	// Hold: not applied because a dependency is down; keep the message
	// without spending its deliveries until the dependency answers. SQS:
	// kept invisible with ChangeMessageVisibility, no receive counted.
	// JetStream: the durable has no delivery limit, so NakWithDelay as
	// for Retry costs nothing.
	Hold
	// Terminate: never apply it. JetStream TermWithReason; SQS visible
	// again at once, for the redrive policy's maxReceiveCount to move it to
	// the dead-letter queue.
	Terminate
)

func (d Decision) String() string {
	switch d {
	case Ack:
		return "ack"
	case Retry:
		return "retry"
	case Hold:
		return "hold"
	case Terminate:
		return "terminate"
	}
	return fmt.Sprintf("decision(%d)", int(d))
}

// Decide is the decision for a handler's result: nil acks, ErrPoison
// terminates (it wins over ErrOutage: no wait makes it applicable),
// ErrOutage holds, and anything else retries.
func Decide(err error) Decision {
	switch {
	case err == nil:
		return Ack
	case errors.Is(err, ErrPoison):
		return Terminate
	case errors.Is(err, ErrOutage):
		return Hold
	}
	return Retry
}

// Classify puts every error of the handler that is in neither class into
// class (ErrOutage or ErrPoison), keeping its text: the policy of a source
// where an unclassified error can only mean one thing.
func Classify[T any](class error) Middleware[T] {
	return func(next Handler[T]) Handler[T] {
		return func(ctx context.Context, msg T) error {
			err := next(ctx, msg)
			if err == nil || errors.Is(err, ErrPoison) || errors.Is(err, ErrOutage) {
				return err
			}
			return classed{err: err, class: class}
		}
	}
}

// Poison is err classed as ErrPoison, with err's text; nil stays nil.
func Poison(err error) error {
	if err == nil {
		return nil
	}
	return classed{err: err, class: ErrPoison}
}

// classed is err in class, with err's text. It is comparable, so a
// package-level classed error works as an errors.Is target.
type classed struct{ err, class error }

func (c classed) Error() string   { return c.err.Error() }
func (c classed) Unwrap() []error { return []error{c.err, c.class} }

// Timeout bounds each call of the handler to d.
func Timeout[T any](d time.Duration) Middleware[T] {
	return func(next Handler[T]) Handler[T] {
		return func(ctx context.Context, msg T) error {
			ctx, cancel := context.WithTimeout(ctx, d)
			defer cancel()
			return next(ctx, msg)
		}
	}
}

// Observe calls f after each call of the handler with the message, the
// error, the decision it leads to and how long the call took: the place
// for metrics.
func Observe[T any](f func(msg T, err error, d Decision, took time.Duration)) Middleware[T] {
	return func(next Handler[T]) Handler[T] {
		return func(ctx context.Context, msg T) error {
			start := time.Now()
			err := next(ctx, msg)
			f(msg, err, Decide(err), time.Since(start))
			return err
		}
	}
}
