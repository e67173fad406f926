package config

import "github.com/mintgate/mintgate/shared/grant"

// GrantSecret reads MINTGATE_GRANT_SECRET, the key of the MAC every ledger
// batch carries: the signer seals with it, the sweeper applies only what it
// verifies. It is required and at least grant.MinSecretLen bytes; the
// value is never printed.
func (e *Env) GrantSecret() []byte {
	const name = "MINTGATE_GRANT_SECRET"
	v := e.getenv(name) // as given, not trimmed: every signer and sweeper must MAC with the same bytes
	e.hide(v)
	switch {
	case v == "":
		e.Fail(name, "required: a random secret of at least %d bytes, the same for every signer and sweeper", grant.MinSecretLen)
	case len(v) < grant.MinSecretLen:
		e.Fail(name, "has %d bytes, want at least %d", len(v), grant.MinSecretLen)
	}
	return []byte(v)
}

// PreviousGrantSecret reads MINTGATE_GRANT_SECRET_PREVIOUS, the key a
// rotation of MINTGATE_GRANT_SECRET replaces: sweepers also accept batches
// sealed with it until those have fallen due. Optional; when set, at least
// grant.MinSecretLen bytes and not the current secret.
func (e *Env) PreviousGrantSecret(current []byte) []byte {
	const name = "MINTGATE_GRANT_SECRET_PREVIOUS"
	v := e.getenv(name) // as given, not trimmed: every signer and sweeper must MAC with the same bytes
	e.hide(v)
	switch {
	case v == "":
		return nil
	case len(v) < grant.MinSecretLen:
		e.Fail(name, "has %d bytes, want at least %d", len(v), grant.MinSecretLen)
	case v == string(current):
		e.Fail(name, "is MINTGATE_GRANT_SECRET itself: set it to the key being replaced, or leave it empty")
	}
	return []byte(v)
}
