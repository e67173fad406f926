package config

import (
	"net/url"
	"strconv"
	"strings"
)

// redacted stands in for what configuration errors never print.
const redacted = "redacted"

// minHidden is the shortest secret Err scrubs from its messages: a
// shorter one would garble them (and every secret mintgate takes is
// longer; URL credentials are also redacted where the URL is printed).
const minHidden = 6

// RedactURL is s with the credentials of every URL in it replaced: the
// userinfo before each "@", back to the "//" that starts its authority (or
// to the start of s when there is none, as in "rediss//" typos or bare
// "user:pass@host"). It works on malformed values too, for the errors
// that report them, and on comma-separated lists such as
// MINTGATE_NATS_URL. It may hide more than the userinfo (an "@" in a
// path), never less.
func RedactURL(s string) string {
	type span struct{ from, to int }
	var hide []span
	for i := 0; i < len(s); i++ {
		if s[i] != '@' {
			continue
		}
		from := strings.LastIndex(s[:i], "//") + 2
		if from < 2 {
			from = 0
		}
		if n := len(hide); n > 0 && from <= hide[n-1].to {
			hide[n-1].to = i // "u:p@ss@word@host": one span
			continue
		}
		hide = append(hide, span{from, i})
	}
	if len(hide) == 0 {
		return s
	}
	var b strings.Builder
	last := 0
	for _, h := range hide {
		b.WriteString(s[last:h.from])
		b.WriteString(redacted)
		last = h.to
	}
	b.WriteString(s[last:])
	return b.String()
}

// hideURL registers the credentials of the URLs in s, raw and decoded,
// so that Err never prints them, whichever message quotes them.
func (e *Env) hideURL(s string) {
	for item := range strings.SplitSeq(s, ",") {
		at := strings.LastIndex(item, "@")
		if at < 0 {
			continue
		}
		info := item[:at]
		if i := strings.LastIndex(info, "//"); i >= 0 {
			info = info[i+2:]
		}
		e.hide(info)
		// The password; or, without one, the user, which go-redis and NATS
		// take as the password or token.
		secret := info
		if _, pass, ok := strings.Cut(info, ":"); ok {
			secret = pass
		}
		e.hide(secret)
		if dec, err := url.PathUnescape(secret); err == nil {
			e.hide(dec)
		}
	}
}

// hide registers a value Err must never print.
func (e *Env) hide(secret string) {
	if len(secret) >= minHidden {
		e.secrets = append(e.secrets, secret)
	}
}

// Secret is the value of a variable that holds a secret (a JWT key, the
// IP-hash key, the grant MAC key, an admin token): read like String, and
// registered so that no configuration error prints it.
func (e *Env) Secret(name string) []byte {
	v := e.String(name, "")
	e.hide(v)
	return []byte(v)
}

// ExactSecret is Secret's value as given, not trimmed, for a key that
// several services must hold byte for byte (the grant MAC key).
func (e *Env) ExactSecret(name string) []byte {
	v := e.getenv(name)
	e.hide(v)
	return []byte(v)
}

// scrub replaces every registered secret in msg.
func (e *Env) scrub(msg string) string {
	for _, s := range e.secrets {
		msg = strings.ReplaceAll(msg, s, redacted)
		if q := strings.Trim(strconv.Quote(s), `"`); q != s {
			msg = strings.ReplaceAll(msg, q, redacted) // as %q prints it
		}
	}
	return msg
}
