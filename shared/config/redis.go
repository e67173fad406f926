package config

import (
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is how a service reaches Redis: one server by URL, or a cluster by
// seed addresses, with one timeout for every command.
type Redis struct {
	URL          string
	ClusterAddrs []string
	Timeout      time.Duration
}

// Redis reads MINTGATE_REDIS_URL, MINTGATE_REDIS_CLUSTER_ADDRS and MINTGATE_REDIS_TIMEOUT.
func (e *Env) Redis() Redis {
	r := Redis{
		URL:          e.URL("MINTGATE_REDIS_URL", "redis://127.0.0.1:6379/0", "redis", "rediss"),
		ClusterAddrs: e.List("MINTGATE_REDIS_CLUSTER_ADDRS", nil),
		Timeout:      e.Duration("MINTGATE_REDIS_TIMEOUT", 150*time.Millisecond),
	}
	if len(r.ClusterAddrs) == 0 {
		if _, err := redis.ParseURL(r.URL); err != nil {
			e.Fail("MINTGATE_REDIS_URL", "%q: %v", RedactURL(r.URL), err)
		}
	}
	return r
}

// Client connects lazily. Every command, dial and pool wait is bounded by
// the timeout and never retried: a slow Redis must turn into a fast 503,
// not a request that hangs.
func (r Redis) Client() (redis.UniversalClient, error) {
	if len(r.ClusterAddrs) > 0 {
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs:         r.ClusterAddrs,
			DialTimeout:   r.Timeout,
			ReadTimeout:   r.Timeout,
			WriteTimeout:  r.Timeout,
			PoolTimeout:   r.Timeout,
			MaxRetries:    -1,
			DialerRetries: 1,
		}), nil
	}
	opt, err := redis.ParseURL(r.URL)
	if err != nil {
		// url.Parse's error quotes the whole URL, password and all.
		return nil, fmt.Errorf("MINTGATE_REDIS_URL: %q is not a redis or rediss URL", RedactURL(r.URL))
	}
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout, opt.PoolTimeout = r.Timeout, r.Timeout, r.Timeout, r.Timeout
	opt.MaxRetries = -1
	opt.DialerRetries = 1 // a refused dial answers at once, not after five backoffs
	return redis.NewClient(opt), nil
}
