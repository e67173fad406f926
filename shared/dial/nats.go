package dial

import (
	"bytes"
	"fmt"
	"os"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/mintgate/mintgate/shared/config"
)

// NATSOptions are the nats.go options for n: the credentials, the CA, and an
// inbox prefix of the service's own (_INBOX.<service>), so that a server
// can let each service subscribe to its own replies and no one else's.
// Errors name the variable and never hold a file's contents.
func NATSOptions(n config.NATS, service string) ([]nats.Option, error) {
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
