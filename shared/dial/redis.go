package dial

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"

	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/config"
)

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

// Redis is a client for r that connects lazily: one server, or a cluster
// when r has seed addresses. Every command, dial and pool wait is bounded
// by the timeout and never retried: a slow Redis must turn into a fast 503,
// not a request that hangs. Errors name the variable at fault.
func Redis(r config.Redis) (redis.UniversalClient, error) {
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
