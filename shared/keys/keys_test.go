package keys_test

import (
	"testing"

	"github.com/mintgate/mintgate/shared/keys"
)

// Two callers' idempotency records never share a key, however their user
// ids and keys are cut (issue 10, finding 5: user "alice:x" with key "y"
// and user "alice" with key "x:y" shared one record, and the second got 422).
func TestIdempotencyKeysNeverCollide(t *testing.T) {
	type ask struct{ tenant, subject, key string }
	pairs := [][2]ask{
		{{"acme", keys.UserSubject("alice:x"), "y"}, {"acme", keys.UserSubject("alice"), "x:y"}},
		{{"acme", keys.UserSubject("a"), "b:c:d"}, {"acme", keys.UserSubject("a:b:c"), "d"}},
		{{"acme", keys.UserSubject("7:u:x"), "k"}, {"acme", keys.UserSubject("x"), "k"}},
		{{"acme", keys.AnonSubject("00ff"), "k"}, {"acme", keys.UserSubject("00ff"), "k"}},
	}
	for _, p := range pairs {
		a, b := p[0], p[1]
		ka, kb := keys.Idempotency(a.tenant, a.subject, a.key), keys.Idempotency(b.tenant, b.subject, b.key)
		if ka == kb {
			t.Errorf("%+v and %+v share %q", a, b, ka)
		}
	}
	if got, want := keys.Idempotency("acme", "u:alice", "k-1"), "sign:idem:{t:acme}:7:u:alice:k-1"; got != want {
		t.Errorf("Idempotency = %q, want %q", got, want)
	}
}

// The anonymous_all bucket shares the tenant's hash tag and no subject's key.
func TestAnonBucket(t *testing.T) {
	if got, want := keys.AnonBucket("acme"), "rl:{t:acme}:sign:anon"; got != want {
		t.Errorf("AnonBucket = %q, want %q", got, want)
	}
	for _, subject := range []string{keys.UserSubject("anon"), keys.AnonSubject("anon"), keys.UserSubject("")} {
		if keys.Bucket("acme", subject) == keys.AnonBucket("acme") {
			t.Errorf("subject %q has the anonymous_all bucket's key", subject)
		}
	}
}

func TestObjectRoundTrips(t *testing.T) {
	key := keys.Object("acme", "0f8fad5b-d9cb-469f-a165-70867728950e")
	if key != "incoming/acme/0f8fad5b-d9cb-469f-a165-70867728950e" {
		t.Errorf("Object: %q", key)
	}
	if tn, id, inside, ok := keys.ParseObject(key); !inside || !ok || tn != "acme" || id != "0f8fad5b-d9cb-469f-a165-70867728950e" {
		t.Errorf("keys.ParseObject(%q) = %q %q %v %v", key, tn, id, inside, ok)
	}
	if _, _, inside, _ := keys.ParseObject("other/acme/x"); inside {
		t.Error("a key outside incoming/ is inside")
	}
	if _, _, inside, ok := keys.ParseObject("incoming/acme"); !inside || ok {
		t.Errorf("incoming/acme: inside %v ok %v, want inside and not ok", inside, ok)
	}
}
