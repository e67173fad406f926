package main

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mintgate/mintgate/shared/keys"
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
	mustStatus(t, status(pendingID, map[string]string{"Authorization": "Bearer " + s.token("globex", "alice")}), http.StatusNotFound, codeNotFound)
	mustStatus(t, status(uuid.NewString(), auth), http.StatusNotFound, codeNotFound)
	mustStatus(t, status("not-a-uuid", auth), http.StatusBadRequest, codeInvalidRequest)
	mustStatus(t, status(uuid.New().URN(), auth), http.StatusBadRequest, codeInvalidRequest)
	mustStatus(t, status(pendingID, nil), http.StatusUnauthorized, codeUnauthenticated)

	// Anonymous callers of an open tenant see their tenant's grants.
	r := s.sign("", newKey(), pngBody, hdrTenant, "pub")
	if r.status != http.StatusCreated {
		t.Fatalf("anonymous sign: %d %s", r.status, r.raw)
	}
	if st := status(r.str("urlId"), map[string]string{hdrTenant: "pub"}); st.str("status") != statusPending {
		t.Errorf("anonymous status: %d %s", st.status, st.raw)
	}
}
