package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/quota"
	"github.com/mintgate/mintgate/signer/internal/apierr"
	"github.com/mintgate/mintgate/signer/internal/identity"
)

func TestUploadStatus(t *testing.T) {
	s := start(t, newStack(t).env(t))
	ctx := context.Background()
	tok := s.token("acme", "alice")
	auth := map[string]string{"Authorization": "Bearer " + tok}
	issue := func() string {
		r := s.sign(tok, newKey(), pngBody)
		if r.status != http.StatusCreated {
			t.Fatalf("sign: %d %s", r.status, r.raw)
		}
		return r.str("urlId")
	}
	status := func(id string, h map[string]string) reply { return s.do(http.MethodGet, "/uploads/"+id, h, "") }

	pendingID, doneID, refundedID := issue(), issue(), issue()
	s.rdb.Set(ctx, keys.Done("acme", doneID), "1", time.Minute)
	s.rdb.Set(ctx, keys.Refunded("acme", refundedID), "1", time.Minute)

	for id, want := range map[string]string{pendingID: statusPending, doneID: statusCompleted, refundedID: statusRefunded} {
		r := status(id, auth)
		if r.status != http.StatusOK || r.str("status") != want || r.str("urlId") != id || r.str("expiresAt") == "" {
			t.Errorf("%s: %d %s, want %s", id, r.status, r.raw, want)
		}
	}
	s.clock.Add(121 * time.Second)
	if r := status(pendingID, auth); r.str("status") != statusExpired {
		t.Errorf("after expiry: %s", r.raw)
	}
	if r := status(doneID, auth); r.str("status") != statusCompleted {
		t.Errorf("completed after expiry: %s", r.raw)
	}

	// Another tenant cannot see it; an unknown id is 404; a bad id is 400.
	mustStatus(t, status(pendingID, map[string]string{"Authorization": "Bearer " + s.token("globex", "alice")}), http.StatusNotFound, apierr.CodeNotFound)
	mustStatus(t, status(uuid.NewString(), auth), http.StatusNotFound, apierr.CodeNotFound)
	mustStatus(t, status("not-a-uuid", auth), http.StatusBadRequest, apierr.CodeInvalidRequest)
	mustStatus(t, status(uuid.New().URN(), auth), http.StatusBadRequest, apierr.CodeInvalidRequest)
	mustStatus(t, status(pendingID, nil), http.StatusUnauthorized, apierr.CodeUnauthenticated)

	// Anonymous callers see the grants they signed.
	r := s.sign("", newKey(), pngBody, identity.HeaderTenant, "pub")
	if r.status != http.StatusCreated {
		t.Fatalf("anonymous sign: %d %s", r.status, r.raw)
	}
	if st := status(r.str("urlId"), map[string]string{identity.HeaderTenant: "pub"}); st.str("status") != statusPending {
		t.Errorf("anonymous status: %d %s", st.status, st.raw)
	}
}

// TestUploadStatusVerdicts: the verification gate's states (issue 30).
// Between the object's arrival and the verdict the upload reads
// verifying; a rejection reads rejected with its reason from the moment
// it is decided; a passed one reads completed.
func TestUploadStatusVerdicts(t *testing.T) {
	s := start(t, newStack(t).env(t))
	ctx := context.Background()
	tok := s.token("acme", "alice")
	auth := map[string]string{"Authorization": "Bearer " + tok}
	cases := []struct{ marker, status, reason string }{
		{quota.DoneVerifying, statusVerifying, ""},
		{quota.DoneUnpublished, statusVerifying, ""}, // the signer saw a multipart upload complete
		{quota.DoneVerified, statusCompleted, ""},
		{quota.DoneCompleted, statusCompleted, ""},
		{quota.Rejecting("type_mismatch"), statusRejected, "type_mismatch"},
		{quota.Rejected("malware"), statusRejected, "malware"},
		{quota.Rejected("size_mismatch"), statusRejected, "size_mismatch"},
		{quota.Rejected("image_too_large"), statusRejected, "image_too_large"},
	}
	for _, c := range cases {
		r := s.sign(tok, newKey(), pngBody)
		if r.status != http.StatusCreated {
			t.Fatalf("sign: %d %s", r.status, r.raw)
		}
		id := r.str("urlId")
		s.rdb.Set(ctx, keys.Done("acme", id), c.marker, time.Minute)
		got := s.do(http.MethodGet, "/uploads/"+id, auth, "")
		if got.status != http.StatusOK || got.str("status") != c.status || got.str("reason") != c.reason {
			t.Errorf("marker %q: %d %s, want %s %q", c.marker, got.status, got.raw, c.status, c.reason)
		}
		if c.reason == "" && strings.Contains(string(got.raw), `"reason"`) {
			t.Errorf("marker %q: %s carries a reason", c.marker, got.raw)
		}
	}
}

// Only the caller who signed a URL learns its status (issue 10, finding 6:
// any caller of a tenant, anonymous ones included, read any upload's status
// by its urlId). Everyone else gets the 404 of an unknown urlId, so the
// answer does not even confirm that the urlId exists.
func TestUploadStatusIsTheSignersOnly(t *testing.T) {
	s := start(t, newStack(t).env(t))
	ctx := context.Background()
	as := func(tok string) map[string]string {
		if tok == "" {
			return map[string]string{identity.HeaderTenant: "pub"}
		}
		return map[string]string{"Authorization": "Bearer " + tok}
	}
	status := func(id string, h map[string]string) reply { return s.do(http.MethodGet, "/uploads/"+id, h, "") }
	alice, bob := s.token("pub", "alice"), s.token("pub", "bob")

	r := s.sign(alice, newKey(), pngBody)
	if r.status != http.StatusCreated {
		t.Fatalf("alice's sign: %d %s", r.status, r.raw)
	}
	aliceID := r.str("urlId")
	r = s.sign("", newKey(), pngBody, identity.HeaderTenant, "pub")
	if r.status != http.StatusCreated {
		t.Fatalf("anonymous sign: %d %s", r.status, r.raw)
	}
	anonID := r.str("urlId")

	for _, id := range []string{aliceID, anonID} {
		s.rdb.Set(ctx, keys.Done("pub", id), "1", time.Minute) // a completed upload is no less private
	}
	cases := []struct {
		name, id, token string
		ok              bool
	}{
		{"alice, her own", aliceID, alice, true},
		{"bob, alice's", aliceID, bob, false},
		{"an anonymous caller, alice's", aliceID, "", false},
		{"the anonymous signer, its own", anonID, "", true},
		{"alice, the anonymous caller's", anonID, alice, false},
		{"alice's namesake in another tenant", aliceID, s.token("acme", "alice"), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := status(tc.id, as(tc.token))
			if tc.ok {
				if r.status != http.StatusOK || r.str("status") != statusCompleted {
					t.Errorf("%d %s, want 200 completed", r.status, r.raw)
				}
				return
			}
			mustStatus(t, r, http.StatusNotFound, apierr.CodeNotFound)
			if unknown := status(uuid.NewString(), as(tc.token)); string(unknown.raw) != string(r.raw) {
				t.Errorf("the 404 %s differs from an unknown urlId's %s", r.raw, unknown.raw)
			}
		})
	}
}
