package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/mintgate/mintgate/signer/internal/apierr"
	"github.com/mintgate/mintgate/signer/internal/identity"
)

// Every malformed or unauthorised request gets its own 4xx code, never a
// 500, and never spends a token.
func TestBadRequestsGetTheirCodes(t *testing.T) {
	env := newStack(t).env(t)
	env["MINTGATE_JWT_ISSUER"] = testIssuer
	env["MINTGATE_JWT_AUDIENCE"] = testAudience
	s := start(t, env)
	now := s.clock.Now()
	good := s.token("acme", "alice")
	claims := func(change func(jwt.MapClaims)) string {
		c := jwt.MapClaims{"sub": "alice", "tenant_id": "acme", "exp": now.Add(time.Hour).Unix(), "iss": testIssuer, "aud": testAudience}
		change(c)
		return hs256(t, c)
	}
	none, err := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{"sub": "alice", "tenant_id": "acme", "exp": now.Add(time.Hour).Unix(), "iss": testIssuer, "aud": testAudience}).
		SignedString(jwt.UnsafeAllowNoneSignatureType)
	if err != nil {
		t.Fatal(err)
	}
	otherKey, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "alice", "tenant_id": "acme", "exp": now.Add(time.Hour).Unix(), "iss": testIssuer, "aud": testAudience}).
		SignedString([]byte("another-secret-of-at-least-32-bytes-xx"))
	if err != nil {
		t.Fatal(err)
	}
	tampered := good[:len(good)-4] + "AAAA"
	if tampered == good {
		tampered = good[:len(good)-4] + "BBBB"
	}

	cases := []struct {
		name   string
		token  string
		key    string
		body   string
		header []string
		status int
		code   string
	}{
		{"missing key", good, "", pngBody, nil, 400, apierr.CodeKeyRequired},
		{"overlong key", good, strings.Repeat("k", 256), pngBody, nil, 400, apierr.CodeKeyInvalid},
		{"key with a space", good, "my key", pngBody, nil, 400, apierr.CodeKeyInvalid},
		{"key with a tab", good, "my\tkey", pngBody, nil, 400, apierr.CodeKeyInvalid},
		{"non-ASCII key", good, "ключ", pngBody, nil, 400, apierr.CodeKeyInvalid},
		{"bad JSON", good, newKey(), `{"contentType":`, nil, 400, apierr.CodeInvalidRequest},
		{"empty body", good, newKey(), ``, nil, 400, apierr.CodeInvalidRequest},
		{"not an object", good, newKey(), `["image/png",5]`, nil, 400, apierr.CodeInvalidRequest},
		{"unknown field", good, newKey(), `{"contentType":"image/png","contentLength":5,"key":"x"}`, nil, 400, apierr.CodeInvalidRequest},
		{"length as string", good, newKey(), `{"contentType":"image/png","contentLength":"5"}`, nil, 400, apierr.CodeInvalidRequest},
		{"type as number", good, newKey(), `{"contentType":7,"contentLength":5}`, nil, 400, apierr.CodeInvalidRequest},
		{"fractional length", good, newKey(), `{"contentType":"image/png","contentLength":1.5}`, nil, 400, apierr.CodeInvalidRequest},
		{"two JSON values", good, newKey(), pngBody + pngBody, nil, 400, apierr.CodeInvalidRequest},
		{"missing type", good, newKey(), `{"contentLength":5}`, nil, 400, apierr.CodeInvalidRequest},
		{"missing length", good, newKey(), `{"contentType":"image/png"}`, nil, 400, apierr.CodeInvalidRequest},
		{"size 0", good, newKey(), `{"contentType":"image/png","contentLength":0}`, nil, 400, apierr.CodeInvalidRequest},
		{"negative size", good, newKey(), `{"contentType":"image/png","contentLength":-1}`, nil, 400, apierr.CodeInvalidRequest},
		{"disallowed type", good, newKey(), `{"contentType":"text/html","contentLength":5}`, nil, 415, apierr.CodeUnsupportedType},
		{"type with parameters", good, newKey(), `{"contentType":"image/png; x=1","contentLength":5}`, nil, 415, apierr.CodeUnsupportedType},
		{"size above max", good, newKey(), `{"contentType":"image/png","contentLength":104857601}`, nil, 413, apierr.CodeTooLarge},
		{"body above 4 KiB", good, newKey(), `{"contentType":"image/png","contentLength":5}` + strings.Repeat(" ", 5000), nil, 413, apierr.CodeTooLarge},
		{"no credentials", "", newKey(), pngBody, nil, 401, apierr.CodeUnauthenticated},
		{"basic auth", "", newKey(), pngBody, []string{"Authorization", "Basic YWxpY2U6cHc="}, 401, apierr.CodeUnauthenticated},
		{"bad signature", tampered, newKey(), pngBody, nil, 401, apierr.CodeUnauthenticated},
		{"other secret", otherKey, newKey(), pngBody, nil, 401, apierr.CodeUnauthenticated},
		{"expired", claims(func(c jwt.MapClaims) { c["exp"] = now.Add(-time.Hour).Unix() }), newKey(), pngBody, nil, 401, apierr.CodeUnauthenticated},
		{"no exp", claims(func(c jwt.MapClaims) { delete(c, "exp") }), newKey(), pngBody, nil, 401, apierr.CodeUnauthenticated},
		{"not yet valid", claims(func(c jwt.MapClaims) { c["nbf"] = now.Add(time.Hour).Unix() }), newKey(), pngBody, nil, 401, apierr.CodeUnauthenticated},
		{"alg none", none, newKey(), pngBody, nil, 401, apierr.CodeUnauthenticated},
		{"wrong issuer", claims(func(c jwt.MapClaims) { c["iss"] = "https://evil.test" }), newKey(), pngBody, nil, 401, apierr.CodeUnauthenticated},
		{"wrong audience", claims(func(c jwt.MapClaims) { c["aud"] = "someone-else" }), newKey(), pngBody, nil, 401, apierr.CodeUnauthenticated},
		{"no sub", claims(func(c jwt.MapClaims) { delete(c, "sub") }), newKey(), pngBody, nil, 401, apierr.CodeUnauthenticated},
		{"no tenant claim", claims(func(c jwt.MapClaims) { delete(c, "tenant_id") }), newKey(), pngBody, nil, 401, apierr.CodeUnauthenticated},
		{"tenant breaking the key scheme", claims(func(c jwt.MapClaims) { c["tenant_id"] = "a}:b" }), newKey(), pngBody, nil, 403, apierr.CodeForbiddenTenant},
		{"header names another tenant", good, newKey(), pngBody, []string{identity.HeaderTenant, "globex"}, 403, apierr.CodeForbiddenTenant},
		{"anonymous on a closed tenant", "", newKey(), pngBody, []string{identity.HeaderTenant, "acme"}, 403, apierr.CodeForbiddenTenant},
		{"anonymous on an unknown tenant", "", newKey(), pngBody, []string{identity.HeaderTenant, "nobody"}, 403, apierr.CodeForbiddenTenant},
		{"anonymous on an invalid tenant", "", newKey(), pngBody, []string{identity.HeaderTenant, "{t:x}"}, 403, apierr.CodeForbiddenTenant},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := s.sign(tc.token, tc.key, tc.body, tc.header...)
			mustStatus(t, r, tc.status, tc.code)
			if r.str("message") == "" {
				t.Errorf("no message: %s", r.raw)
			}
			if tc.status == 401 && r.header.Get(apierr.HeaderWWWAuthenticate) == "" {
				t.Error("401 without WWW-Authenticate")
			}
		})
	}
	if got := s.tokens("rl:{t:acme}:sign:u:alice"); got != "" {
		t.Errorf("rejected requests touched the bucket: t=%q", got)
	}
	// The boundaries themselves are fine.
	if r := s.sign(good, strings.Repeat("k", 255), `{"contentType":"application/pdf","contentLength":104857600}`); r.status != http.StatusCreated {
		t.Errorf("255-char key and the maximum size: %d %s", r.status, r.raw)
	}
	if r := s.sign(good, "!~", `  {"contentLength":1,"contentType":"image/webp"}  `); r.status != http.StatusCreated {
		t.Errorf("visible ASCII key: %d %s", r.status, r.raw)
	}
}

func TestRouteErrorsAreJSON(t *testing.T) {
	s := start(t, newStack(t).env(t))
	mustStatus(t, s.do(http.MethodGet, "/nowhere", nil, ""), http.StatusNotFound, apierr.CodeNotFound)
	mustStatus(t, s.do(http.MethodDelete, "/uploads/sign", nil, ""), http.StatusMethodNotAllowed, apierr.CodeMethodNotAllowed)
	mustStatus(t, s.do(http.MethodPut, "/healthz", nil, ""), http.StatusMethodNotAllowed, apierr.CodeMethodNotAllowed)
}
