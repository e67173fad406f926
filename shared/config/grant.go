package config

import "github.com/mintgate/mintgate/shared/grant"

// GrantSecret reads MINTGATE_GRANT_SECRET, the key of the MAC every ledger
// batch carries: the signer seals with it, the sweeper applies only what it
// verifies. It is required and at least grant.MinSecretLen bytes; the
// value is never printed.
func (e *Env) GrantSecret() []byte {
	const name = "MINTGATE_GRANT_SECRET"
	v := e.getenv(name)
	switch {
	case v == "":
		e.Fail(name, "required: a random secret of at least %d bytes, the same for every signer and sweeper", grant.MinSecretLen)
	case len(v) < grant.MinSecretLen:
		e.Fail(name, "has %d bytes, want at least %d", len(v), grant.MinSecretLen)
	}
	return []byte(v)
}
