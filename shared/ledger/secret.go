package ledger

import (
	"fmt"

	"github.com/mintgate/mintgate/shared/config"
)

// MinSecretLen is the shortest MAC secret the ledger accepts, in bytes.
const MinSecretLen = 32

// CheckSecret is nil when secret may key the MAC of ledger batches: at
// least MinSecretLen bytes. It is the one statement of that rule, for the
// variables, the ledger's start and every seal.
func CheckSecret(secret []byte) error {
	if len(secret) < MinSecretLen {
		return fmt.Errorf("has %d bytes, want at least %d", len(secret), MinSecretLen)
	}
	return nil
}

// ReadSecret reads MINTGATE_GRANT_SECRET, the key of the MAC every ledger
// batch carries: the signer seals with it, the sweeper applies only what it
// verifies. It is required and passes CheckSecret; the value is never
// printed.
func ReadSecret(e *config.Env) []byte {
	const name = "MINTGATE_GRANT_SECRET"
	v := e.ExactSecret(name) // every signer and sweeper must MAC with the same bytes
	if len(v) == 0 {
		e.Fail(name, "required: a random secret of at least %d bytes, the same for every signer and sweeper", MinSecretLen)
	} else if err := CheckSecret(v); err != nil {
		e.Fail(name, "%v", err)
	}
	return v
}

// ReadPreviousSecret reads MINTGATE_GRANT_SECRET_PREVIOUS, the key a
// rotation of MINTGATE_GRANT_SECRET replaces: sweepers also accept batches
// sealed with it until those have fallen due. Optional; when set, it
// passes CheckSecret and is not the current secret.
func ReadPreviousSecret(e *config.Env, current []byte) []byte {
	const name = "MINTGATE_GRANT_SECRET_PREVIOUS"
	v := e.ExactSecret(name) // every signer and sweeper must MAC with the same bytes
	if len(v) == 0 {
		return nil
	}
	if err := CheckSecret(v); err != nil {
		e.Fail(name, "%v", err)
	} else if string(v) == string(current) {
		e.Fail(name, "is MINTGATE_GRANT_SECRET itself: set it to the key being replaced, or leave it empty")
	}
	return v
}
