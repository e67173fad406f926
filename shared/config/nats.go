package config

import (
	"bytes"
	"crypto/x509"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
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
// The files are read when the service connects (Options), so a missing one
// stops the service at start, naming its variable.
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

// Options are the nats.go options for n: the credentials, the CA, and an
// inbox prefix of the service's own (_INBOX.<service>), so that a server
// can let each service subscribe to its own replies and no one else's.
// Errors name the variable and never hold a file's contents.
func (n NATS) Options(service string) ([]nats.Option, error) {
	opts := []nats.Option{
		nats.Name("mintgate-" + service),
		nats.CustomInboxPrefix(nats.InboxPrefix + service),
		// nats.go stops reconnecting after the same authorization error
		// twice. A server restarted mid-way through a credentials rotation
		// would then leave the service unready until someone restarts it;
		// keep trying instead (every reconnect wait, as for any outage).
		nats.IgnoreAuthErrorAbort(),
	}
	if n.Creds != "" {
		opt, err := credsOption(n.Creds)
		if err != nil {
			return nil, fmt.Errorf("MINTGATE_NATS_CREDS: %w", err)
		}
		opts = append(opts, opt)
	}
	if n.CA != "" {
		// Checked now, so a bad file is reported by its variable; nats.go
		// rereads it at each connect, which lets a renewed CA bundle in
		// without a restart.
		if _, err := readCA(n.CA); err != nil {
			return nil, fmt.Errorf("MINTGATE_NATS_CA: %w", err)
		}
		opts = append(opts, nats.RootCAs(n.CA))
	}
	return opts, nil
}

// credsOption authenticates with a .creds file (user JWT and seed: the
// server checks the JWT against its operator) or with a bare user nkey
// seed (the server looks the public key up in its authorization block).
// nats.go rereads the file at each (re)connect, so a rotated file is used
// from the next reconnect on.
func credsOption(path string) (nats.Option, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	defer clear(b)
	if bytes.Contains(b, []byte("-----BEGIN NATS USER JWT-----")) {
		return nats.UserCredentials(path), nil
	}
	kp, err := nkeys.ParseDecoratedNKey(b)
	if err != nil {
		return nil, fmt.Errorf("%s holds neither a user JWT nor an nkey seed", path)
	}
	defer kp.Wipe()
	if pub, err := kp.PublicKey(); err != nil || !nkeys.IsValidPublicUserKey(pub) {
		return nil, fmt.Errorf("%s: the nkey seed is not a user key (its public key must start with U)", path)
	}
	opt, err := nats.NkeyOptionFromSeed(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return opt, nil
}

// readCA is the pool of the PEM certificates in the file at path.
func readCA(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}
