package main

import (
	"bytes"
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

var fuzzPolicy = newSignPolicy(104857600, map[string]bool{"image/png": true, "application/pdf": true})

func FuzzDecodeSignRequest(f *testing.F) {
	f.Add("k", []byte(pngBody))
	f.Add("", []byte(pngBody))
	f.Add(strings.Repeat("k", 256), []byte(pngBody))
	f.Add("k", []byte(`{"contentType":"image/png","contentLength":0}`))
	f.Add("k", []byte(`{"contentType":"image/png","contentLength":"5"}`))
	f.Add("k", []byte(`{"contentType":"image/png","contentLength":5,"x":1}`))
	f.Add("k", []byte(`{}{}`))
	f.Add("k", []byte(`null`))
	f.Add("k", bytes.Repeat([]byte(" "), maxBodyBytes+1))
	f.Fuzz(func(t *testing.T, key string, body []byte) {
		req, err := decodeSignRequest(key, bytes.NewReader(body), fuzzPolicy)
		if err != nil {
			if err.Status < 400 || err.Status > 499 || err.Code == "" || err.Message == "" {
				t.Fatalf("error %+v for key %q body %q", err, key, body)
			}
			return
		}
		if !validIdempotencyKey(req.Key) || req.Key != key {
			t.Fatalf("accepted key %q", key)
		}
		if !fuzzPolicy.contentTypes[req.ContentType] || req.ContentLength < 1 || req.ContentLength > fuzzPolicy.maxObject {
			t.Fatalf("accepted %+v from %q", req, body)
		}
		if len(body) > maxBodyBytes {
			t.Fatalf("accepted a body of %d bytes", len(body))
		}
	})
}

// A 415 names the types the signer accepts, sorted, so a caller can fix
// its request without reading the configuration.
func TestUnsupportedTypeListsTheAccepted(t *testing.T) {
	_, err := decodeSignRequest("k", strings.NewReader(`{"contentType":"text/html","contentLength":5}`), fuzzPolicy)
	if err == nil || err.Status != http.StatusUnsupportedMediaType || err.Code != apierr.CodeUnsupportedType {
		t.Fatalf("got %+v, want 415 %s", err, apierr.CodeUnsupportedType)
	}
	const want = "contentType is not one this service accepts: use one of application/pdf, image/png"
	if err.Message != want {
		t.Errorf("message %q, want %q", err.Message, want)
	}
}

// What parseSignFast accepts, encoding/json decodes to the same values;
// the rest it leaves to encoding/json.
func FuzzParseSignFast(f *testing.F) {
	for _, s := range []string{pngBody, `{"contentLength":1,"contentType":"image/webp"}`, " {\t\"contentType\" :\"a\"\n,\"contentLength\": 10 } ",
		`{"contentType":"image/png","contentLength":05}`, `{"contentType":"a\"b","contentLength":5}`, `{"ContentType":"image/png","contentLength":5}`,
		`{"contentType":"image/png","contentType":"x","contentLength":5}`, `{"contentType":"image/png","contentLength":999999999999999999}`,
		`{"contentType":"image/png","contentLength":5}{}`, `{"contentType":"é","contentLength":5}`, `{"contentType":"image/png","contentLength":5.0}`,
		`{"contentType":"image/png","contentLength":5,"checksumSHA256":"LPJNul+wow4m6DsqxbninhsWHlwfp0JecwQzYpOLmCQ="}`,
		`{"checksumSHA256":"x","contentType":"image/png","checksumSHA256":"y","contentLength":5}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, ok := parseSignFast(body)
		if !ok {
			return
		}
		ct, cl := req.ContentType, req.ContentLength
		var w wireSign
		if aerr := decodeStrict(body, &w); aerr != nil {
			t.Fatalf("fast path took %q, encoding/json refused it: %v", body, aerr.Message)
		}
		if w.ContentType == nil || w.ContentLength == nil || *w.ContentType != ct || *w.ContentLength != cl {
			t.Fatalf("fast path read %q as %q, %d; encoding/json as %v, %v", body, ct, cl, w.ContentType, w.ContentLength)
		}
		if got := w.ChecksumSHA256; got != nil && *got != req.Checksum || got == nil && req.Checksum != "" || w.ChecksumAlgorithm != nil {
			t.Fatalf("fast path read %q's checksum as %q; encoding/json as %v, %v", body, req.Checksum, w.ChecksumSHA256, w.ChecksumAlgorithm)
		}
	})
}

func TestParseSignFast(t *testing.T) {
	for _, c := range []struct {
		body string
		ok   bool
	}{
		{pngBody, true},
		{`  {"contentLength":1,"contentType":"image/webp"}  `, true},
		{`{"contentType":"image/png","contentLength":05}`, false},
		{`{"contentType":"a\"b","contentLength":5}`, false},
		{`{"ContentType":"image/png","contentLength":5}`, false},
		{`{"contentType":"image/png","contentType":"x","contentLength":5}`, false},
		{`{"contentType":"image/png","contentLength":5}{}`, false},
		{`{"contentType":"image/png","contentLength":5,"x":1}`, false},
		{`{"contentType":"image/png"}`, false},
		{`{"contentType":"image/png","contentLength":5,"checksumSHA256":"LPJNul+wow4m6DsqxbninhsWHlwfp0JecwQzYpOLmCQ="}`, true},
		{`{"checksumSHA256":"LPJNul+wow4m6DsqxbninhsWHlwfp0JecwQzYpOLmCQ=","contentLength":5,"contentType":"image/png"}`, true},
		{`{"contentType":"image/png","contentLength":5,"checksumSHA256":"a","checksumSHA256":"b"}`, false},
		{`{"contentType":"image/png","contentLength":5,"checksumAlgorithm":"SHA256"}`, false},
	} {
		if _, ok := parseSignFast([]byte(c.body)); ok != c.ok {
			t.Errorf("parseSignFast(%s) ok %v, want %v", c.body, ok, c.ok)
		}
	}
}
