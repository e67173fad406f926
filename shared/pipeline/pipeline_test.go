package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mintgate/mintgate/shared/pipeline"
)

var errRedis = errors.New("dial tcp 127.0.0.1:6379: connection refused")

func TestDecide(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want pipeline.Decision
	}{
		{"applied", nil, pipeline.Ack},
		{"unclassified: retry", errRedis, pipeline.Retry},
		{"a cancelled call: retry", context.DeadlineExceeded, pipeline.Retry},
		{"poison", fmt.Errorf("%w: tier %q", pipeline.ErrPoison, "gold"), pipeline.Terminate},
		{"poison, wrapped again", fmt.Errorf("batch b1: %w", fmt.Errorf("%w: x", pipeline.ErrPoison)), pipeline.Terminate},
		{"outage", fmt.Errorf("%w: %w", pipeline.ErrOutage, errRedis), pipeline.Hold},
		{"poison and outage: no wait makes it applicable", errors.Join(pipeline.ErrOutage, pipeline.ErrPoison), pipeline.Terminate},
	} {
		if got := pipeline.Decide(c.err); got != c.want {
			t.Errorf("%s: Decide(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}

// fails is a handler returning err.
func fails(err error) pipeline.Handler[string] {
	return func(context.Context, string) error { return err }
}

// TestClassifyHoldsWhatIsNotPoison: a source whose handler fails only
// when its store is down holds on every unclassified error, keeps the
// error's text and cause, and still terminates poison.
func TestClassifyHoldsWhatIsNotPoison(t *testing.T) {
	outage := pipeline.Classify[string](pipeline.ErrOutage)
	err := outage(fails(fmt.Errorf("mark done: %w", errRedis)))(context.Background(), "m")
	if pipeline.Decide(err) != pipeline.Hold || !errors.Is(err, errRedis) || err.Error() != "mark done: "+errRedis.Error() {
		t.Errorf("classified %q: %v, cause kept %v", err, pipeline.Decide(err), errors.Is(err, errRedis))
	}
	poison := fmt.Errorf("%w: no such tenant", pipeline.ErrPoison)
	if err := outage(fails(poison))(context.Background(), "m"); pipeline.Decide(err) != pipeline.Terminate {
		t.Errorf("poison under Classify(ErrOutage): %v", pipeline.Decide(err))
	}
	if err := outage(fails(nil))(context.Background(), "m"); err != nil {
		t.Errorf("success under Classify: %v", err)
	}
	terminate := pipeline.Classify[string](pipeline.ErrPoison)
	if err := terminate(fails(errRedis))(context.Background(), "m"); pipeline.Decide(err) != pipeline.Terminate {
		t.Errorf("Classify(ErrPoison): %v", pipeline.Decide(err))
	}
}

func TestTimeoutBoundsEachCall(t *testing.T) {
	h := pipeline.Chain(func(ctx context.Context, _ string) error {
		<-ctx.Done()
		return ctx.Err()
	}, pipeline.Timeout[string](20*time.Millisecond))
	start := time.Now()
	err := h(context.Background(), "m")
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Errorf("err %v after %v", err, time.Since(start))
	}
	if pipeline.Decide(err) != pipeline.Retry {
		t.Errorf("a timed-out call: %v, want retry", pipeline.Decide(err))
	}
}

// TestObserveSeesTheDecision: the observer outside Classify counts what the
// loop will do; middlewares run first-outermost.
func TestObserveSeesTheDecision(t *testing.T) {
	var trace []string
	mark := func(name string) pipeline.Middleware[string] {
		return func(next pipeline.Handler[string]) pipeline.Handler[string] {
			return func(ctx context.Context, msg string) error {
				trace = append(trace, name)
				return next(ctx, msg)
			}
		}
	}
	var seen []string
	observe := pipeline.Observe(func(msg string, err error, d pipeline.Decision, took time.Duration) {
		if took < 0 {
			t.Errorf("took %v", took)
		}
		seen = append(seen, msg+":"+d.String())
	})
	h := pipeline.Chain(func(_ context.Context, msg string) error {
		trace = append(trace, "handler")
		switch msg {
		case "bad":
			return fmt.Errorf("%w: bad", pipeline.ErrPoison)
		case "down":
			return errRedis
		}
		return nil
	}, mark("outer"), observe, pipeline.Classify[string](pipeline.ErrOutage), mark("inner"))
	for _, m := range []string{"ok", "bad", "down"} {
		_ = h(context.Background(), m)
	}
	if got, want := strings.Join(seen, " "), "ok:ack bad:terminate down:hold"; got != want {
		t.Errorf("observed %q, want %q", got, want)
	}
	if got, want := strings.Join(trace[:3], " "), "outer inner handler"; got != want {
		t.Errorf("order %q, want %q", got, want)
	}
}

func TestDecisionString(t *testing.T) {
	for d, want := range map[pipeline.Decision]string{pipeline.Ack: "ack", pipeline.Retry: "retry", pipeline.Hold: "hold", pipeline.Terminate: "terminate", 9: "decision(9)"} {
		if d.String() != want {
			t.Errorf("%d: %q", int(d), d.String())
		}
	}
}

// A package's own poison sentinel keeps its text and works with errors.Is
// both ways.
func TestPoisonSentinel(t *testing.T) {
	errMalformed := pipeline.Poison(errors.New("ledger: malformed due batch"))
	err := fmt.Errorf("%w: tier %q", errMalformed, "gold")
	if !errors.Is(err, errMalformed) || !errors.Is(err, pipeline.ErrPoison) || pipeline.Decide(err) != pipeline.Terminate {
		t.Errorf("%v: Is(sentinel) %v, Is(ErrPoison) %v", err, errors.Is(err, errMalformed), errors.Is(err, pipeline.ErrPoison))
	}
	if err.Error() != `ledger: malformed due batch: tier "gold"` {
		t.Errorf("text %q", err)
	}
	if pipeline.Poison(nil) != nil {
		t.Error("Poison(nil) is not nil")
	}
}
