// Package config reads mintgate's configuration from the environment by the
// names of docs/configuration.md. Every bad value is collected and reported with the name
// of its variable, so a service refuses to start with one clear message.
//
// It only parses values, and imports no other package of mintgate nor any
// client: the tiers are read by shared/tiers, the signer's caller trust by
// shared/auth, the grant secret by shared/ledger, and the clients are built
// from these sections by shared/dial.
package config

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Env reads variables through getenv and collects what is wrong with them.
// Its errors never print a secret it has read (Secret, the credentials of a
// URL): they are redacted, whichever message quotes them.
type Env struct {
	getenv  func(string) string
	errs    []error
	secrets []string
}

// New returns an Env reading through getenv (os.Getenv in production, a map
// in tests).
func New(getenv func(string) string) *Env { return &Env{getenv: getenv} }

// Fail records a problem with the variable name.
func (e *Env) Fail(name, format string, args ...any) {
	e.errs = append(e.errs, fmt.Errorf("%s: %s", name, fmt.Sprintf(format, args...)))
}

// Err joins every problem found so far, or is nil.
func (e *Env) Err() error {
	if len(e.errs) == 0 {
		return nil
	}
	errs := make([]error, len(e.errs))
	for i, err := range e.errs {
		errs[i] = errors.New(e.scrub(err.Error()))
	}
	return fmt.Errorf("configuration: %w", errors.Join(errs...))
}

// String is the variable's value, or def when it is unset or empty.
func (e *Env) String(name, def string) string {
	if v := strings.TrimSpace(e.getenv(name)); v != "" {
		return v
	}
	return def
}

// Required is the variable's value; an empty one is a problem.
func (e *Env) Required(name string) string {
	v := e.String(name, "")
	if v == "" {
		e.Fail(name, "required")
	}
	return v
}

// Duration parses a Go duration ("150ms", "2m"); it must be above zero.
func (e *Env) Duration(name string, def time.Duration) time.Duration {
	v := e.String(name, "")
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		e.Fail(name, "%q is not a positive duration such as 150ms or 2m", v)
		return def
	}
	return d
}

// Int parses a positive integer.
func (e *Env) Int(name string, def int64) int64 {
	v := e.String(name, "")
	if v == "" {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		e.Fail(name, "%q is not a positive integer", v)
		return def
	}
	return n
}

// Bool parses true/false (and 1/0).
func (e *Env) Bool(name string, def bool) bool {
	v := e.String(name, "")
	if v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		e.Fail(name, "%q is not true or false", v)
		return def
	}
	return b
}

// List splits a comma-separated value, dropping empty items.
func (e *Env) List(name string, def []string) []string {
	v := e.String(name, "")
	if v == "" {
		return def
	}
	var out []string
	for item := range strings.SplitSeq(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// OneOf is the value, which must be one of allowed.
func (e *Env) OneOf(name, def string, allowed ...string) string {
	v := e.String(name, def)
	for _, a := range allowed {
		if v == a {
			return v
		}
	}
	e.Fail(name, "%q is not one of %s", v, strings.Join(allowed, ", "))
	return def
}

// URL parses an absolute URL with one of the given schemes. A bad value
// is reported without its credentials.
func (e *Env) URL(name, def string, schemes ...string) string {
	v := e.String(name, def)
	if v == "" {
		return v
	}
	e.hideURL(v)
	u, err := url.Parse(v)
	if err == nil && u.Host != "" {
		for _, s := range schemes {
			if u.Scheme == s {
				return v
			}
		}
	}
	e.Fail(name, "%q is not a %s URL", RedactURL(v), strings.Join(schemes, " or "))
	return def
}
