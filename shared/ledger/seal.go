package ledger

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
)

// ErrForged marks a ledger message whose MAC does not verify under the
// secret (or that carries none, like a grant from before batches): the
// sweeper never applies it.
var ErrForged = errors.New("ledger: message not sealed with our secret")

// sealVersion is the envelope's format; a bump makes old sweepers refuse
// new messages rather than misread them.
const sealVersion = 2

// macContext binds the MAC to this use of the secret.
const macContext = "mintgate grant batch v2\x00"

// envelope is a ledger message's body: the batch exactly as it was
// encoded, and its MAC. The MAC covers those bytes, so nothing has to be
// re-encoded the same way to verify.
type envelope struct {
	V     int             `json:"v"`
	Batch json.RawMessage `json:"batch"`
	MAC   string          `json:"mac"`
}

// Seal encodes b for the ledger with an HMAC-SHA256 under secret.
func Seal(secret []byte, b Batch) ([]byte, error) {
	if err := CheckSecret(secret); err != nil {
		return nil, fmt.Errorf("ledger: the MAC secret %w", err)
	}
	body, err := json.Marshal(b)
	if err != nil {
		return nil, fmt.Errorf("ledger: encode batch %s: %w", b.ID, err)
	}
	return json.Marshal(envelope{V: sealVersion, Batch: body, MAC: mac(secret, body)})
}

// UnsealAny verifies and decodes a message Seal made, under any of secrets
// (a rotation's window: the new key and the previous one); empty secrets are
// skipped. A message it cannot verify wraps ErrForged; a verified one that
// does not decode wraps ErrMalformed (a signer's bug, never an attacker's).
func UnsealAny(data []byte, secrets ...[]byte) (Batch, error) {
	var env envelope
	if err := json.Unmarshal(data, &env); err != nil || env.V != sealVersion || env.MAC == "" || len(env.Batch) == 0 {
		return Batch{}, fmt.Errorf("%w: not a sealed v%d batch", ErrForged, sealVersion)
	}
	verified := false
	for _, secret := range secrets {
		if len(secret) > 0 && hmac.Equal([]byte(env.MAC), []byte(mac(secret, env.Batch))) {
			verified = true
			break
		}
	}
	if !verified {
		return Batch{}, fmt.Errorf("%w: MAC mismatch", ErrForged)
	}
	var b Batch
	if err := json.Unmarshal(env.Batch, &b); err != nil {
		return Batch{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if b.ID == "" || len(b.Grants) == 0 {
		return b, fmt.Errorf("%w: batch without id or grants", ErrMalformed)
	}
	return b, nil
}

func mac(secret, body []byte) string {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(macContext))
	h.Write(body)
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}
