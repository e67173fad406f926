package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"testing"

	"github.com/mintgate/mintgate/api"
	"github.com/mintgate/mintgate/signer/internal/apierr"
	"github.com/mintgate/mintgate/signer/internal/identity"
)

const limitsPath = "/uploads/limits"

// GET /uploads/limits answers the configuration's limits to anyone, with
// or without credentials, and what it says is what a sign then enforces.
func TestUploadLimitsFollowTheConfiguration(t *testing.T) {
	env := newStack(t).env(t)
	env["MINTGATE_MAX_OBJECT_BYTES"] = "10485760"
	env["MINTGATE_MAX_MULTIPART_BYTES"] = "1073741824"
	env["MINTGATE_MULTIPART_PART_BYTES"] = "8388608"
	env["MINTGATE_CONTENT_TYPES"] = "video/mp4, image/png,application/pdf"
	s := start(t, env)
	want := api.LimitsResponse{
		MaxObjectBytes:     10 << 20,
		MaxMultipartBytes:  1 << 30,
		PartSize:           8 << 20,
		MaxPartsPerRequest: maxPartsPerRequest,
		ContentTypes:       []string{"application/pdf", "image/png", "video/mp4"},
	}

	var first []byte
	for name, h := range map[string]map[string]string{
		"no credentials":        nil,
		"a token":               {"Authorization": "Bearer " + s.token("acme", "alice")},
		"a token that is wrong": {"Authorization": "Bearer not-a-jwt"},
		"an unknown tenant":     {identity.HeaderTenant: "nobody"},
	} {
		r := s.do(http.MethodGet, limitsPath, h, "")
		if r.status != http.StatusOK {
			t.Fatalf("%s: %d %s", name, r.status, r.raw)
		}
		if got := r.header.Get("Content-Type"); got != "application/json" {
			t.Errorf("%s: Content-Type %q", name, got)
		}
		if got := r.header.Get("Cache-Control"); got != "public, max-age=60" {
			t.Errorf("%s: Cache-Control %q", name, got)
		}
		var got api.LimitsResponse
		if err := json.Unmarshal(r.raw, &got); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %+v, want %+v", name, got, want)
		}
		if first == nil {
			first = r.raw
		} else if string(r.raw) != string(first) {
			t.Errorf("%s: %s differs from %s", name, r.raw, first)
		}
	}
	var fields map[string]any
	if err := json.Unmarshal(first, &fields); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"maxObjectBytes", "maxMultipartBytes", "partSize", "maxPartsPerRequest", "contentTypes", "requireChecksum"} {
		if _, ok := fields[f]; !ok {
			t.Errorf("%s lacks %s", first, f)
		}
	}
	if len(fields) != 6 {
		t.Errorf("%s: %d fields, want 6", first, len(fields))
	}

	// A sign takes what the limits say, and no more.
	tok := s.token("acme", "alice")
	body := func(ct string, n int64) string { return fmt.Sprintf(`{"contentType":%q,"contentLength":%d}`, ct, n) }
	if r := s.sign(tok, newKey(), body("video/mp4", want.MaxObjectBytes)); r.status != http.StatusCreated {
		t.Errorf("a sign of maxObjectBytes: %d %s", r.status, r.raw)
	}
	mustStatus(t, s.sign(tok, newKey(), body("video/mp4", want.MaxObjectBytes+1)), http.StatusRequestEntityTooLarge, apierr.CodeTooLarge)
	mustStatus(t, s.sign(tok, newKey(), body("image/jpeg", 1)), http.StatusUnsupportedMediaType, apierr.CodeUnsupportedType)
}

// /uploads/limits is a route of its own beside /uploads/{urlId}: the
// static route takes its GET, its DELETE is 405 (not an abort of urlId
// "limits"), and the urlId routes still serve urlIds.
func TestUploadLimitsBesideTheUrlIdRoutes(t *testing.T) {
	s := start(t, newStack(t).env(t))
	tok := s.token("acme", "alice")
	auth := map[string]string{"Authorization": "Bearer " + tok}

	if r := s.do(http.MethodGet, limitsPath, nil, ""); r.status != http.StatusOK || r.body["partSize"] != float64(defaultPartSize) {
		t.Errorf("GET %s: %d %s", limitsPath, r.status, r.raw)
	}
	for _, m := range []string{http.MethodDelete, http.MethodPost, http.MethodPut} {
		mustStatus(t, s.do(m, limitsPath, auth, ""), http.StatusMethodNotAllowed, apierr.CodeMethodNotAllowed)
	}

	r := s.sign(tok, newKey(), pngBody)
	if r.status != http.StatusCreated {
		t.Fatalf("sign: %d %s", r.status, r.raw)
	}
	id := r.str("urlId")
	if st := s.do(http.MethodGet, "/uploads/"+id, auth, ""); st.status != http.StatusOK || st.str("status") != statusPending {
		t.Errorf("GET /uploads/%s: %d %s", id, st.status, st.raw)
	}
	// Another word in the place of a urlId is still the status route's.
	mustStatus(t, s.do(http.MethodGet, "/uploads/limit", auth, ""), http.StatusBadRequest, apierr.CodeInvalidRequest)
	mustStatus(t, s.do(http.MethodDelete, "/uploads/limit", auth, ""), http.StatusBadRequest, apierr.CodeInvalidRequest)
}

// With no content type configured the list is empty, not null.
func TestUploadLimitsBodyListsNoTypeAsEmpty(t *testing.T) {
	var got map[string]any
	if err := json.Unmarshal(limitsBody(cfg{ContentTypes: map[string]bool{}}), &got); err != nil {
		t.Fatal(err)
	}
	if types, ok := got["contentTypes"].([]any); !ok || len(types) != 0 {
		t.Errorf("contentTypes %v, want []", got["contentTypes"])
	}
}
