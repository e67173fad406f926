// Package schedule writes and reads the Nats-Schedule header of a
// JetStream message scheduled for one time ("@at <RFC 3339>"): the grant
// ledger's batches and the webhooks' retries are scheduled with it.
package schedule

import (
	"strings"
	"time"
)

// At is the Nats-Schedule header value for a delivery at t: "@at" and t
// in UTC as RFC 3339 with every fractional digit. nats-server 2.12+
// parses it with time.RFC3339, which accepts fractional seconds, and
// fires a schedule only once the clock has reached it, so nothing is
// early. (nats.go's WithScheduleAt drops the fraction and so fires up to
// a second too early.)
func At(t time.Time) string {
	return "@at " + t.UTC().Format(time.RFC3339Nano)
}

// Parse reads back a Nats-Schedule value At wrote; false for anything
// else (a cron or interval schedule, a malformed time).
func Parse(v string) (time.Time, bool) {
	rest, ok := strings.CutPrefix(v, "@at ")
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, rest)
	return t, err == nil
}
