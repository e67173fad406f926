// Package backoff is the one capped exponential backoff of mintgate: every
// loop that waits before trying again asks a Policy how long.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Policy is a capped doubling wait: Min after the first failure, twice as
// long after each next one, never more than Max, less a random part of up
// to Jitter of it (0 ≤ Jitter ≤ 1), so that instances failing together do
// not retry in step.
type Policy struct {
	Min, Max time.Duration
	Jitter   float64
}

// Delay is the wait after the n-th consecutive failure (n ≥ 1; less counts
// as 1): Min·2ⁿ⁻¹ capped at Max, less up to Jitter of it at random.
func (p Policy) Delay(n int) time.Duration {
	d := p.Min
	for i := 1; i < n && d > 0 && d < p.Max; i++ {
		d = min(d, p.Max/2) * 2 // never past Max, never overflowing
	}
	d = min(d, p.Max)
	if j := time.Duration(float64(d) * min(max(p.Jitter, 0), 1)); j > 0 {
		d -= rand.N(j + 1)
	}
	return d
}

// Sleep waits d, or less if ctx ends first; it returns ctx.Err() then.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
