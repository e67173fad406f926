package schedule

import (
	"strings"
	"testing"
	"time"
)

func TestAtKeepsFractionInUTC(t *testing.T) {
	at := time.Date(2026, 3, 1, 10, 0, 5, 123456789, time.FixedZone("CET", 3600))
	if got, want := At(at), "@at 2026-03-01T09:00:05.123456789Z"; got != want {
		t.Errorf("At = %q, want %q", got, want)
	}
	// The server parses the value with time.RFC3339; that layout must read
	// the fraction back, or a grant would be due early.
	back, err := time.Parse(time.RFC3339, strings.TrimPrefix(At(at), "@at "))
	if err != nil || !back.Equal(at) {
		t.Errorf("server-side parse = %v, %v; want %v", back, err, at)
	}
}

func TestParse(t *testing.T) {
	at := time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.FixedZone("x", 3600))
	got, ok := Parse(At(at))
	if !ok || !got.Equal(at) {
		t.Errorf("Parse(At(%v)) = %v, %v", at, got, ok)
	}
	for _, bad := range []string{"", "@every 1s", "@at yesterday", "0 * * * * *"} {
		if _, ok := Parse(bad); ok {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}
