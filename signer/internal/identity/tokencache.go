package identity

import (
	"crypto"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// maxCachedTokens bounds the verified-token cache: a token is at most
// maxTokenBytes, so the cache holds at most ~80 MiB of them, and far less
// with tokens of usual sizes (~0.5 KiB: ~5 MiB).
const maxCachedTokens = 10_000

// tokenCache remembers what verifying a bearer token found, by the token's
// exact bytes, until the token's exp (plus the leeway the parser allows):
// a caller that signs many times with one token has its signature checked
// once. Only a token that verified is cached, and only its own bytes find
// it, so a hit is the same token that verified before.
//
// A key rotation invalidates it: an entry remembers the key that verified
// it, and a hit asks the keyfunc again for the token's kid and alg (a map
// read for a JWKS) and drops the entry unless the same key comes back. A
// JWKS token without a kid (verified against every key of the set) is not
// cached. With HS256 the key is fixed for the process's life.
type tokenCache struct {
	mu      sync.Mutex
	entries map[string]verifiedToken
	max     int
}

// verifiedToken is a token's claims that mintgate reads, and how to tell
// that the key which verified it still would.
type verifiedToken struct {
	sub, tenant string
	until       time.Time // exp + leeway
	header      map[string]any
	key         any
}

func newTokenCache(max int) *tokenCache {
	return &tokenCache{entries: make(map[string]verifiedToken), max: max}
}

// get returns the cached claims of token when it verified before, is not
// past its exp and its key is still the keyfunc's.
func (c *tokenCache) get(token string, now time.Time, kf jwt.Keyfunc) (sub, tenant string, ok bool) {
	c.mu.Lock()
	v, ok := c.entries[token]
	c.mu.Unlock()
	if !ok {
		return "", "", false
	}
	if !now.Before(v.until) || !sameKey(kf, v) {
		c.mu.Lock()
		delete(c.entries, token)
		c.mu.Unlock()
		return "", "", false
	}
	return v.sub, v.tenant, true
}

// put remembers a verified token. When the cache is full, one entry goes
// (Go's map order: an arbitrary one) to make room.
func (c *tokenCache) put(token string, v verifiedToken) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[token]; !ok && len(c.entries) >= c.max {
		for k := range c.entries {
			delete(c.entries, k)
			break
		}
	}
	c.entries[token] = v
}

// comparableKey reports whether sameKey can tell key again: an HS256
// secret or a public key, not a JWKS's whole set (a token without a kid).
func comparableKey(key any) bool {
	switch key.(type) {
	case []byte, interface{ Equal(crypto.PublicKey) bool }:
		return true
	}
	return false
}

// sameKey asks kf for the key of v's header and compares it with the key
// that verified v.
func sameKey(kf jwt.Keyfunc, v verifiedToken) bool {
	got, err := kf(&jwt.Token{Header: v.header})
	if err != nil {
		return false
	}
	switch want := v.key.(type) {
	case []byte:
		g, ok := got.([]byte)
		return ok && string(g) == string(want)
	case interface{ Equal(crypto.PublicKey) bool }:
		return want.Equal(got)
	}
	return false
}

// len is how many tokens the cache holds.
func (c *tokenCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}
