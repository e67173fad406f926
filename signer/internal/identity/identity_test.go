package identity_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/mintgate/mintgate/shared/auth"
	"github.com/mintgate/mintgate/shared/config"
	"github.com/mintgate/mintgate/signer/internal/apierr"
	"github.com/mintgate/mintgate/signer/internal/identity"
)

// The issuer and audience the tokens of these tests name.
const (
	testIssuer   = "https://idp.mintgate.test"
	testAudience = "mintgate-signer"
)

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// An RS256 or ES256 token is verified against a JWKS served over HTTP; a
// token signed by any other key, or an HS256 token keyed with the public
// key (algorithm confusion), or an unsigned one, is not.
func TestJWKSVerification(t *testing.T) {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecPub, err := ecKey.PublicKey.ECDH()
	if err != nil {
		t.Fatal(err)
	}
	raw := ecPub.Bytes() // 0x04 || X || Y
	jwks, _ := json.Marshal(map[string]any{"keys": []map[string]string{
		{"kty": "RSA", "kid": "rsa-1", "use": "sig", "alg": "RS256", "n": b64(rsaKey.N.Bytes()), "e": b64(big.NewInt(int64(rsaKey.E)).Bytes())},
		{"kty": "EC", "kid": "ec-1", "use": "sig", "alg": "ES256", "crv": "P-256", "x": b64(raw[1:33]), "y": b64(raw[33:])},
	}})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(jwks)
	}))
	defer srv.Close()

	env := map[string]string{
		"MINTGATE_JWT_JWKS_URL": srv.URL + "/.well-known/jwks.json",
		"MINTGATE_JWT_ISSUER":   testIssuer,
		"MINTGATE_JWT_AUDIENCE": testAudience,
	}
	e := config.New(func(name string) string { return env[name] })
	c := auth.Read(e)
	if err := e.Err(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	id, err := identity.New(ctx, c, time.Now)
	if err != nil {
		t.Fatal(err)
	}

	claims := jwt.MapClaims{"sub": "alice", "tenant_id": "acme", "iss": testIssuer, "aud": testAudience, "exp": time.Now().Add(time.Hour).Unix()}
	otherApp := jwt.MapClaims{"sub": "alice", "tenant_id": "acme", "iss": testIssuer, "aud": "another-app", "exp": time.Now().Add(time.Hour).Unix()}
	noAudience := jwt.MapClaims{"sub": "alice", "tenant_id": "acme", "iss": testIssuer, "exp": time.Now().Add(time.Hour).Unix()}
	signedClaims := func(c jwt.MapClaims, m jwt.SigningMethod, kid string, key any) string {
		tok := jwt.NewWithClaims(m, c)
		if kid != "" {
			tok.Header["kid"] = kid
		}
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	signed := func(m jwt.SigningMethod, kid string, key any) string { return signedClaims(claims, m, kid, key) }
	otherRSA, _ := rsa.GenerateKey(rand.Reader, 2048)
	pubDER, _ := x509.MarshalPKIXPublicKey(&rsaKey.PublicKey)
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, claims).SignedString(jwt.UnsafeAllowNoneSignatureType)

	cases := []struct {
		name  string
		token string
		ok    bool
	}{
		{"RS256 from the JWKS", signed(jwt.SigningMethodRS256, "rsa-1", rsaKey), true},
		{"ES256 from the JWKS", signed(jwt.SigningMethodES256, "ec-1", ecKey), true},
		{"RS256 without kid", signed(jwt.SigningMethodRS256, "", rsaKey), true},
		{"RS256 by another key", signed(jwt.SigningMethodRS256, "rsa-1", otherRSA), false},
		{"HS256 keyed with the public key", signed(jwt.SigningMethodHS256, "rsa-1", pubPEM), false},
		{"HS256 keyed with the modulus", signed(jwt.SigningMethodHS256, "rsa-1", rsaKey.N.Bytes()), false},
		{"RS512 not allowed", signed(jwt.SigningMethodRS512, "rsa-1", rsaKey), false},
		{"alg none", none, false},
		{"minted for another app of the same identity provider", signedClaims(otherApp, jwt.SigningMethodRS256, "rsa-1", rsaKey), false},
		{"minted for no audience", signedClaims(noAudience, jwt.SigningMethodRS256, "rsa-1", rsaKey), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/uploads/sign", nil)
			r.Header.Set("Authorization", "Bearer "+tc.token)
			who, aerr := id.Authenticate(r)
			if tc.ok {
				if aerr != nil {
					t.Fatalf("rejected: %v", aerr)
				}
				if who != (identity.Caller{Tenant: "acme", Subject: "u:alice", Tier: "user"}) {
					t.Errorf("caller %+v", who)
				}
				return
			}
			if aerr == nil || aerr.Status != http.StatusUnauthorized || aerr.Code != apierr.CodeUnauthenticated {
				t.Fatalf("accepted or wrong error: %v", aerr)
			}
		})
	}
}

func TestIPHash(t *testing.T) {
	secret := []byte("ip-hash-secret-for-tests")
	day := time.Date(2026, 3, 1, 23, 59, 0, 0, time.UTC)
	ip := netip.MustParseAddr("203.0.113.7")
	h := identity.IPHash(secret, day, ip)
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(h) {
		t.Fatalf("hash %q", h)
	}
	if identity.IPHash(secret, day.Add(-23*time.Hour), ip) != h {
		t.Error("the hash changed within one UTC day")
	}
	if identity.IPHash(secret, day.Add(2*time.Minute), ip) == h {
		t.Error("the salt did not rotate at UTC midnight")
	}
	if identity.IPHash([]byte("another-secret-entirely"), day, ip) == h {
		t.Error("the hash does not depend on the secret")
	}
	if identity.IPHash(secret, day, netip.MustParseAddr("203.0.113.8")) == h {
		t.Error("two addresses share a hash")
	}
	a := identity.IPHash(secret, day, netip.MustParseAddr("2001:db8:1:2::1"))
	if identity.IPHash(secret, day, netip.MustParseAddr("2001:db8:1:2:ffff::9")) != a {
		t.Error("one IPv6 /64 gets two buckets")
	}
	if identity.IPHash(secret, day, netip.MustParseAddr("2001:db8:1:3::1")) == a {
		t.Error("two IPv6 /64s share a bucket")
	}
}
