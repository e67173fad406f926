package main

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/mintgate/mintgate/shared/auth"
	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/config"
	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/ledger"
	"github.com/mintgate/mintgate/shared/multipart"
	"github.com/mintgate/mintgate/shared/tiers"
	"github.com/mintgate/mintgate/signer/internal/ratelimit"
	"github.com/mintgate/mintgate/signer/internal/readlimit"
	"github.com/mintgate/mintgate/signer/internal/verdict"
)

// IP trust models of MINTGATE_IP_SOURCE (auth.Config).
const (
	ipRemote = auth.IPRemote
	ipCF     = auth.IPCF
	ipXFF    = auth.IPXFF
)

// maxPutBytes is the largest object one S3 PUT can create.
const maxPutBytes = 5 << 30

// cfg is the signer's configuration, read from the variables of docs/configuration.md: the
// sections every service shares (shared/config), and the signer's own.
type cfg struct {
	HTTPAddr string
	// OpsAddr serves /metrics (and /admin/*) besides /healthz and /readyz,
	// never on HTTPAddr (MINTGATE_OPS_ADDR).
	OpsAddr string

	Redis config.Redis
	NATS  config.NATS
	S3    config.S3
	// AWS credentials given in the environment; empty means the SDK's chain.
	AWS config.AWS
	// Limits holds Tiers (MINTGATE_TIERS with MINTGATE_TENANT_TIERS'
	// overrides) and TiersFile (MINTGATE_TENANT_TIERS_FILE, re-read while
	// the signer runs).
	tiers.Limits
	// Config (shared/auth) is who may sign: tokens, anonymous tenants,
	// client IPs.
	auth.Config

	URLTTL       time.Duration
	SweepGrace   time.Duration
	MaxObject    int64
	ContentTypes map[string]bool
	// MaxLiveGrants bounds the grants one caller holds at once that are
	// neither completed, refunded, aborted nor expired
	// (MINTGATE_MAX_LIVE_GRANTS; 0: off).
	MaxLiveGrants int
	// Multipart is how multipart grants are cut and how long they live
	// (MINTGATE_MAX_MULTIPART_BYTES, MINTGATE_MULTIPART_PART_BYTES,
	// MINTGATE_MULTIPART_TTL).
	Multipart multipartLimits

	// Degraded decides without Redis, while it is unavailable, from
	// in-process buckets holding DegradedShare of every limit
	// (MINTGATE_DEGRADED_MODE=local, MINTGATE_DEGRADED_SHARE).
	Degraded      bool
	DegradedShare float64
	// GrantSecret keys the MAC of every ledger batch (MINTGATE_GRANT_SECRET).
	GrantSecret     []byte
	RateLimitHeader string
	// Shadow lists the tenants in shadow mode (MINTGATE_SHADOW_TENANTS, or
	// all with ShadowAll): a short bucket is counted, not refused.
	Shadow    map[string]bool
	ShadowAll bool
	// ShadowCap is how many times its tier a caller of a shadowed tenant
	// may take within the tier's window before it is refused after all
	// (MINTGATE_SHADOW_CAP): shadow mode measures a limit, it does not
	// switch every limit off.
	ShadowCap float64
	// AdminToken turns the admin API on the ops port on, bearer auth
	// (MINTGATE_ADMIN_TOKEN; empty: off).
	AdminToken []byte
	// Postgres is MINTGATE_POSTGRES_URL: the upload records' routes read
	// it, and the signer publishes its tallies and aborts for the feed;
	// "" is records off.
	Postgres string
	// DemoPage serves the demo upload page at /demo/ (MINTGATE_DEMO_PAGE=on;
	// off by default, on in the local stack).
	DemoPage bool
	// DemoTracesURL is the Jaeger query API the demo page reads each
	// upload's trace from (MINTGATE_DEMO_TRACES_URL; "" is no timeline).
	DemoTracesURL string
	// ReadLimit bounds each client address's reads that cost Redis
	// (MINTGATE_READ_LIMIT; ReadLimitOn false: off).
	ReadLimit   bucket.Limit
	ReadLimitOn bool
	// WaitersPerAddress and Waiters bound the status long polls in
	// progress from one address and on this instance
	// (MINTGATE_STATUS_WAITERS_PER_ADDRESS, MINTGATE_STATUS_WAITERS).
	WaitersPerAddress, Waiters int
	// RequireChecksum refuses signs and multipart creates without a
	// checksum (MINTGATE_REQUIRE_CHECKSUM; a tenant's requireChecksum in
	// MINTGATE_TENANT_TIERS_FILE decides for it).
	RequireChecksum bool
	// PprofAddr serves net/http/pprof (MINTGATE_PPROF_ADDR; empty = off by
	// default, loopback addresses only).
	PprofAddr string
	// DownloadTTL is the life of a download grant's URL
	// (MINTGATE_DOWNLOAD_TTL, default 300 s, at most 7 days).
	DownloadTTL time.Duration
}

// defaultDownloadTTL is MINTGATE_DOWNLOAD_TTL's default: long enough to
// start a download, short enough that a leaked URL is soon worthless.
const defaultDownloadTTL = 300 * time.Second

// defaultHTTPAddr is where the signer listens without MINTGATE_HTTP_ADDR.
const defaultHTTPAddr = ":8080"

// defaultOpsAddr is where it serves /metrics without MINTGATE_OPS_ADDR.
const defaultOpsAddr = ":9080"

// loadConfig reads every variable and reports all bad values at once, each
// naming its variable and none printing a secret.
func loadConfig(getenv func(string) string) (cfg, error) {
	e := config.New(getenv)
	c := cfg{
		HTTPAddr:    e.HTTPAddr(defaultHTTPAddr),
		OpsAddr:     e.Addr("MINTGATE_OPS_ADDR", defaultOpsAddr),
		Redis:       e.Redis(),
		NATS:        e.NATS(),
		S3:          e.S3(),
		AWS:         e.AWS(),
		Limits:      tiers.ReadLimits(e),
		Config:      auth.Read(e),
		URLTTL:      e.URLTTL(),
		SweepGrace:  e.SweepGrace(),
		GrantSecret: ledger.ReadSecret(e),
	}
	if c.OpsAddr == c.HTTPAddr {
		e.Fail("MINTGATE_OPS_ADDR", "%q is MINTGATE_HTTP_ADDR too: /metrics must not be on the public port", c.OpsAddr)
	}
	c.DownloadTTL = e.Lifetime("MINTGATE_DOWNLOAD_TTL", defaultDownloadTTL, config.MaxURLTTL, " (the SigV4 presign limit)")
	c.MaxObject, c.ContentTypes = uploadLimits(e)
	c.Multipart = readMultipartLimits(e)
	if n := e.Int("MINTGATE_MAX_LIVE_GRANTS", 0); n < 0 || n > maxLiveGrants {
		e.Fail("MINTGATE_MAX_LIVE_GRANTS", "%d must be between 0 (off) and %d", n, maxLiveGrants)
	} else {
		c.MaxLiveGrants = int(n)
	}
	operatorSettings(e, &c)
	return c, e.Err()
}

// maxLiveGrants is the highest MINTGATE_MAX_LIVE_GRANTS: every sign of a
// caller at the bound reads its live set, so it stays small.
const maxLiveGrants = 1000

// multipartLimits bound a multipart grant.
type multipartLimits struct {
	MaxObject int64         // the largest object
	PartSize  int64         // every part's size but the last
	TTL       time.Duration // the grant's life
}

// Defaults of multipartLimits.
const (
	defaultMaxMultipart = 5 << 30
	defaultPartSize     = 16 << 20
)

// readMultipartLimits reads MINTGATE_MAX_MULTIPART_BYTES,
// MINTGATE_MULTIPART_PART_BYTES and MINTGATE_MULTIPART_TTL: parts S3
// accepts, and no more than its 10,000 of them for the largest object.
func readMultipartLimits(e *config.Env) multipartLimits {
	l := multipartLimits{
		MaxObject: e.Int("MINTGATE_MAX_MULTIPART_BYTES", defaultMaxMultipart),
		PartSize:  e.Int("MINTGATE_MULTIPART_PART_BYTES", defaultPartSize),
		TTL:       e.MultipartTTL(),
	}
	switch {
	case l.MaxObject < 1 || l.MaxObject > multipart.MaxObjectSize:
		e.Fail("MINTGATE_MAX_MULTIPART_BYTES", "%d must be between 1 and %d, S3's largest object", l.MaxObject, int64(multipart.MaxObjectSize))
	case l.PartSize < multipart.MinPartSize || l.PartSize > multipart.MaxPartSize:
		e.Fail("MINTGATE_MULTIPART_PART_BYTES", "%d must be between %d (5 MiB) and %d (5 GiB), S3's part sizes", l.PartSize, multipart.MinPartSize, int64(multipart.MaxPartSize))
	default:
		if n := (multipart.Layout{Size: l.MaxObject, PartSize: l.PartSize}).Count(); n > multipart.MaxParts {
			e.Fail("MINTGATE_MULTIPART_PART_BYTES", "%d cuts MINTGATE_MAX_MULTIPART_BYTES (%d) into %d parts; S3 allows %d: raise the part size to at least %d",
				l.PartSize, l.MaxObject, n, multipart.MaxParts, (l.MaxObject+multipart.MaxParts-1)/multipart.MaxParts)
		}
	}
	return l
}

// uploadLimits reads what a sign may ask for: the largest object and the
// content types.
func uploadLimits(e *config.Env) (maxObject int64, types map[string]bool) {
	maxObject = e.Int("MINTGATE_MAX_OBJECT_BYTES", 104857600)
	if maxObject > maxPutBytes {
		e.Fail("MINTGATE_MAX_OBJECT_BYTES", "%d is above %d, the largest single S3 PUT", maxObject, int64(maxPutBytes))
	}
	types = map[string]bool{}
	for _, ct := range e.List("MINTGATE_CONTENT_TYPES", []string{"image/jpeg", "image/png", "image/webp", "application/pdf"}) {
		if !validContentType(ct) {
			e.Fail("MINTGATE_CONTENT_TYPES", "%q is not a type/subtype media type", ct)
		}
		types[ct] = true
	}
	return maxObject, types
}

// operatorSettings reads the switches of the signer's operators: degraded
// and shadow modes, the admin API, the response headers, the demo page and
// pprof.
func operatorSettings(e *config.Env, c *cfg) {
	c.Degraded = e.OneOf("MINTGATE_DEGRADED_MODE", "off", "off", "local") == "local"
	c.DegradedShare = share(e, "MINTGATE_DEGRADED_SHARE", defaultDegradedShare)
	c.RateLimitHeader = e.OneOf("MINTGATE_RATELIMIT_HEADERS", ratelimit.FormLegacy, ratelimit.FormLegacy, ratelimit.FormDraft)
	c.DemoPage = e.OneOf("MINTGATE_DEMO_PAGE", "off", "off", "on") == "on"
	c.DemoTracesURL = e.URL("MINTGATE_DEMO_TRACES_URL", "", "http", "https")
	c.RequireChecksum = e.Bool("MINTGATE_REQUIRE_CHECKSUM", false)
	c.ReadLimit, c.ReadLimitOn = tiers.ReadShape(e, "MINTGATE_READ_LIMIT", readlimit.DefaultLimit)
	c.PprofAddr = e.String("MINTGATE_PPROF_ADDR", "")
	if c.PprofAddr != "" && !loopbackAddr(c.PprofAddr) {
		e.Fail("MINTGATE_PPROF_ADDR", "%q must be a loopback host:port such as 127.0.0.1:6060: profiles are for an operator on the box (or kubectl port-forward), never the network", c.PprofAddr)
	}
	c.WaitersPerAddress = waiters(e, "MINTGATE_STATUS_WAITERS_PER_ADDRESS", verdict.DefaultPerAddress)
	c.Waiters = waiters(e, "MINTGATE_STATUS_WAITERS", verdict.DefaultTotal)
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
	c.ShadowCap = defaultShadowCap
	if v := e.String("MINTGATE_SHADOW_CAP", ""); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !(f >= 1) || math.IsInf(f, 0) {
			e.Fail("MINTGATE_SHADOW_CAP", "%q is not a factor of at least 1, such as 2: below 1 a shadowed caller within its limit would be refused", v)
		} else {
			c.ShadowCap = f
		}
	}
	c.Postgres = e.PostgresURL()
	c.AdminToken = e.Secret("MINTGATE_ADMIN_TOKEN")
	if n := len(c.AdminToken); n > 0 && n < minAdminToken {
		e.Fail("MINTGATE_ADMIN_TOKEN", "must be at least %d bytes: it refills buckets", minAdminToken)
	}
}

// minAdminToken is the shortest MINTGATE_ADMIN_TOKEN.
const minAdminToken = 32

// defaultShadowCap is MINTGATE_SHADOW_CAP's default: a shadowed caller may
// take twice its tier.
const defaultShadowCap = 2

// shadowLimit is a caller's ceiling in shadow mode: cap times its tier's
// capacity and refill, so the same window.
func shadowLimit(l bucket.Limit, cap float64) bucket.Limit {
	return bucket.Limit{Capacity: l.Capacity * cap, Rate: l.Rate * cap}
}

// shadowed reports whether tenant is in shadow mode.
func (c cfg) shadowed(tenant string) bool { return c.ShadowAll || c.Shadow[tenant] }

// shadowCap is the ceiling factor of tenant's callers, 0 when it is not in
// shadow mode.
func (c cfg) shadowCap(tenant string) float64 {
	if c.shadowed(tenant) {
		return c.ShadowCap
	}
	return 0
}

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

// maxWaiters bounds MINTGATE_STATUS_WAITERS(_PER_ADDRESS): each wait is a
// parked handler, a few KiB.
const maxWaiters = 1_000_000

// waiters reads a bound of status waits: from 1 to maxWaiters.
func waiters(e *config.Env, name string, def int) int {
	n := e.Int(name, int64(def))
	if n < 1 || n > maxWaiters {
		e.Fail(name, "%d must be between 1 and %d", n, maxWaiters)
		return def
	}
	return int(n)
}
