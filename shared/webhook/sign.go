// Package webhook delivers the upload events (completed, rejected) to an
// app's HTTP endpoint as the Standard Webhooks specification says
// (https://www.standardwebhooks.com, docs/webhooks.md): signing, the
// payload, the retry schedule kept in JetStream (stream MINTGATE_WEBHOOKS),
// the guard that keeps deliveries off private addresses, and the store of
// deliveries that failed every try. The completer runs the Deliverer; the
// signer's admin routes read and redeliver the failed ones (Failed).
package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"time"
)

// The Standard Webhooks headers.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// secretPrefix starts every secret as Standard Webhooks writes it.
const secretPrefix = "whsec_"

// MinSecretBytes is the shortest decoded secret accepted: the
// specification asks for 24 to 64 random bytes.
const MinSecretBytes = 24

// Secret is a signing key: the decoded bytes of a "whsec_<base64>" value.
// Its String never shows the key.
type Secret struct{ key []byte }

// ErrBadSecret is wrapped by ParseSecret's errors.
var ErrBadSecret = errors.New("want whsec_ and the base64 of at least 24 random bytes")

// ParseSecret reads "whsec_" + standard base64 (with padding, as the
// reference libraries decode it). The error never quotes the value.
func ParseSecret(s string) (Secret, error) {
	b64, ok := strings.CutPrefix(strings.TrimSpace(s), secretPrefix)
	if !ok {
		return Secret{}, ErrBadSecret
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(key) < MinSecretBytes {
		return Secret{}, ErrBadSecret
	}
	return Secret{key: key}, nil
}

// IsZero reports whether s holds no key.
func (s Secret) IsZero() bool { return len(s.key) == 0 }

// String hides the key.
func (s Secret) String() string { return "whsec_<redacted>" }

// Sign is the webhook-signature value of one try: "v1," and the base64
// HMAC-SHA256, under the key, of "<id>.<unix seconds>.<body>".
//
// Written here rather than imported from the reference Go library
// (github.com/standard-webhooks/standard-webhooks/libraries, v0.0.1): its
// signing is these same lines, but its NewWebhook takes a secret without
// the whsec_ prefix and of any length, where mintgate refuses both at
// start. The specification's own vector checks this function
// (TestSignMatchesTheSpecification), and every test receiver verifies with
// the standardwebhooks npm library.
func (s Secret) Sign(id string, at time.Time, body []byte) string {
	h := hmac.New(sha256.New, s.key)
	h.Write([]byte(id + "." + strconv.FormatInt(at.Unix(), 10) + "."))
	h.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(h.Sum(nil))
}

// Verify reports whether sigs (a webhook-signature header: space-separated
// "v1,<base64>" values) holds the signature of id, at and body. It does not
// judge the timestamp's age: a receiver must (docs/webhooks.md).
func (s Secret) Verify(id string, at time.Time, body []byte, sigs string) bool {
	want := []byte(s.Sign(id, at, body))
	for sig := range strings.FieldsSeq(sigs) {
		if hmac.Equal([]byte(sig), want) {
			return true
		}
	}
	return false
}
