package identity

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/mintgate/mintgate/signer/internal/apierr"
)

// tokenCacheIdentity is an identity as newIdentity builds it for a JWKS,
// whose keyfunc is the test's: the current key of each kid, swapped at
// will (the real JWKS client refreshes hourly, which a test cannot wait
// for), counting its calls.
type tokenCacheIdentity struct {
	*Identity
	mu    sync.Mutex
	keys  map[string]*ecdsa.PublicKey
	calls int
	now   time.Time
}

func newTokenCacheIdentity(t *testing.T, max int) *tokenCacheIdentity {
	t.Helper()
	f := &tokenCacheIdentity{keys: map[string]*ecdsa.PublicKey{}, now: time.Now()}
	f.Identity = &Identity{
		tenantClaim: "tenant_id",
		now:         func() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.now },
		tokens:      newTokenCache(max),
		keyfunc: func(tok *jwt.Token) (any, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.calls++
			kid, _ := tok.Header["kid"].(string)
			if k, ok := f.keys[kid]; ok {
				return k, nil
			}
			return nil, errors.New("no such kid")
		},
	}
	f.parser = jwt.NewParser(jwt.WithValidMethods([]string{"ES256"}), jwt.WithExpirationRequired(),
		jwt.WithLeeway(jwtLeeway), jwt.WithTimeFunc(f.Identity.now))
	return f
}

func (f *tokenCacheIdentity) setKey(kid string, k *ecdsa.PublicKey) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if k == nil {
		delete(f.keys, kid)
		return
	}
	f.keys[kid] = k
}

func (f *tokenCacheIdentity) keyCalls() int { f.mu.Lock(); defer f.mu.Unlock(); return f.calls }

func (f *tokenCacheIdentity) advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mu.Unlock()
}

func (f *tokenCacheIdentity) auth(token string) (Caller, *apierr.Error) {
	r := httptest.NewRequest("POST", "/uploads/sign", nil)
	r.Header.Set("Authorization", "Bearer "+token)
	return f.Authenticate(r)
}

func tokenCacheKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func tokenCacheToken(t *testing.T, key *ecdsa.PrivateKey, kid, user string, exp time.Time) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"sub": user, "tenant_id": "acme", "exp": exp.Unix()})
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A token that verified once is not verified again (its key is only looked
// up, to see it is still the same), until it expires or its key rotates.
func TestTokenCache(t *testing.T) {
	t.Run("a second sign with the token skips its verification", func(t *testing.T) {
		f := newTokenCacheIdentity(t, 10)
		key := tokenCacheKey(t)
		f.setKey("k1", &key.PublicKey)
		tok := tokenCacheToken(t, key, "k1", "alice", f.now.Add(time.Hour))
		for i := range 3 {
			who, aerr := f.auth(tok)
			if aerr != nil || who != (Caller{Tenant: "acme", Subject: "u:alice", Tier: "user"}) {
				t.Fatalf("sign %d: %+v %v", i, who, aerr)
			}
		}
		if f.tokens.len() != 1 {
			t.Errorf("%d cached tokens, want 1", f.tokens.len())
		}
		// One lookup to verify, one per later hit to see the key is the same.
		if n := f.keyCalls(); n != 3 {
			t.Errorf("%d key lookups for 3 signs, want 3 (one verification, two checks)", n)
		}
	})

	t.Run("an expired token is refused, cached or not", func(t *testing.T) {
		f := newTokenCacheIdentity(t, 10)
		key := tokenCacheKey(t)
		f.setKey("k1", &key.PublicKey)
		tok := tokenCacheToken(t, key, "k1", "alice", f.now.Add(time.Minute))
		if _, aerr := f.auth(tok); aerr != nil {
			t.Fatal(aerr)
		}
		f.advance(time.Minute + jwtLeeway - time.Second)
		if _, aerr := f.auth(tok); aerr != nil {
			t.Fatalf("within the leeway: %v", aerr)
		}
		f.advance(2 * time.Second)
		if _, aerr := f.auth(tok); aerr == nil || aerr.Status != http.StatusUnauthorized {
			t.Fatalf("past exp + leeway: %v, want 401", aerr)
		}
	})

	t.Run("a rotated or removed key invalidates its tokens", func(t *testing.T) {
		f := newTokenCacheIdentity(t, 10)
		old, next := tokenCacheKey(t), tokenCacheKey(t)
		f.setKey("k1", &old.PublicKey)
		tok := tokenCacheToken(t, old, "k1", "alice", f.now.Add(time.Hour))
		if _, aerr := f.auth(tok); aerr != nil {
			t.Fatal(aerr)
		}
		f.setKey("k1", &next.PublicKey) // same kid, new key
		if _, aerr := f.auth(tok); aerr == nil || aerr.Status != http.StatusUnauthorized {
			t.Fatalf("after the key changed: %v, want 401", aerr)
		}
		f.setKey("k1", &old.PublicKey)
		if _, aerr := f.auth(tok); aerr != nil {
			t.Fatal(aerr)
		}
		f.setKey("k1", nil) // the kid left the JWKS
		if _, aerr := f.auth(tok); aerr == nil || aerr.Status != http.StatusUnauthorized {
			t.Fatalf("after the kid left: %v, want 401", aerr)
		}
	})

	t.Run("only the token's own bytes find it", func(t *testing.T) {
		f := newTokenCacheIdentity(t, 10)
		key := tokenCacheKey(t)
		f.setKey("k1", &key.PublicKey)
		tok := tokenCacheToken(t, key, "k1", "alice", f.now.Add(time.Hour))
		if _, aerr := f.auth(tok); aerr != nil {
			t.Fatal(aerr)
		}
		forged := tok[:len(tok)-2] + "AA"
		if forged == tok {
			forged = tok[:len(tok)-2] + "BB"
		}
		if _, aerr := f.auth(forged); aerr == nil {
			t.Fatal("a token with another signature was accepted")
		}
	})

	t.Run("the cache holds at most its bound", func(t *testing.T) {
		f := newTokenCacheIdentity(t, 2)
		key := tokenCacheKey(t)
		f.setKey("k1", &key.PublicKey)
		for _, u := range []string{"a", "b", "c", "d"} {
			if _, aerr := f.auth(tokenCacheToken(t, key, "k1", u, f.now.Add(time.Hour))); aerr != nil {
				t.Fatal(aerr)
			}
		}
		if n := f.tokens.len(); n != 2 {
			t.Errorf("%d cached tokens, want the bound 2", n)
		}
	})

	t.Run("a token without a kid is verified every time", func(t *testing.T) {
		// A JWKS answers such a token with its whole key set: there is no
		// one key to compare later, so it is not cached.
		f := newTokenCacheIdentity(t, 10)
		key := tokenCacheKey(t)
		f.Identity.keyfunc = func(*jwt.Token) (any, error) {
			return jwt.VerificationKeySet{Keys: []jwt.VerificationKey{&key.PublicKey}}, nil
		}
		tok := tokenCacheToken(t, key, "", "alice", f.now.Add(time.Hour))
		for range 2 {
			if _, aerr := f.auth(tok); aerr != nil {
				t.Fatal(aerr)
			}
		}
		if n := f.tokens.len(); n != 0 {
			t.Errorf("%d cached tokens, want 0", n)
		}
	})
}
