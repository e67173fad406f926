package tiers

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const hookSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// A tenant's webhook beside its tiers; a bad one refuses the whole file as
// a bad tier does, at start and on a reload (the last good file stays),
// and its error never quotes the secret.
func TestLiveWebhooks(t *testing.T) {
	defaults, err := Parse(Default)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "tiers.json")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	good := `{"acme":{"user":"60:1","webhook":{"url":"https://hooks.acme.example/mintgate","secret":"` + hookSecret + `"}},"globex":{"user":"10:1"}}`
	write(good)
	l, err := NewLive(Set{Default: defaults}, path)
	if err != nil {
		t.Fatal(err)
	}
	if ep, ok := l.Webhook("acme"); !ok || ep.URL != "https://hooks.acme.example/mintgate" || ep.Secret.IsZero() {
		t.Errorf("acme's webhook %+v %v", ep, ok)
	}
	if _, ok := l.Webhook("globex"); ok {
		t.Error("globex names no webhook")
	}
	if lim, _ := l.Tiers().For("acme", User); lim.Capacity != 60 {
		t.Errorf("acme's user tier %+v beside its webhook", lim)
	}
	const leaked = "whsec_c2hvcnQtYnV0LWxlYWtlZA=="
	for _, bad := range []string{
		`{"acme":{"webhook":{"url":"ftp://hooks.acme.example","secret":"` + hookSecret + `"}}}`,
		`{"acme":{"webhook":{"url":"https://hooks.acme.example","secret":"` + leaked + `"}}}`,
		`{"acme":{"webhook":{"url":"https://hooks.acme.example"}}}`,
		`{"acme":{"webhook":"https://hooks.acme.example"}}`,
	} {
		if _, err := ParseWebhooks([]byte(bad)); err == nil || strings.Contains(err.Error(), "c2hvcnQt") {
			t.Errorf("ParseWebhooks(%s) = %v, want refused without the secret", bad, err)
		}
		write(bad)
		if _, err := NewLive(Set{Default: defaults}, path); err == nil {
			t.Errorf("NewLive with %s: no error", bad)
		}
		if changed, err := l.reload(); changed || err == nil {
			t.Errorf("reload of %s: changed %v, err %v", bad, changed, err)
		}
		if ep, ok := l.Webhook("acme"); !ok || ep.URL != "https://hooks.acme.example/mintgate" {
			t.Errorf("after a bad file the last good webhook stays: %+v", ep)
		}
	}
}
