package quota

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// clockSamples is how many TIME round trips one Sync takes; the shortest
// one is kept, as NTP does.
const clockSamples = 3

// Clock estimates Redis's clock (TIME) from this process's monotonic
// clock, for Ask.Until. Its uncertainty is half the round trip of the
// sample it keeps. Sync it at start and every few seconds: a Redis whose
// clock steps, or a failover to a replica on another host, is followed at
// the next Sync. On Redis Cluster TIME goes to any node, so Until assumes
// the nodes' clocks agree (NTP); a node that lags only narrows what Until
// protects, and one ahead answers Late to Spends it had time to run, which
// the caller sees (see Store.Spend) and can retry without Until. The zero
// Clock has no estimate and gives zero Untils. It is safe for concurrent
// use.
type Clock struct {
	mu     sync.Mutex
	local  time.Time     // when the sample was read, on this process's clock (with its monotonic reading)
	server time.Time     // Redis's clock at local
	slack  time.Duration // half the sample's round trip
}

// Sync reads Redis's clock a few times and keeps the sample with the
// shortest round trip. On error the previous estimate stays.
func (c *Clock) Sync(ctx context.Context, rdb redis.UniversalClient) error {
	var best struct {
		local, server time.Time
		rtt           time.Duration
	}
	for i := range clockSamples {
		t0 := time.Now()
		srv, err := rdb.Time(ctx).Result()
		if err != nil {
			return unavailable("time", err)
		}
		rtt := time.Since(t0)
		if i == 0 || rtt < best.rtt {
			best.local, best.server, best.rtt = t0.Add(rtt/2), srv, rtt
		}
	}
	c.mu.Lock()
	c.local, c.server, c.slack = best.local, best.server, best.rtt/2
	c.mu.Unlock()
	return nil
}

// Until is deadline, an instant on this process's clock (a ctx's
// deadline), on Redis's clock less the estimate's uncertainty and TIME's
// rounding to the millisecond: Redis's clock reaches Until before this
// process's reaches deadline. Zero before the first Sync, and for a zero
// deadline.
func (c *Clock) Until(deadline time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.local.IsZero() || deadline.IsZero() {
		return time.Time{}
	}
	return c.server.Add(deadline.Sub(c.local) - c.slack - time.Millisecond)
}

// String describes the estimate, for logs.
func (c *Clock) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.local.IsZero() {
		return "redis clock: not synced"
	}
	return fmt.Sprintf("redis clock: %v ahead of ours ±%v", c.server.Sub(c.local.Round(0)), c.slack)
}
