// Package auth is how the signer knows its callers: the bearer tokens it
// believes, the tenants that take anonymous callers, and where an
// anonymous caller's address comes from (MINTGATE_JWT_*,
// MINTGATE_ANON_TENANTS, MINTGATE_IP_SOURCE, MINTGATE_TRUSTED_PROXIES,
// MINTGATE_IP_HASH_SECRET), read once and refused when no one, or anyone,
// could get in.
package auth

import (
	"fmt"
	"net/netip"
	"net/url"
	"strings"

	"github.com/mintgate/mintgate/shared/config"
	"github.com/mintgate/mintgate/shared/keys"
)

// The trust models of MINTGATE_IP_SOURCE: where an anonymous caller's
// address comes from.
const (
	IPRemote = "remote"           // the socket's peer
	IPCF     = "cf-connecting-ip" // the edge's header, from MINTGATE_TRUSTED_PROXIES only
	IPXFF    = "xff"              // X-Forwarded-For, read from the right past the trusted proxies
)

// minHS256Secret is the shortest HMAC key RFC 7518 §3.2 allows for HS256.
const minHS256Secret = 32

// minIPHashSecret is the shortest key of the anonymous callers' IP hash.
const minIPHashSecret = 16

// Config is how the signer knows its callers: the bearer tokens it
// believes, and the tenants that take anonymous callers with the address
// their buckets are keyed by.
type Config struct {
	JWTSecret      []byte // MINTGATE_JWT_HS256_SECRET
	JWKSURL        string // MINTGATE_JWT_JWKS_URL
	JWTIssuer      string // MINTGATE_JWT_ISSUER; empty: not checked
	JWTAudience    string // MINTGATE_JWT_AUDIENCE; empty: not checked
	JWTTenantClaim string // MINTGATE_JWT_TENANT_CLAIM

	AnonTenants map[string]bool // MINTGATE_ANON_TENANTS
	IPSource    string          // MINTGATE_IP_SOURCE: IPRemote, IPCF or IPXFF
	// IPSourceSet: MINTGATE_IP_SOURCE was given, not defaulted, so an
	// operator chose remote on purpose (clients that connect directly).
	IPSourceSet    bool
	TrustedProxies []netip.Prefix // MINTGATE_TRUSTED_PROXIES
	IPHashSecret   []byte         // MINTGATE_IP_HASH_SECRET
}

// Read reads the MINTGATE_JWT_* variables, MINTGATE_ANON_TENANTS,
// MINTGATE_IP_SOURCE, MINTGATE_TRUSTED_PROXIES and MINTGATE_IP_HASH_SECRET,
// and refuses the combinations that would let no one in, or anyone.
func Read(e *config.Env) Config {
	id := Config{
		JWTSecret:      e.Secret("MINTGATE_JWT_HS256_SECRET"),
		JWKSURL:        e.URL("MINTGATE_JWT_JWKS_URL", "", "https", "http"),
		JWTIssuer:      e.String("MINTGATE_JWT_ISSUER", ""),
		JWTAudience:    e.String("MINTGATE_JWT_AUDIENCE", ""),
		JWTTenantClaim: e.String("MINTGATE_JWT_TENANT_CLAIM", "tenant_id"),

		AnonTenants:  map[string]bool{},
		IPSource:     e.OneOf("MINTGATE_IP_SOURCE", IPRemote, IPRemote, IPCF, IPXFF),
		IPSourceSet:  e.String("MINTGATE_IP_SOURCE", "") != "",
		IPHashSecret: e.Secret("MINTGATE_IP_HASH_SECRET"),
	}
	for _, t := range e.List("MINTGATE_ANON_TENANTS", nil) {
		if !keys.ValidTenant(t) {
			e.Fail("MINTGATE_ANON_TENANTS", "%q is not a tenant id ([A-Za-z0-9_-]{1,64})", t)
		}
		id.AnonTenants[t] = true
	}
	for _, p := range e.List("MINTGATE_TRUSTED_PROXIES", nil) {
		prefix, err := parsePrefix(p)
		if err != nil {
			e.Fail("MINTGATE_TRUSTED_PROXIES", "%q is not a CIDR or an IP address", p)
			continue
		}
		id.TrustedProxies = append(id.TrustedProxies, prefix)
	}
	checkTokens(e, id)
	checkAnonymous(e, id)
	return id
}

// checkTokens refuses a token setup that trusts too much or no one.
func checkTokens(e *config.Env, id Config) {
	switch {
	case len(id.JWTSecret) > 0 && id.JWKSURL != "":
		e.Fail("MINTGATE_JWT_HS256_SECRET", "set either it or MINTGATE_JWT_JWKS_URL, not both")
	case len(id.JWTSecret) > 0 && len(id.JWTSecret) < minHS256Secret:
		e.Fail("MINTGATE_JWT_HS256_SECRET", "must be at least %d bytes", minHS256Secret)
	case len(id.JWTSecret) == 0 && id.JWKSURL == "" && len(id.AnonTenants) == 0:
		e.Fail("MINTGATE_JWT_HS256_SECRET", "no caller could ever authenticate: set it, MINTGATE_JWT_JWKS_URL or MINTGATE_ANON_TENANTS")
	}
	if id.JWKSURL != "" {
		// The JWKS decides whose signatures we believe: fetched in clear, it
		// is anyone's on the path. And an identity provider shared with other
		// apps mints tokens that carry tenant_id for them too: only those
		// minted for us (aud) may spend our tenants' quota.
		if u, err := url.Parse(id.JWKSURL); err == nil && u.Scheme != "https" && !IsLoopbackHost(u.Hostname()) {
			e.Fail("MINTGATE_JWT_JWKS_URL", "%q must be https:// (http:// only on a loopback address)", config.RedactURL(id.JWKSURL))
		}
		if id.JWTAudience == "" {
			e.Fail("MINTGATE_JWT_AUDIENCE", "required with MINTGATE_JWT_JWKS_URL: the audience our tokens are minted for")
		}
	}
	if !validClaimName(id.JWTTenantClaim) {
		e.Fail("MINTGATE_JWT_TENANT_CLAIM", "%q is not a claim name", id.JWTTenantClaim)
	}
}

// checkAnonymous refuses anonymous callers whose buckets could not be
// keyed safely by their address.
func checkAnonymous(e *config.Env, id Config) {
	if len(id.AnonTenants) > 0 && len(id.IPHashSecret) < minIPHashSecret {
		e.Fail("MINTGATE_IP_HASH_SECRET", "anonymous tenants need a secret of at least %d bytes to key the IP hash", minIPHashSecret)
	}
	switch {
	case id.IPSource == IPXFF && len(id.TrustedProxies) == 0:
		// Without trusted proxies every X-Forwarded-For entry is untrusted
		// and the socket address would be used: say so instead of guessing.
		e.Fail("MINTGATE_TRUSTED_PROXIES", "required with MINTGATE_IP_SOURCE=xff: the proxy ranges whose X-Forwarded-For entries are trusted")
	case id.IPSource == IPCF && len(id.TrustedProxies) == 0:
		// Believed from any peer, the header lets one client name a fresh
		// address, and so a fresh anonymous bucket, on every request.
		e.Fail("MINTGATE_TRUSTED_PROXIES", "required with MINTGATE_IP_SOURCE=cf-connecting-ip: the edge's ranges, the only peers whose CF-Connecting-IP is believed")
	}
}

// IsLoopbackHost reports whether host (a URL's Hostname, or the host of a
// host:port) is this machine: localhost or a loopback address.
func IsLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

// parsePrefix reads a CIDR, or one address as the prefix of just it.
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

func validClaimName(s string) bool {
	return s != "" && len(s) <= 128 && !strings.ContainsAny(s, " \t\r\n")
}

// Widest private proxy ranges a deployment should trust: a proxy's
// X-Forwarded-For or CF-Connecting-IP is believed from every address in
// MINTGATE_TRUSTED_PROXIES, so a private range wider than a subnet (a
// cluster's pod range, a VPC) lets any workload in it name a fresh client
// address, and get a fresh anonymous bucket, per request.
const (
	widestPrivateProxyBits4 = 24
	widestPrivateProxyBits6 = 64
)

// WideProxyRange reports whether trusting p as a proxy trusts more than
// the proxies themselves: all addresses (/0), or a private, loopback or
// link-local range wider than a /24 (IPv4) or /64 (IPv6). Wide public
// ranges are not refused: those of a CDN (Cloudflare's /13s) hold only the
// CDN's own edges.
func WideProxyRange(p netip.Prefix) bool {
	a := p.Masked().Addr()
	if p.Bits() == 0 {
		return true
	}
	if !(a.IsPrivate() || a.IsLoopback() || a.IsLinkLocalUnicast()) {
		return false
	}
	if a.Is4() {
		return p.Bits() < widestPrivateProxyBits4
	}
	return p.Bits() < widestPrivateProxyBits6
}
