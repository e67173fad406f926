package backoff_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/mintgate/mintgate/shared/backoff"
)

// The redelivery of a due grant: 1 s doubled to 30 s, less up to a fifth.
func TestDelayLessUpToAFifth(t *testing.T) {
	p := backoff.Policy{Min: time.Second, Max: 30 * time.Second, Jitter: 0.2}
	for _, c := range []struct {
		n  int
		hi time.Duration
	}{
		{1, time.Second}, {2, 2 * time.Second}, {4, 8 * time.Second}, {6, 30 * time.Second}, {100, 30 * time.Second},
	} {
		for range 100 {
			if d := p.Delay(c.n); d > c.hi || d < c.hi*4/5 {
				t.Fatalf("Delay(%d) = %v, want within [%v, %v]", c.n, d, c.hi*4/5, c.hi)
			}
		}
	}
}

// The completer's waits: between half and all of 100 ms doubled, capped at 5 s.
func TestDelayBetweenHalfAndAll(t *testing.T) {
	p := backoff.Policy{Min: 100 * time.Millisecond, Max: 5 * time.Second, Jitter: 0.5}
	for n, hi := range map[int]time.Duration{1: 100 * time.Millisecond, 3: 400 * time.Millisecond, 10: 5 * time.Second, 1000: 5 * time.Second} {
		lo := hi
		for range 200 {
			d := p.Delay(n)
			if d < hi/2 || d > hi {
				t.Fatalf("Delay(%d) = %s, want in [%s, %s]", n, d, hi/2, hi)
			}
			lo = min(lo, d)
		}
		if lo > hi*3/4 {
			t.Errorf("Delay(%d): 200 draws all in the top quarter (lowest %s): no jitter", n, lo)
		}
	}
}

// Without jitter, the waits of the retry loops: exact doubling to the cap,
// whatever the count (no overflow at a huge one, a first wait for n < 1).
func TestDelayWithoutJitterIsExact(t *testing.T) {
	p := backoff.Policy{Min: 250 * time.Millisecond, Max: 5 * time.Second}
	want := []time.Duration{250 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
	for n, w := range want {
		if d := p.Delay(n); d != w {
			t.Errorf("Delay(%d) = %v, want %v", n, d, w)
		}
	}
	if d := p.Delay(1 << 40); d != 5*time.Second {
		t.Errorf("Delay(2^40) = %v, want the cap", d)
	}
	huge := backoff.Policy{Min: time.Second, Max: time.Duration(1<<63 - 1)}
	if d := huge.Delay(200); d <= 0 {
		t.Errorf("Delay(200) under an unbounded cap = %v, want positive", d)
	}
}

func TestSleepEndsWithTheContext(t *testing.T) {
	if err := backoff.Sleep(context.Background(), time.Millisecond); err != nil {
		t.Errorf("Sleep = %v, want nil", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if err := backoff.Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep on a cancelled context = %v", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("Sleep on a cancelled context took %v", took)
	}
}

func ExamplePolicy_Delay() {
	p := backoff.Policy{Min: 100 * time.Millisecond, Max: time.Second}
	for n := 1; n <= 5; n++ {
		fmt.Println(p.Delay(n))
	}
	// Output:
	// 100ms
	// 200ms
	// 400ms
	// 800ms
	// 1s
}
