// Package identity says who calls the signer: a user named by a verified
// JWT (HS256 or a JWKS), or an anonymous caller of a tenant that allows
// them, known by a keyed, daily-salted hash of its client address as the
// configured trust model finds it (ClientIP). Its one way in is
// Identity.Authenticate; ClientIP is also the read limiter's address.
package identity

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"

	"github.com/mintgate/mintgate/shared/auth"
	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/tiers"
	"github.com/mintgate/mintgate/signer/internal/apierr"
)

// Header names identity reads.
const (
	HeaderTenant         = "X-Tenant-ID"      // an anonymous caller's tenant; a user's must match the token's
	HeaderCFConnectingIP = "CF-Connecting-IP" // the client address Cloudflare vouches for (auth.IPCF)
	HeaderForwardedFor   = "X-Forwarded-For"  // the proxies' chain (auth.IPXFF)
)

// Caller is who asks for a URL: the tenant, the bucket subject within it
// ("u:<user>" or "a:<ip hash>") and the tier whose limit applies.
type Caller struct {
	Tenant  string
	Subject string
	Tier    string // tiers.User or tiers.Anonymous
}

// Bounds on what a bearer token may look like before any parsing.
const (
	maxTokenBytes = 8 << 10
	jwtLeeway     = 10 * time.Second // clock skew tolerated on exp, nbf and iat
	ipHashHexLen  = 32               // 128 bits of HMAC-SHA256, in hex
)

// Identity authenticates callers: a JWT for users, or a tenant header and a
// keyed hash of the client IP for anonymous callers of tenants that allow
// them.
type Identity struct {
	keyfunc jwt.Keyfunc // nil when no JWT can be verified
	// parser verifies with the only algs accepted (no "none", no HS/RS
	// confusion), exp required, and the issuer and audience when
	// configured. Built once: it is read-only, so signs share it.
	parser      *jwt.Parser
	tenantClaim string
	anon        map[string]bool
	ip          ClientIP
	ipSecret    []byte
	now         func() time.Time
	// tokens remembers verified tokens until their exp: a caller's later
	// signs with the same token skip the signature check.
	tokens *tokenCache
}

// Authenticate names the caller of r or says why it cannot.
func (id *Identity) Authenticate(r *http.Request) (Caller, *apierr.Error) {
	authz := r.Header.Get("Authorization")
	if authz == "" {
		return id.anonymous(r)
	}
	scheme, token, _ := strings.Cut(authz, " ")
	token = strings.TrimSpace(token)
	if !strings.EqualFold(scheme, "Bearer") || token == "" {
		return Caller{}, apierr.New(http.StatusUnauthorized, apierr.CodeUnauthenticated, "Authorization must be a Bearer token")
	}
	return id.user(r, token)
}

func (id *Identity) user(r *http.Request, token string) (Caller, *apierr.Error) {
	if id.keyfunc == nil {
		return Caller{}, apierr.New(http.StatusUnauthorized, apierr.CodeUnauthenticated, "this signer accepts no bearer tokens")
	}
	if len(token) > maxTokenBytes {
		return Caller{}, apierr.New(http.StatusUnauthorized, apierr.CodeUnauthenticated, "token too long")
	}
	sub, tenant, ok := id.tokens.get(token, id.now(), id.keyfunc)
	if !ok {
		var aerr *apierr.Error
		if sub, tenant, aerr = id.verify(token); aerr != nil {
			return Caller{}, aerr
		}
	}
	if h := r.Header.Get(HeaderTenant); h != "" && h != tenant {
		return Caller{}, apierr.New(http.StatusForbidden, apierr.CodeForbiddenTenant, "%s does not match the token's tenant", HeaderTenant)
	}
	return Caller{Tenant: tenant, Subject: keys.UserSubject(sub), Tier: tiers.User}, nil
}

// verify checks a token's signature and claims, and remembers a token
// that passed in id.tokens.
func (id *Identity) verify(token string) (sub, tenant string, aerr *apierr.Error) {
	// MapClaims, not a typed struct: the tenant's claim is configured
	// (MINTGATE_JWT_TENANT_CLAIM), and a struct field needs its name at
	// compile time; a typed RegisteredClaims would save ~8 of the ~45
	// allocations a verification costs (the token cache saves them all
	// for every sign of a token but its first).
	claims := jwt.MapClaims{}
	var key any
	keyOf := func(t *jwt.Token) (any, error) {
		k, err := id.keyfunc(t)
		key = k
		return k, err
	}
	parsed, err := id.parser.ParseWithClaims(token, claims, keyOf)
	if err != nil {
		return "", "", apierr.New(http.StatusUnauthorized, apierr.CodeUnauthenticated, "invalid token: %s", tokenProblem(err))
	}
	sub, err = claims.GetSubject()
	if err != nil || !keys.ValidUser(sub) {
		return "", "", apierr.New(http.StatusUnauthorized, apierr.CodeUnauthenticated, "token has no valid sub claim")
	}
	tenant, ok := claims[id.tenantClaim].(string)
	if !ok {
		return "", "", apierr.New(http.StatusUnauthorized, apierr.CodeUnauthenticated, "token has no %s claim", id.tenantClaim)
	}
	if !keys.ValidTenant(tenant) {
		return "", "", apierr.New(http.StatusForbidden, apierr.CodeForbiddenTenant, "the token's tenant is not a valid tenant id")
	}
	if exp, err := claims.GetExpirationTime(); err == nil && exp != nil && comparableKey(key) {
		// Only what the keyfunc needs to find the key again: alg and kid.
		header := map[string]any{"alg": parsed.Header["alg"]}
		if kid, ok := parsed.Header["kid"]; ok {
			header["kid"] = kid
		}
		id.tokens.put(token, verifiedToken{sub: sub, tenant: tenant, until: exp.Add(jwtLeeway), header: header, key: key})
	}
	return sub, tenant, nil
}

func (id *Identity) anonymous(r *http.Request) (Caller, *apierr.Error) {
	tenant := r.Header.Get(HeaderTenant)
	if tenant == "" {
		return Caller{}, apierr.New(http.StatusUnauthorized, apierr.CodeUnauthenticated,
			"send a Bearer token, or %s naming a tenant open to anonymous uploads", HeaderTenant)
	}
	if !keys.ValidTenant(tenant) || !id.anon[tenant] {
		return Caller{}, apierr.New(http.StatusForbidden, apierr.CodeForbiddenTenant, "this tenant does not accept anonymous uploads")
	}
	hash := IPHash(id.ipSecret, id.now(), id.ip.Of(r))
	return Caller{Tenant: tenant, Subject: keys.AnonSubject(hash), Tier: tiers.Anonymous}, nil
}

// IPHash is the anonymous bucket subject: HMAC-SHA256 of the client address
// under a salt derived from the secret and the UTC date. Every instance
// computes the same value, the salt changes daily, and Redis holds no IP.
// IPv6 callers are bucketed by /64, the block one subscriber usually holds,
// so rotating through one's own addresses does not buy fresh buckets.
//
// A subscriber often holds more (a home /56 is 256 /64s, a tunnel broker
// hands out /48s); what bounds those is the tenant's anonymous_all bucket,
// which every anonymous sign also spends from (newAttempt), not a coarser
// per-prefix bucket: a /48 or /56 bucket beside the /64 one would also be
// shared by every customer of a provider that numbers its subscribers'
// /64s out of one /48 (mobile carriers do), throttling them together,
// while a /48 holder would still get no more than anonymous_all allows.
func IPHash(secret []byte, now time.Time, ip netip.Addr) string {
	day := hmac.New(sha256.New, secret)
	day.Write([]byte("mintgate ip salt " + now.UTC().Format(time.DateOnly)))
	m := hmac.New(sha256.New, day.Sum(nil))
	if ip.Is6() && !ip.Is4In6() {
		m.Write([]byte(netip.PrefixFrom(ip.WithZone(""), 64).Masked().String()))
	} else {
		m.Write([]byte(ip.String()))
	}
	return hex.EncodeToString(m.Sum(nil))[:ipHashHexLen]
}

// tokenProblem is a short reason for a failed verification, without
// echoing anything of the token back.
func tokenProblem(err error) string {
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		return "expired"
	case errors.Is(err, jwt.ErrTokenNotValidYet), errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return "not valid yet"
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return "a required claim is missing"
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return "wrong issuer"
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return "wrong audience"
	case errors.Is(err, jwt.ErrTokenSignatureInvalid), errors.Is(err, jwt.ErrTokenUnverifiable):
		return "signature not verified"
	case errors.Is(err, jwt.ErrTokenMalformed):
		return "malformed"
	}
	return "not accepted"
}

// New builds the verifier the configuration asks for. A JWKS is
// fetched in the background and refreshed until ctx ends; a signer whose
// JWKS is unreachable at start still starts and answers 401 meanwhile.
func New(ctx context.Context, c auth.Config, now func() time.Time) (*Identity, error) {
	id := &Identity{
		tenantClaim: c.JWTTenantClaim,
		anon:        c.AnonTenants,
		ip:          ClientIP{source: c.IPSource, trusted: c.TrustedProxies},
		ipSecret:    c.IPHashSecret,
		now:         now,
		tokens:      newTokenCache(maxCachedTokens),
	}
	var methods []string
	switch {
	case len(c.JWTSecret) > 0:
		secret := c.JWTSecret
		methods = []string{jwt.SigningMethodHS256.Alg()}
		id.keyfunc = func(*jwt.Token) (any, error) { return secret, nil }
	case c.JWKSURL != "":
		k, err := keyfunc.NewDefaultCtx(ctx, []string{c.JWKSURL})
		if err != nil {
			return nil, fmt.Errorf("MINTGATE_JWT_JWKS_URL: %w", err)
		}
		methods = []string{jwt.SigningMethodRS256.Alg(), jwt.SigningMethodES256.Alg()}
		id.keyfunc = k.Keyfunc
	}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods(methods),
		jwt.WithExpirationRequired(),
		jwt.WithLeeway(jwtLeeway),
		jwt.WithTimeFunc(now),
	}
	if c.JWTIssuer != "" {
		opts = append(opts, jwt.WithIssuer(c.JWTIssuer))
	}
	if c.JWTAudience != "" {
		opts = append(opts, jwt.WithAudience(c.JWTAudience))
	}
	id.parser = jwt.NewParser(opts...)
	return id, nil
}

// ClientIP is how id finds a request's client address: the address an
// anonymous caller's bucket is keyed by.
func (id *Identity) ClientIP() ClientIP { return id.ip }
