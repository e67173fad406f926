package main

import (
	"bytes"
	"context"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/google/uuid"

	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/signer/internal/apierr"
	"github.com/mintgate/mintgate/signer/internal/identity"
	"github.com/mintgate/mintgate/signer/internal/ratelimit"
	"github.com/mintgate/mintgate/signer/internal/request"
)

// The repository's description of the signer's HTTP interface.
const (
	openAPIFile = "../api/openapi.yaml"
	apiDocFile  = "../docs/api.md"
)

// loadAPI loads api/openapi.yaml and checks that it is a valid OpenAPI 3.1
// document, its examples included.
func loadAPI(t *testing.T) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile(openAPIFile)
	if err != nil {
		t.Fatalf("%s: %v", openAPIFile, err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1.") || !doc.IsOpenAPI31OrLater() {
		t.Fatalf("%s: openapi %q, want 3.1.x", openAPIFile, doc.OpenAPI)
	}
	if err := doc.Validate(loader.Context); err != nil {
		t.Fatalf("%s is not a valid OpenAPI document: %v", openAPIFile, err)
	}
	return doc
}

// apiCheck validates real answers of a signer against the document.
type apiCheck struct {
	t    *testing.T
	doc  *openapi3.T
	seen map[string]bool // "METHOD /template STATUS" of every answer checked
}

// route is the documented operation serving method and path, found by the
// path templates of the document as a router would.
func (c *apiCheck) route(method, path string) (*routers.Route, map[string]string) {
	c.t.Helper()
	for _, tmpl := range c.doc.Paths.InMatchingOrder() {
		names := regexp.MustCompile(`\{([^}]+)\}`).FindAllStringSubmatch(tmpl, -1)
		re := "^" + regexp.MustCompile(`\\\{[^}]+\\\}`).ReplaceAllString(regexp.QuoteMeta(tmpl), `([^/]+)`) + "$"
		m := regexp.MustCompile(re).FindStringSubmatch(path)
		if m == nil {
			continue
		}
		item := c.doc.Paths.Value(tmpl)
		op := item.GetOperation(method)
		if op == nil {
			c.t.Fatalf("%s %s: the document has %s but no %s operation", method, path, tmpl, method)
		}
		params := map[string]string{}
		for i, n := range names {
			params[n[1]] = m[i+1]
		}
		return &routers.Route{Spec: c.doc, Path: tmpl, PathItem: item, Method: method, Operation: op}, params
	}
	c.t.Fatalf("%s %s: no path of the document serves it", method, path)
	return nil, nil
}

// expect checks that r, the answer to method path, has the status want and
// matches the document: a documented status, its required headers and
// their schemas, its content type and its body's schema.
func (c *apiCheck) expect(want int, method, path string, r reply) reply {
	c.t.Helper()
	if r.status != want {
		c.t.Fatalf("%s %s: %d %s, want %d", method, path, r.status, r.raw, want)
	}
	route, params := c.route(method, path)
	req, err := http.NewRequest(method, path, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status:                 r.status,
		Header:                 r.header,
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	in.SetBodyBytes(r.raw)
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		c.t.Errorf("%s %s → %d %s\n%v\ndoes not match %s: %v", method, path, r.status, r.raw, r.header, openAPIFile, err)
	}
	c.seen[method+" "+route.Path+" "+strconv.Itoa(r.status)] = true
	return r
}

// expectError checks an error answer that no operation documents (an
// unknown path, a wrong method) against the Error schema.
func (c *apiCheck) expectError(want int, code string, r reply) {
	c.t.Helper()
	if r.status != want || r.code() != code {
		c.t.Fatalf("got %d %s, want %d %s", r.status, r.raw, want, code)
	}
	var v any
	if err := json.Unmarshal(r.raw, &v); err != nil {
		c.t.Fatal(err)
	}
	if err := c.doc.ValidateSchemaJSON(c.doc.Components.Schemas["Error"].Value, v, openapi3.EnableJSONSchema2020()); err != nil {
		c.t.Errorf("%d %s does not match the Error schema: %v", r.status, r.raw, err)
	}
}

// signRequestSchema checks that the document accepts a sign request the signer
// accepts, and rejects one the signer rejects for its body.
func (c *apiCheck) signRequestSchema(token, key, body string, valid bool) {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodPost, "/uploads/sign", strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set(request.HeaderIdempotencyKey, key)
	route, params := c.route(req.Method, req.URL.Path)
	err = openapi3filter.ValidateRequest(context.Background(), &openapi3filter.RequestValidationInput{
		Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
	})
	if valid && err != nil {
		c.t.Errorf("the document rejects the sign request %s: %v", body, err)
	}
	if !valid && err == nil {
		c.t.Errorf("the document accepts the sign request %s, which the signer refuses", body)
	}
}

// Real requests to a real signer (on real Redis and NATS) get answers that
// match api/openapi.yaml: every status the harness can cause, with its
// headers and its body.
func TestAnswersMatchOpenAPI(t *testing.T) {
	c := &apiCheck{t: t, doc: loadAPI(t), seen: map[string]bool{}}
	st := newStack(t)
	env := st.env(t)
	env["MINTGATE_TIERS"] = "anonymous=5:5/60s,user=3:0.5,tenant=600:10"
	env["MINTGATE_TENANT_TIERS"] = "tiny:tenant=1:0.01"
	const adminToken = "an-admin-token-of-at-least-32-bytes!"
	env["MINTGATE_ADMIN_TOKEN"] = adminToken
	// A burst for the whole test and no refill to speak of, so that once
	// the reads have emptied the bucket below, every read route refuses
	// (at the default 10 a second a token could come back between two
	// calls on a loaded machine).
	env["MINTGATE_READ_LIMIT"] = "60:1/1h"
	s := start(t, env)
	ops := &signer{t: t, base: s.ops, clock: s.clock}
	const sign = "/uploads/sign"
	post := http.MethodPost
	tok := s.token("acme", "alice")
	auth := map[string]string{"Authorization": "Bearer " + tok}

	for _, p := range []*signer{s, ops} {
		c.expect(http.StatusOK, http.MethodGet, "/healthz", p.do(http.MethodGet, "/healthz", nil, ""))
		c.expect(http.StatusOK, http.MethodGet, "/readyz", p.do(http.MethodGet, "/readyz", nil, ""))
	}
	c.expect(http.StatusOK, http.MethodGet, "/metrics", ops.do(http.MethodGet, "/metrics", nil, ""))
	c.expectError(http.StatusNotFound, apierr.CodeNotFound, s.do(http.MethodGet, "/metrics", nil, ""))
	c.expectError(http.StatusMethodNotAllowed, apierr.CodeMethodNotAllowed, s.do(http.MethodPut, sign, nil, pngBody))

	// 201, then its replay; the same key with another body.
	key := newKey()
	c.signRequestSchema(tok, key, pngBody, true)
	first := c.expect(http.StatusCreated, post, sign, s.sign(tok, key, pngBody))
	replay := c.expect(http.StatusOK, post, sign, s.sign(tok, key, pngBody))
	if !bytes.Equal(replay.raw, first.raw) {
		t.Errorf("replay %s differs from %s", replay.raw, first.raw)
	}
	c.expect(http.StatusUnprocessableEntity, post, sign, s.sign(tok, key, `{"contentType":"image/png","contentLength":2048}`))
	anon := c.expect(http.StatusCreated, post, sign, s.sign("", newKey(), pngBody, identity.HeaderTenant, "pub"))

	// 409: the key is held by a request still in flight.
	held := newKey()
	s.holdInFlight("acme", "alice", held)
	c.expect(http.StatusConflict, post, sign, s.sign(tok, held, pngBody))

	// 400, 401, 403, 413, 415.
	for _, tc := range []struct {
		status int
		code   string
		r      reply
	}{
		{http.StatusBadRequest, apierr.CodeKeyRequired, s.sign(tok, "", pngBody)},
		{http.StatusBadRequest, apierr.CodeKeyInvalid, s.sign(tok, "a key", pngBody)},
		{http.StatusBadRequest, apierr.CodeInvalidRequest, s.sign(tok, newKey(), `{"contentType":"image/png","contentLength":1,"extra":"x"}`)},
		{http.StatusBadRequest, apierr.CodeInvalidRequest, s.sign(tok, newKey(), `{"contentType":"image/png","contentLength":0}`)},
		{http.StatusBadRequest, apierr.CodeInvalidRequest, s.sign(tok, newKey(), `{"contentType":"image/png","contentLength":"1"}`)},
		{http.StatusUnauthorized, apierr.CodeUnauthenticated, s.sign("", newKey(), pngBody)},
		{http.StatusUnauthorized, apierr.CodeUnauthenticated, s.sign("not-a-jwt", newKey(), pngBody)},
		{http.StatusUnauthorized, apierr.CodeUnauthenticated, s.sign("", newKey(), pngBody, "Authorization", "Basic YTpi")},
		{http.StatusForbidden, apierr.CodeForbiddenTenant, s.sign("", newKey(), pngBody, identity.HeaderTenant, "acme")},
		{http.StatusForbidden, apierr.CodeForbiddenTenant, s.sign(tok, newKey(), pngBody, identity.HeaderTenant, "globex")},
		{http.StatusRequestEntityTooLarge, apierr.CodeTooLarge, s.sign(tok, newKey(), `{"contentType":"image/png","contentLength":1099511627776}`)},
		{http.StatusRequestEntityTooLarge, apierr.CodeTooLarge, s.sign(tok, newKey(), `{"contentType":"image/png","contentLength":1,"x":"`+strings.Repeat("x", request.MaxBodyBytes)+`"}`)},
		{http.StatusUnsupportedMediaType, apierr.CodeUnsupportedType, s.sign(tok, newKey(), `{"contentType":"text/html","contentLength":1}`)},
	} {
		if tc.r.code() != tc.code {
			t.Errorf("%d %s, want %s", tc.r.status, tc.r.raw, tc.code)
		}
		c.expect(tc.status, post, sign, tc.r)
	}
	for _, body := range []string{
		`{"contentType":"image/png","contentLength":1,"extra":"x"}`,
		`{"contentType":"image/png","contentLength":0}`,
		`{"contentType":"image/png"}`,
	} {
		c.signRequestSchema(tok, newKey(), body, false)
	}

	// 429 by the caller's bucket (user=3) and by the tenant's (tiny: 1).
	var r reply
	for r = s.sign(tok, newKey(), pngBody); r.status == http.StatusCreated; r = s.sign(tok, newKey(), pngBody) {
		c.expect(http.StatusCreated, post, sign, r)
	}
	if c.expect(http.StatusTooManyRequests, post, sign, r).str("scope") != ratelimit.ScopeCaller {
		t.Errorf("429 %s, want scope caller", r.raw)
	}
	c.expect(http.StatusCreated, post, sign, s.sign(s.token("tiny", "alice"), newKey(), pngBody))
	if r := c.expect(http.StatusTooManyRequests, post, sign, s.sign(s.token("tiny", "bob"), newKey(), pngBody)); r.str("scope") != ratelimit.ScopeTenant {
		t.Errorf("429 %s, want scope tenant", r.raw)
	}

	// GET /uploads/{urlId}: its signer's, nobody else's.
	status := func(id string, h map[string]string) reply { return s.do(http.MethodGet, "/uploads/"+id, h, "") }
	c.expect(http.StatusOK, http.MethodGet, "/uploads/x", status(first.str("urlId"), auth))
	c.expect(http.StatusOK, http.MethodGet, "/uploads/x", status(anon.str("urlId"), map[string]string{identity.HeaderTenant: "pub"}))
	s.rdb.Set(context.Background(), keys.Done("acme", first.str("urlId")), "1", 0)
	if r := c.expect(http.StatusOK, http.MethodGet, "/uploads/x", status(first.str("urlId"), auth)); r.str("status") != statusCompleted {
		t.Errorf("status %s, want completed", r.raw)
	}
	c.expect(http.StatusNotFound, http.MethodGet, "/uploads/x", status(first.str("urlId"), map[string]string{"Authorization": "Bearer " + s.token("acme", "bob")}))
	c.expect(http.StatusNotFound, http.MethodGet, "/uploads/x", status(uuid.NewString(), auth))
	c.expect(http.StatusBadRequest, http.MethodGet, "/uploads/x", status("not-a-uuid", auth))
	// The long poll: a decided upload at once, a bad wait 400.
	c.expect(http.StatusOK, http.MethodGet, "/uploads/x", status(first.str("urlId")+"?wait=5", auth))
	c.expect(http.StatusBadRequest, http.MethodGet, "/uploads/x", status(first.str("urlId")+"?wait=31", auth))
	c.expect(http.StatusUnauthorized, http.MethodGet, "/uploads/x", status(first.str("urlId"), nil))
	c.expect(http.StatusForbidden, http.MethodGet, "/uploads/x", status(first.str("urlId"), map[string]string{identity.HeaderTenant: "acme"}))

	// GET /uploads/quota.
	const quota = "/uploads/quota"
	c.expect(http.StatusOK, http.MethodGet, quota, s.do(http.MethodGet, quota, auth, ""))
	c.expect(http.StatusOK, http.MethodGet, quota, s.do(http.MethodGet, quota, map[string]string{identity.HeaderTenant: "pub"}, ""))
	c.expect(http.StatusUnauthorized, http.MethodGet, quota, s.do(http.MethodGet, quota, nil, ""))

	// GET /uploads/limits: public; the route's own DELETE is no abort.
	c.expect(http.StatusOK, http.MethodGet, limitsPath, s.do(http.MethodGet, limitsPath, nil, ""))
	c.expect(http.StatusOK, http.MethodGet, limitsPath, s.do(http.MethodGet, limitsPath, auth, ""))
	c.expectError(http.StatusMethodNotAllowed, apierr.CodeMethodNotAllowed, s.do(http.MethodDelete, limitsPath, auth, ""))

	// The admin API, on the ops port.
	admin := map[string]string{"Authorization": "Bearer " + adminToken}
	const buckets, reset = "/admin/tenants/acme/buckets", "/admin/tenants/acme/reset"
	grantPath := "/admin/grants/" + first.str("urlId") + "?tenant=acme"
	c.expect(http.StatusOK, http.MethodGet, buckets, ops.do(http.MethodGet, buckets, admin, ""))
	c.expect(http.StatusOK, http.MethodGet, buckets, ops.do(http.MethodGet, buckets+"?subject=u:alice", admin, ""))
	c.expect(http.StatusBadRequest, http.MethodGet, buckets, ops.do(http.MethodGet, buckets+"?subject=alice", admin, ""))
	c.expect(http.StatusUnauthorized, http.MethodGet, buckets, ops.do(http.MethodGet, buckets, nil, ""))
	c.expect(http.StatusOK, post, reset, ops.do(post, reset, admin, `{"subject":"u:alice"}`))
	c.expect(http.StatusOK, post, reset, ops.do(post, reset, admin, ""))
	c.expect(http.StatusBadRequest, post, reset, ops.do(post, reset, admin, `{"who":"u:alice"}`))
	c.expect(http.StatusOK, http.MethodGet, "/admin/grants/x", ops.do(http.MethodGet, grantPath, admin, ""))
	c.expect(http.StatusBadRequest, http.MethodGet, "/admin/grants/x", ops.do(http.MethodGet, "/admin/grants/x?tenant=acme", admin, ""))
	failedPath, redeliver := checkFailedWebhooks(t, c, ops, st.nats.URL(), admin)

	// 503: the ledger, then Redis, down (for a caller with tokens left).
	carol := s.token("acme", "carol")
	st.nats.Stop()
	if r := c.expect(http.StatusServiceUnavailable, post, sign, s.sign(carol, newKey(), pngBody)); r.code() != apierr.CodeLedgerDown {
		t.Errorf("with NATS down: %s", r.raw)
	}
	st.redis.Stop()
	if r := c.expect(http.StatusServiceUnavailable, post, sign, s.sign(carol, newKey(), pngBody)); r.code() != apierr.CodeLimiterDown {
		t.Errorf("with Redis down: %s", r.raw)
	}
	c.expect(http.StatusServiceUnavailable, http.MethodGet, "/uploads/x", status(first.str("urlId"), auth))
	c.expect(http.StatusServiceUnavailable, http.MethodGet, quota, s.do(http.MethodGet, quota, auth, ""))
	c.expect(http.StatusOK, http.MethodGet, limitsPath, s.do(http.MethodGet, limitsPath, nil, "")) // needs no Redis
	c.expect(http.StatusServiceUnavailable, http.MethodGet, buckets, ops.do(http.MethodGet, buckets, admin, ""))
	c.expect(http.StatusServiceUnavailable, http.MethodGet, failedPath, ops.do(http.MethodGet, failedPath, admin, ""))
	c.expect(http.StatusServiceUnavailable, post, redeliver, ops.do(post, redeliver, admin, ""))
	for _, p := range []*signer{s, ops} {
		c.expect(http.StatusServiceUnavailable, http.MethodGet, "/readyz", p.do(http.MethodGet, "/readyz", nil, ""))
	}

	// 429: one address's reads past MINTGATE_READ_LIMIT, on each read route
	// (one bucket per address: once empty, every route refuses).
	for r := status(first.str("urlId"), auth); r.status != http.StatusTooManyRequests; r = status(first.str("urlId"), auth) {
		c.expect(http.StatusServiceUnavailable, http.MethodGet, "/uploads/x", r)
	}
	c.expect(http.StatusTooManyRequests, http.MethodGet, "/uploads/x", status(first.str("urlId"), auth))
	c.expect(http.StatusTooManyRequests, http.MethodGet, quota, s.do(http.MethodGet, quota, auth, ""))
	c.expect(http.StatusTooManyRequests, http.MethodGet, limitsPath, s.do(http.MethodGet, limitsPath, nil, ""))
	c.expect(http.StatusTooManyRequests, http.MethodGet, "/readyz", s.do(http.MethodGet, "/readyz", nil, ""))
	// The same bucket holds back the anonymous signs of an address that
	// owes it (an authenticated caller's replays and refusals are charged
	// to that caller): 429 too_many_requests, no RateLimit-*.
	if r := c.expect(http.StatusTooManyRequests, post, sign, s.sign("", newKey(), pngBody, identity.HeaderTenant, "pub")); r.code() != apierr.CodeTooManyReads || r.header.Get("RateLimit-Limit") != "" {
		t.Errorf("a sign from an address past its read limit: %s %v", r.raw, r.header)
	}

	// What the document promises that this test never saw.
	for tmpl, item := range c.doc.Paths.Map() {
		for method, op := range item.Operations() {
			for status := range op.Responses.Map() {
				if !c.seen[method+" "+tmpl+" "+status] {
					t.Logf("not exercised: %s %s %s", method, tmpl, status)
				}
			}
		}
	}
}

// apierrFile holds every error code the signer answers with.
const apierrFile = "internal/apierr/apierr.go"

// errorCodes are the values of the Code… constants of apierr: every
// stable error code the signer can answer with.
func errorCodes(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), apierrFile, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var codes []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if !strings.HasPrefix(n.Name, "Code") || i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					v, _ := strconv.Unquote(lit.Value)
					codes = append(codes, v)
				}
			}
		}
	}
	if len(codes) == 0 {
		t.Fatal("no code constants in " + apierrFile)
	}
	return codes
}

// Every error code of the signer is in the OpenAPI document's schemas and
// in docs/api.md, and neither names a code the signer does not have.
func TestAPIDocsListEveryErrorCode(t *testing.T) {
	doc := loadAPI(t)
	codes := errorCodes(t)
	var documented []string
	for _, v := range doc.Components.Schemas["Error"].Value.Properties["error"].Value.Enum {
		documented = append(documented, v.(string))
	}
	for _, limited := range []string{"RateLimited", "ReadLimited", "DownloadRateLimited"} {
		documented = append(documented, doc.Components.Schemas[limited].Value.Properties["error"].Value.Const.(string))
	}
	slices.Sort(codes)
	slices.Sort(documented)
	if !slices.Equal(codes, documented) {
		t.Errorf("%s lists the error codes %v; %s has %v", openAPIFile, documented, apierrFile, codes)
	}

	md, err := os.ReadFile(apiDocFile)
	if err != nil {
		t.Fatal(err)
	}
	inMD := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| ([0-9]{3}) \\|").FindAllStringSubmatch(string(md), -1) {
		inMD[m[1]] = true
	}
	for _, code := range codes {
		if !inMD[code] {
			t.Errorf("%s: the table of error codes lacks %s", apiDocFile, code)
		}
		delete(inMD, code)
	}
	for code := range inMD {
		t.Errorf("%s lists the error code %s, which the signer does not have", apiDocFile, code)
	}
}
