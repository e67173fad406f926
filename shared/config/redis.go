package config

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is how a service reaches Redis: one server by URL, or a cluster by
// seed addresses, with one timeout for every command. The URL's user and
// password (an ACL user) and its scheme (rediss:// for TLS) apply in
// cluster mode too; only its host is then unused.
type Redis struct {
	URL          string
	ClusterAddrs []string
	Timeout      time.Duration
	// CA is a PEM file of the CAs that sign the server's certificate for
	// rediss://; only they are trusted. Empty: the system's roots.
	CA string
}

// Redis reads MINTGATE_REDIS_URL, MINTGATE_REDIS_CLUSTER_ADDRS,
// MINTGATE_REDIS_TIMEOUT and MINTGATE_REDIS_CA.
func (e *Env) Redis() Redis {
	r := Redis{
		URL:          e.URL("MINTGATE_REDIS_URL", "redis://127.0.0.1:6379/0", "redis", "rediss"),
		ClusterAddrs: e.List("MINTGATE_REDIS_CLUSTER_ADDRS", nil),
		Timeout:      e.Duration("MINTGATE_REDIS_TIMEOUT", 150*time.Millisecond),
		CA:           e.String("MINTGATE_REDIS_CA", ""),
	}
	opt, err := parseRedisURL(r.URL)
	switch {
	case err != nil:
		e.Fail("MINTGATE_REDIS_URL", "%v", err)
	case opt.TLSConfig != nil && opt.TLSConfig.InsecureSkipVerify:
		e.Fail("MINTGATE_REDIS_URL", "skip_verify turns off the server's certificate check; give its CA in MINTGATE_REDIS_CA instead")
	case r.CA != "" && opt.TLSConfig == nil:
		// Someone who names a CA expects TLS: say so rather than talk in clear.
		e.Fail("MINTGATE_REDIS_CA", "is set, but MINTGATE_REDIS_URL is not a rediss:// URL")
	}
	return r
}

// poolSize is the connections kept per Redis node. go-redis's default (10
// per CPU) ran dry under 50 concurrent signs on two cores: a sign waiting
// past the timeout for a connection is a 503 while Redis itself is idle.
// Connections are cheap next to that.
const poolSize = 128

// parseRedisURL is redis.ParseURL with errors that never quote the URL,
// which may hold a password.
func parseRedisURL(s string) (*redis.Options, error) {
	opt, err := redis.ParseURL(s)
	if ue, ok := errors.AsType[*url.Error](err); ok {
		return nil, fmt.Errorf("not a URL: %w", ue.Err)
	}
	return opt, err
}

// Client connects lazily. Every command, dial and pool wait is bounded by
// the timeout and never retried: a slow Redis must turn into a fast 503,
// not a request that hangs.
func (r Redis) Client() (redis.UniversalClient, error) {
	opt, err := parseRedisURL(r.URL)
	if err != nil {
		return nil, fmt.Errorf("MINTGATE_REDIS_URL: %w", err)
	}
	if r.CA != "" && opt.TLSConfig != nil {
		pool, err := readCA(r.CA)
		if err != nil {
			return nil, fmt.Errorf("MINTGATE_REDIS_CA: %w", err)
		}
		opt.TLSConfig.RootCAs = pool
	}
	if len(r.ClusterAddrs) > 0 {
		var tlsConfig *tls.Config
		if opt.TLSConfig != nil {
			// Each node is checked against the name it is dialled by, not
			// the URL's host.
			tlsConfig = opt.TLSConfig.Clone()
			tlsConfig.ServerName = ""
		}
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs:         r.ClusterAddrs,
			PoolSize:      poolSize,
			Username:      opt.Username,
			Password:      opt.Password,
			TLSConfig:     tlsConfig,
			DialTimeout:   r.Timeout,
			ReadTimeout:   r.Timeout,
			WriteTimeout:  r.Timeout,
			PoolTimeout:   r.Timeout,
			MaxRetries:    -1,
			DialerRetries: 1,
			// No CLIENT SETINFO on each new connection: one round trip
			// less, and one command less the ACL user needs.
			DisableIdentity: true,
		}), nil
	}
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout, opt.PoolTimeout = r.Timeout, r.Timeout, r.Timeout, r.Timeout
	opt.PoolSize = max(opt.PoolSize, poolSize)
	opt.MaxRetries = -1
	opt.DialerRetries = 1 // a refused dial answers at once, not after five backoffs
	opt.DisableIdentity = true
	return redis.NewClient(opt), nil
}
