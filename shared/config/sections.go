package config

import (
	"net"
	"time"
)

// The defaults docs/configuration.md gives the settings several services read; each is
// written here only, so the services cannot drift apart.
const (
	// DefaultURLTTL is how long a presigned URL lives (MINTGATE_URL_TTL).
	DefaultURLTTL = 120 * time.Second
	// DefaultSweepGrace is how long after its URL's expiry a grant falls
	// due (MINTGATE_SWEEP_GRACE).
	DefaultSweepGrace = 30 * time.Second
	// MaxURLTTL is the longest expiry SigV4 presigning allows.
	MaxURLTTL = 7 * 24 * time.Hour
	// DefaultMultipartTTL is how long a multipart grant lives
	// (MINTGATE_MULTIPART_TTL).
	DefaultMultipartTTL = time.Hour
	// MaxMultipartTTL is the longest: far inside the day every marker of
	// a grant's end lives (quota.MarkerTTL), and inside the bucket's
	// AbortIncompleteMultipartUpload rule of one day.
	MaxMultipartTTL = 12 * time.Hour
)

// HTTPAddr reads MINTGATE_HTTP_ADDR, where a service listens (its API, or
// its /healthz, /readyz and /metrics): a host:port, def when unset. Each
// service has its own default.
func (e *Env) HTTPAddr(def string) string {
	return e.Addr("MINTGATE_HTTP_ADDR", def)
}

// Addr reads a listen address, host:port with a port (the host may be
// empty: every interface). It is empty only when unset and def is empty.
func (e *Env) Addr(name, def string) string {
	v := e.String(name, def)
	if v == "" {
		return v
	}
	if _, port, err := net.SplitHostPort(v); err != nil || port == "" {
		e.Fail(name, "%q is not host:port (such as :8080)", v)
		return def
	}
	return v
}

// URLTTL reads MINTGATE_URL_TTL, the lifetime of a presigned URL: between
// one second and MaxURLTTL.
func (e *Env) URLTTL() time.Duration {
	return e.lifetime("MINTGATE_URL_TTL", DefaultURLTTL, MaxURLTTL, " (the SigV4 presign limit)")
}

// MultipartTTL reads MINTGATE_MULTIPART_TTL, the life of a multipart
// grant: between one second and MaxMultipartTTL.
func (e *Env) MultipartTTL() time.Duration {
	return e.lifetime("MINTGATE_MULTIPART_TTL", DefaultMultipartTTL, MaxMultipartTTL, "")
}

// Lifetime reads name as a duration of at least a second and at most
// most (why says where that bound comes from), def when unset.
func (e *Env) Lifetime(name string, def, most time.Duration, why string) time.Duration {
	return e.lifetime(name, def, most, why)
}

// lifetime reads a duration of at least a second and at most most (why
// says where that bound comes from).
func (e *Env) lifetime(name string, def, most time.Duration, why string) time.Duration {
	d := e.Duration(name, def)
	if d < time.Second || d > most {
		e.Fail(name, "%v must be between 1s and %v%s", d, most, why)
	}
	return d
}

// SweepGrace reads MINTGATE_SWEEP_GRACE: how long after its URL's expiry a
// grant falls due, leaving late upload notifications time to land.
func (e *Env) SweepGrace() time.Duration {
	return e.Duration("MINTGATE_SWEEP_GRACE", DefaultSweepGrace)
}

// S3 is where the signer's URLs point: the bucket, and how to reach it.
type S3 struct {
	Bucket    string // MINTGATE_S3_BUCKET, required
	Region    string // MINTGATE_S3_REGION; empty: AWS_REGION, else the SDK's
	Endpoint  string // MINTGATE_S3_ENDPOINT; empty: AWS
	PathStyle bool   // MINTGATE_S3_PATH_STYLE
	// Internal is where the services send their own S3 calls (multipart
	// create, complete, abort …) when they reach S3 by another address
	// than the browsers the URLs are for, such as a compose network
	// (MINTGATE_S3_INTERNAL_ENDPOINT); empty: Endpoint.
	Internal string
}

// CallEndpoint is where the services' own S3 calls go.
func (s S3) CallEndpoint() string {
	if s.Internal != "" {
		return s.Internal
	}
	return s.Endpoint
}

// S3 reads MINTGATE_S3_BUCKET, MINTGATE_S3_REGION, MINTGATE_S3_ENDPOINT,
// MINTGATE_S3_PATH_STYLE and MINTGATE_S3_INTERNAL_ENDPOINT.
func (e *Env) S3() S3 {
	return S3{
		Bucket:    e.S3Bucket(),
		Region:    e.String("MINTGATE_S3_REGION", ""),
		Endpoint:  e.URL("MINTGATE_S3_ENDPOINT", "", "http", "https"),
		PathStyle: e.Bool("MINTGATE_S3_PATH_STYLE", false),
		Internal:  e.URL("MINTGATE_S3_INTERNAL_ENDPOINT", "", "http", "https"),
	}
}

// S3Bucket reads MINTGATE_S3_BUCKET, required: the bucket the signer signs
// for and the only one whose records the completer marks done.
func (e *Env) S3Bucket() string { return e.Required("MINTGATE_S3_BUCKET") }

// PostgresURL reads MINTGATE_POSTGRES_URL, the upload records' database
// (postgres:// or postgresql://): empty when unset, and records are off.
// The operator step's names the schema's owner; the services' their role
// (deploy/postgres/grants.sql).
func (e *Env) PostgresURL() string {
	return e.URL("MINTGATE_POSTGRES_URL", "", "postgres", "postgresql")
}
