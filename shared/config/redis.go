package config

import (
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
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
	u, err := url.Parse(r.URL)
	switch {
	case err != nil:
		// e.URL has reported it.
	case redisDB(u) != "":
		e.Fail("MINTGATE_REDIS_URL", "%s", redisDB(u))
	case u.Scheme == "rediss" && slices.Contains([]string{"true", "1"}, u.Query().Get("skip_verify")):
		e.Fail("MINTGATE_REDIS_URL", "skip_verify turns off the server's certificate check; give its CA in MINTGATE_REDIS_CA instead")
	case r.CA != "" && u.Scheme != "rediss":
		// Someone who names a CA expects TLS: say so rather than talk in clear.
		e.Fail("MINTGATE_REDIS_CA", "is set, but MINTGATE_REDIS_URL is not a rediss:// URL")
	}
	return r
}

// redisDB says what is wrong with the database a Redis URL's path names,
// or "": the path is empty, "/" or "/<number>". The URL is not quoted: it
// may hold a password. Every other option of the URL is go-redis's to
// judge, when shared/dial builds the client at start.
func redisDB(u *url.URL) string {
	db := strings.Trim(u.Path, "/")
	if db == "" {
		return ""
	}
	if strings.Contains(db, "/") {
		return "the path must be /<database number>, such as /0"
	}
	if _, err := strconv.Atoi(db); err != nil {
		return "the database " + strconv.Quote(db) + " is not a number"
	}
	return ""
}
