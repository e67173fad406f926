package main

import (
	"fmt"
	"math"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/config"
	"github.com/mintgate/mintgate/shared/keys"
)

// IP trust models of MINTGATE_IP_SOURCE.
const (
	ipRemote = "remote"
	ipCF     = "cf-connecting-ip"
	ipXFF    = "xff"
)

// Rate-limit header forms of MINTGATE_RATELIMIT_HEADERS.
const (
	headersLegacy = "legacy" // RateLimit-Limit, -Remaining, -Reset, -Policy: 30;w=60
	headersDraft  = "draft"  // RateLimit-Policy: "user";q=30;w=60 and RateLimit: "user";r=0;t=2
)

// maxPresignTTL is the longest expiry SigV4 presigning allows.
const maxPresignTTL = 7 * 24 * time.Hour

// maxPutBytes is the largest object one S3 PUT can create.
const maxPutBytes = 5 << 30

// minHS256Secret is the shortest HMAC key RFC 7518 §3.2 allows for HS256.
const minHS256Secret = 32

// cfg is the signer's configuration, read from SPEC §5's variables.
type cfg struct {
	HTTPAddr string
	// OpsAddr serves /metrics (and /admin/*) besides /healthz and /readyz,
	// never on HTTPAddr (MINTGATE_OPS_ADDR, SPEC §7).
	OpsAddr string

	Redis config.Redis
	NATS  config.NATS

	S3Bucket    string
	S3Region    string
	S3Endpoint  string
	S3PathStyle bool
	// AWS credentials given in the environment; empty means the SDK's chain.
	AWS config.AWS

	URLTTL       time.Duration
	MaxObject    int64
	ContentTypes map[string]bool
	// Tiers is MINTGATE_TIERS with MINTGATE_TENANT_TIERS' per-tenant
	// overrides (an addition to SPEC §5, empty by default).
	Tiers config.TierSet
	// TiersFile adds per-tenant overrides from a file re-read while the
	// signer runs (MINTGATE_TENANT_TIERS_FILE; empty: none).
	TiersFile string

	JWTSecret      []byte
	JWKSURL        string
	JWTIssuer      string
	JWTAudience    string
	JWTTenantClaim string

	AnonTenants map[string]bool
	IPSource    string
	// IPSourceSet: MINTGATE_IP_SOURCE was given, not defaulted, so an
	// operator chose remote on purpose (clients that connect directly).
	IPSourceSet    bool
	TrustedProxies []netip.Prefix
	IPHashSecret   []byte

	// Degraded decides without Redis, while it is unavailable, from
	// in-process buckets holding DegradedShare of every limit
	// (MINTGATE_DEGRADED_MODE=local, MINTGATE_DEGRADED_SHARE).
	Degraded      bool
	DegradedShare float64
	SweepGrace    time.Duration
	// GrantSecret keys the MAC of every ledger batch (MINTGATE_GRANT_SECRET).
	GrantSecret     []byte
	RateLimitHeader string
	// Shadow lists the tenants in shadow mode (MINTGATE_SHADOW_TENANTS, or
	// all with ShadowAll): a short bucket is counted, not refused.
	Shadow    map[string]bool
	ShadowAll bool
	// AdminToken turns the admin API on the ops port on, bearer auth
	// (MINTGATE_ADMIN_TOKEN; empty: off).
	AdminToken []byte
	// DemoPage serves the demo upload page at /demo/ (MINTGATE_DEMO_PAGE=on;
	// an addition to SPEC §5, off by default, on in the local stack).
	DemoPage bool
	// PprofAddr serves net/http/pprof (MINTGATE_PPROF_ADDR; an addition to
	// SPEC §5, empty = off by default, loopback addresses only).
	PprofAddr string
}

// defaultHTTPAddr is where the signer listens without MINTGATE_HTTP_ADDR.
const defaultHTTPAddr = ":8080"

// defaultOpsAddr is where it serves /metrics without MINTGATE_OPS_ADDR.
const defaultOpsAddr = ":9080"

// loadConfig reads every variable and reports all bad values at once, each
// naming its variable.
func loadConfig(getenv func(string) string) (cfg, error) {
	e := config.New(getenv)
	c := cfg{
		HTTPAddr: e.String("MINTGATE_HTTP_ADDR", defaultHTTPAddr),
		OpsAddr:  e.String("MINTGATE_OPS_ADDR", defaultOpsAddr),
		Redis:    e.Redis(),
		NATS:     e.NATS(),

		S3Bucket:    e.Required("MINTGATE_S3_BUCKET"),
		S3Region:    e.String("MINTGATE_S3_REGION", ""),
		S3Endpoint:  e.URL("MINTGATE_S3_ENDPOINT", "", "http", "https"),
		S3PathStyle: e.Bool("MINTGATE_S3_PATH_STYLE", false),

		AWS: e.AWS(),

		URLTTL:    e.Duration("MINTGATE_URL_TTL", 120*time.Second),
		MaxObject: e.Int("MINTGATE_MAX_OBJECT_BYTES", 104857600),
		Tiers:     e.TenantTiers("MINTGATE_TENANT_TIERS", e.Tiers("MINTGATE_TIERS", config.DefaultTiers)),

		TiersFile: e.String("MINTGATE_TENANT_TIERS_FILE", ""),

		JWTSecret:      e.Secret("MINTGATE_JWT_HS256_SECRET"),
		JWKSURL:        e.URL("MINTGATE_JWT_JWKS_URL", "", "https", "http"),
		JWTIssuer:      e.String("MINTGATE_JWT_ISSUER", ""),
		JWTAudience:    e.String("MINTGATE_JWT_AUDIENCE", ""),
		JWTTenantClaim: e.String("MINTGATE_JWT_TENANT_CLAIM", "tenant_id"),

		IPSource:     e.OneOf("MINTGATE_IP_SOURCE", ipRemote, ipRemote, ipCF, ipXFF),
		IPSourceSet:  e.String("MINTGATE_IP_SOURCE", "") != "",
		IPHashSecret: e.Secret("MINTGATE_IP_HASH_SECRET"),

		Degraded:        e.OneOf("MINTGATE_DEGRADED_MODE", "off", "off", "local") == "local",
		DegradedShare:   share(e, "MINTGATE_DEGRADED_SHARE", defaultDegradedShare),
		SweepGrace:      e.Duration("MINTGATE_SWEEP_GRACE", 30*time.Second),
		GrantSecret:     e.GrantSecret(),
		RateLimitHeader: e.OneOf("MINTGATE_RATELIMIT_HEADERS", headersLegacy, headersLegacy, headersDraft),
		DemoPage:        e.OneOf("MINTGATE_DEMO_PAGE", "off", "off", "on") == "on",
		PprofAddr:       e.String("MINTGATE_PPROF_ADDR", ""),
	}

	if c.OpsAddr == c.HTTPAddr {
		e.Fail("MINTGATE_OPS_ADDR", "%q is MINTGATE_HTTP_ADDR too: /metrics must not be on the public port", c.OpsAddr)
	}
	if c.URLTTL < time.Second || c.URLTTL > maxPresignTTL {
		e.Fail("MINTGATE_URL_TTL", "%v must be between 1s and %v (the SigV4 presign limit)", c.URLTTL, maxPresignTTL)
	}
	if c.PprofAddr != "" && !loopbackAddr(c.PprofAddr) {
		e.Fail("MINTGATE_PPROF_ADDR", "%q must be a loopback host:port such as 127.0.0.1:6060: profiles are for an operator on the box (or kubectl port-forward), never the network", c.PprofAddr)
	}
	if c.MaxObject > maxPutBytes {
		e.Fail("MINTGATE_MAX_OBJECT_BYTES", "%d is above %d, the largest single S3 PUT", c.MaxObject, int64(maxPutBytes))
	}

	c.ContentTypes = map[string]bool{}
	for _, ct := range e.List("MINTGATE_CONTENT_TYPES", []string{"image/jpeg", "image/png", "image/webp", "application/pdf"}) {
		if !validContentType(ct) {
			e.Fail("MINTGATE_CONTENT_TYPES", "%q is not a type/subtype media type", ct)
		}
		c.ContentTypes[ct] = true
	}

	c.Shadow = map[string]bool{}
	for _, t := range e.List("MINTGATE_SHADOW_TENANTS", nil) {
		switch {
		case t == "*":
			c.ShadowAll = true
		case !keys.ValidTenant(t):
			e.Fail("MINTGATE_SHADOW_TENANTS", "%q is not a tenant id ([A-Za-z0-9_-]{1,64}) or *", t)
		default:
			c.Shadow[t] = true
		}
	}
	c.AdminToken = e.Secret("MINTGATE_ADMIN_TOKEN")
	if n := len(c.AdminToken); n > 0 && n < minAdminToken {
		e.Fail("MINTGATE_ADMIN_TOKEN", "must be at least %d bytes: it refills buckets", minAdminToken)
	}

	c.AnonTenants = map[string]bool{}
	for _, t := range e.List("MINTGATE_ANON_TENANTS", nil) {
		if !keys.ValidTenant(t) {
			e.Fail("MINTGATE_ANON_TENANTS", "%q is not a tenant id ([A-Za-z0-9_-]{1,64})", t)
		}
		c.AnonTenants[t] = true
	}

	for _, p := range e.List("MINTGATE_TRUSTED_PROXIES", nil) {
		prefix, err := parsePrefix(p)
		if err != nil {
			e.Fail("MINTGATE_TRUSTED_PROXIES", "%q is not a CIDR or an IP address", p)
			continue
		}
		c.TrustedProxies = append(c.TrustedProxies, prefix)
	}

	switch {
	case len(c.JWTSecret) > 0 && c.JWKSURL != "":
		e.Fail("MINTGATE_JWT_HS256_SECRET", "set either it or MINTGATE_JWT_JWKS_URL, not both")
	case len(c.JWTSecret) > 0 && len(c.JWTSecret) < minHS256Secret:
		e.Fail("MINTGATE_JWT_HS256_SECRET", "must be at least %d bytes", minHS256Secret)
	case len(c.JWTSecret) == 0 && c.JWKSURL == "" && len(c.AnonTenants) == 0:
		e.Fail("MINTGATE_JWT_HS256_SECRET", "no caller could ever authenticate: set it, MINTGATE_JWT_JWKS_URL or MINTGATE_ANON_TENANTS")
	}
	if c.JWKSURL != "" {
		// The JWKS decides whose signatures we believe: fetched in clear, it
		// is anyone's on the path. And an identity provider shared with other
		// apps mints tokens that carry tenant_id for them too: only those
		// minted for us (aud) may spend our tenants' quota.
		if u, err := url.Parse(c.JWKSURL); err == nil && u.Scheme != "https" && !isLoopback(u.Hostname()) {
			e.Fail("MINTGATE_JWT_JWKS_URL", "%q must be https:// (http:// only on a loopback address)", config.RedactURL(c.JWKSURL))
		}
		if c.JWTAudience == "" {
			e.Fail("MINTGATE_JWT_AUDIENCE", "required with MINTGATE_JWT_JWKS_URL: the audience our tokens are minted for")
		}
	}
	if !validClaimName(c.JWTTenantClaim) {
		e.Fail("MINTGATE_JWT_TENANT_CLAIM", "%q is not a claim name", c.JWTTenantClaim)
	}

	if len(c.AnonTenants) > 0 && len(c.IPHashSecret) < 16 {
		e.Fail("MINTGATE_IP_HASH_SECRET", "anonymous tenants need a secret of at least 16 bytes to key the IP hash")
	}
	switch {
	case c.IPSource == ipXFF && len(c.TrustedProxies) == 0:
		// Without trusted proxies every X-Forwarded-For entry is untrusted
		// and the socket address would be used: say so instead of guessing.
		e.Fail("MINTGATE_TRUSTED_PROXIES", "required with MINTGATE_IP_SOURCE=xff: the proxy ranges whose X-Forwarded-For entries are trusted")
	case c.IPSource == ipCF && len(c.TrustedProxies) == 0:
		// Believed from any peer, the header lets one client name a fresh
		// address, and so a fresh anonymous bucket, on every request.
		e.Fail("MINTGATE_TRUSTED_PROXIES", "required with MINTGATE_IP_SOURCE=cf-connecting-ip: the edge's ranges, the only peers whose CF-Connecting-IP is believed")
	}
	return c, e.Err()
}

// degradedLimit is the share of a tier each signer instance allows on its own
// while Redis is unavailable: share × capacity and rate, so that instances ×
// share ≤ 1 keeps them together within the real limit (docs/production.md:
// the HPA's maxReplicas × MINTGATE_DEGRADED_SHARE ≤ 1). A bucket holds at
// least one token, or a small tier would refuse everyone.
func degradedLimit(l bucket.Limit, share float64) bucket.Limit {
	return bucket.Limit{Capacity: math.Max(1, l.Capacity*share), Rate: l.Rate * share}
}

// minAdminToken is the shortest MINTGATE_ADMIN_TOKEN.
const minAdminToken = 32

// shadowed reports whether tenant is in shadow mode.
func (c cfg) shadowed(tenant string) bool { return c.ShadowAll || c.Shadow[tenant] }

// defaultDegradedShare is 5 %: twenty instances, the base HPA's maximum.
const defaultDegradedShare = 0.05

// share reads a fraction 0 < share ≤ 1.
func share(e *config.Env, name string, def float64) float64 {
	v := e.String(name, "")
	if v == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f > 0 && f <= 1) {
		e.Fail(name, "%q is not a share above 0 and at most 1, such as 0.05", v)
		return def
	}
	return f
}

// isLoopback reports whether host (a URL's Hostname) is this machine.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("parse %q: %w", s, err)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("parse %q: %w", s, err)
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// validContentType accepts a bare type/subtype of visible ASCII: the value
// is signed and must equal the browser's Content-Type byte for byte.
func validContentType(s string) bool {
	typ, sub, ok := strings.Cut(s, "/")
	if !ok || typ == "" || sub == "" || strings.Contains(sub, "/") {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= 0x20 || s[i] >= 0x7f || s[i] == ';' || s[i] == ',' {
			return false
		}
	}
	return true
}

func validClaimName(s string) bool {
	return s != "" && len(s) <= 128 && !strings.ContainsAny(s, " \t\r\n")
}
