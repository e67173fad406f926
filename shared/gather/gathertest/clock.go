// Package gathertest is a clock for testing what a gather.Gatherer does
// when, without waiting for real time.
package gathertest

import (
	"slices"
	"sync"
	"time"

	"github.com/mintgate/mintgate/shared/gather"
)

// Clock is a gather.Clock a test moves by hand: a timer fires only within
// Add, when the clock reaches its due time, in the order of those times,
// on Add's goroutine. It is safe for concurrent use.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*timer // armed, neither fired nor stopped
}

type timer struct {
	c   *Clock
	due time.Time
	f   func()
}

// NewClock is a Clock at t.
func NewClock(t time.Time) *Clock { return &Clock{now: t} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc arms a timer that calls f once Add has moved the clock d on.
func (c *Clock) AfterFunc(d time.Duration, f func()) gather.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &timer{c: c, due: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

// Stop disarms t; it reports whether t was armed.
func (t *timer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	i := slices.Index(t.c.timers, t)
	if i < 0 {
		return false
	}
	t.c.timers = slices.Delete(t.c.timers, i, i+1)
	return true
}

// Add moves the clock by d, firing each timer due by then at its due time,
// the earliest first (ties in the order they were armed); a timer armed by
// one that fires, and due by then, fires too.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	for {
		i := c.next(end)
		if i < 0 {
			break
		}
		t := c.timers[i]
		c.timers = slices.Delete(c.timers, i, i+1)
		if t.due.After(c.now) {
			c.now = t.due
		}
		c.mu.Unlock()
		t.f()
		c.mu.Lock()
	}
	c.now = end
	c.mu.Unlock()
}

// next is the index of the earliest timer due by end, or -1.
func (c *Clock) next(end time.Time) int {
	best := -1
	for i, t := range c.timers {
		if !t.due.After(end) && (best < 0 || t.due.Before(c.timers[best].due)) {
			best = i
		}
	}
	return best
}

// Armed is how many timers are armed, neither fired nor stopped.
func (c *Clock) Armed() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}
