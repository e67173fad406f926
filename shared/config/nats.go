package config

import (
	"net/url"
	"slices"
	"strings"
)

// NATS is how a service reaches NATS: the servers, who it is, and whom it
// trusts for TLS.
type NATS struct {
	// URL is one server URL or a comma-separated list (nats://, tls://,
	// ws://, wss://). user:password@ in it is honoured by nats.go.
	URL string
	// Creds is a credentials file: a user JWT with its nkey seed (a .creds
	// file, for servers in operator mode), or a bare user nkey seed (for an
	// nkey user in the server's authorization block, as deploy/nats ships).
	Creds string
	// CA is a PEM file of the CAs that sign the server's certificate; only
	// they are trusted. Empty: the system's roots.
	CA string
}

// natsSchemes are the URL schemes nats.go dials.
var natsSchemes = []string{"nats", "tls", "ws", "wss"}

// NATS reads MINTGATE_NATS_URL, MINTGATE_NATS_CREDS and MINTGATE_NATS_CA.
// The files are read when the service connects (dial.NATSOptions), so a
// missing one stops the service at start, naming its variable.
func (e *Env) NATS() NATS {
	n := NATS{
		URL:   e.String("MINTGATE_NATS_URL", "nats://127.0.0.1:4222"),
		Creds: e.String("MINTGATE_NATS_CREDS", ""),
		CA:    e.String("MINTGATE_NATS_CA", ""),
	}
	for item := range strings.SplitSeq(n.URL, ",") {
		// The value may hold a password: the message shows at most the
		// scheme and host.
		u, err := url.Parse(strings.TrimSpace(item))
		switch {
		case err != nil || u.Host == "":
			e.Fail("MINTGATE_NATS_URL", "an item is not a URL with a host (want nats://host:port, tls://host:port, or a comma-separated list)")
		case !slices.Contains(natsSchemes, u.Scheme):
			e.Fail("MINTGATE_NATS_URL", "%s://%s is not a %s URL", u.Scheme, u.Host, strings.Join(natsSchemes, ", "))
		}
	}
	return n
}
