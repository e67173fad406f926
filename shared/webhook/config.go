package webhook

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/mintgate/mintgate/shared/config"
)

// DefaultRetries is MINTGATE_WEBHOOK_RETRIES' default: the waits before
// the second to the seventh try, about 18 hours in all.
const DefaultRetries = "5s,5m,30m,2h,5h,10h"

// DefaultTimeout is MINTGATE_WEBHOOK_TIMEOUT's default: how long one try
// waits for the receiver's answer.
const DefaultTimeout = 10 * time.Second

// Endpoint is where one tenant's events go and the key they are signed
// with.
type Endpoint struct {
	URL    string
	Secret Secret
}

// Config is the webhook variables of docs/configuration.md.
type Config struct {
	// Default is MINTGATE_WEBHOOK_URL and MINTGATE_WEBHOOK_SECRET; its URL
	// is empty when unset (then only tenants with their own endpoint get
	// webhooks).
	Default Endpoint
	// Retries is MINTGATE_WEBHOOK_RETRIES: the wait before each try after
	// the first; a delivery has len(Retries)+1 tries.
	Retries []time.Duration
	// Timeout is MINTGATE_WEBHOOK_TIMEOUT.
	Timeout time.Duration
	// AllowPrivate is MINTGATE_WEBHOOK_ALLOW_PRIVATE: http and private
	// addresses allowed (the local stack, tests).
	AllowPrivate bool
}

// Read reads the webhook variables; every bad value is a problem of e,
// named by its variable. The secret is never quoted.
func Read(e *config.Env) Config {
	c := Config{
		Timeout:      e.Duration("MINTGATE_WEBHOOK_TIMEOUT", DefaultTimeout),
		AllowPrivate: e.Bool("MINTGATE_WEBHOOK_ALLOW_PRIVATE", false),
	}
	retries, err := ParseRetries(e.String("MINTGATE_WEBHOOK_RETRIES", DefaultRetries))
	if err != nil {
		e.Fail("MINTGATE_WEBHOOK_RETRIES", "%v", err)
		retries, _ = ParseRetries(DefaultRetries)
	}
	c.Retries = retries
	c.Default.URL = e.String("MINTGATE_WEBHOOK_URL", "")
	if c.Default.URL != "" {
		if err := CheckURL(c.Default.URL, c.AllowPrivate); err != nil {
			e.Fail("MINTGATE_WEBHOOK_URL", "%v", err)
		}
	}
	secret := string(e.Secret("MINTGATE_WEBHOOK_SECRET"))
	switch {
	case secret != "":
		if c.Default.Secret, err = ParseSecret(secret); err != nil {
			e.Fail("MINTGATE_WEBHOOK_SECRET", "%v", err)
		}
	case c.Default.URL != "":
		e.Fail("MINTGATE_WEBHOOK_SECRET", "required with MINTGATE_WEBHOOK_URL")
	}
	return c
}

// ParseRetries reads a comma-separated list of positive durations.
func ParseRetries(s string) ([]time.Duration, error) {
	var out []time.Duration
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		d, err := time.ParseDuration(item)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("%q is not a list of positive durations such as %s", s, DefaultRetries)
		}
		out = append(out, d)
	}
	return out, nil
}

// CheckURL is the check of an endpoint's URL when it is configured: an
// absolute https URL (http too with allowPrivate). Where it resolves is
// checked at each connection (Guard), not here.
func CheckURL(raw string, allowPrivate bool) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Hostname() == "" {
		return fmt.Errorf("%q is not an absolute URL", RedactURL(raw))
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && allowPrivate:
	case u.Scheme == "http":
		return fmt.Errorf("%q: http is allowed only with MINTGATE_WEBHOOK_ALLOW_PRIVATE=true; use https", RedactURL(raw))
	default:
		return fmt.Errorf("%q is not an https URL", RedactURL(raw))
	}
	return nil
}

// String is the configuration for the start-up log: no secret.
func (c Config) String() string {
	u := "none"
	if c.Default.URL != "" {
		u = RedactURL(c.Default.URL)
	}
	return fmt.Sprintf("url=%s retries=%v timeout=%s allow_private=%t", u, c.Retries, c.Timeout, c.AllowPrivate)
}

// RedactURL is an endpoint's URL as it may be logged, stored with a
// failed delivery and listed by the admin routes: without its user and
// password (config.RedactURL), its query and its fragment, where many
// receivers carry a secret of their own (?code=…, ?token=…). The query
// and the fragment are cut from the text before it is parsed, so a URL
// that does not parse (a bad escape, "in%zz?token=…") loses them too.
func RedactURL(raw string) string {
	head, tail := raw, ""
	if i := strings.IndexAny(raw, "?#"); i >= 0 {
		head = raw[:i]
		if q := strings.IndexByte(raw, '?'); q >= 0 && q == i {
			tail = "?redacted"
		}
		if strings.Contains(raw[i:], "#") {
			tail += "#redacted"
		}
	}
	if u, err := url.Parse(head); err == nil {
		head = u.String()
	}
	return config.RedactURL(head + tail)
}
