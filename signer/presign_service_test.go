package main

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

// The URL a client gets signs exactly what docs/api.md promises: the host, the
// create-only condition, the exact length and the type, for 120 s, on a
// server-owned key.
func TestPresignedURLSignsTheUploadsTerms(t *testing.T) {
	s := start(t, newStack(t).env(t))
	r := s.sign(s.token("acme", "alice"), newKey(), `{"contentType":"image/png","contentLength":5}`)
	if r.status != http.StatusCreated {
		t.Fatalf("sign: %d %s", r.status, r.raw)
	}
	u, err := url.Parse(r.str("url"))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	if got := q.Get("X-Amz-SignedHeaders"); got != "content-length;content-type;host;if-none-match" {
		t.Errorf("X-Amz-SignedHeaders %q", got)
	}
	if got := q.Get("X-Amz-Expires"); got != "120" {
		t.Errorf("X-Amz-Expires %q", got)
	}
	if q.Get("X-Amz-Signature") == "" || q.Get("X-Amz-Algorithm") != "AWS4-HMAC-SHA256" ||
		!strings.Contains(q.Get("X-Amz-Credential"), "/us-east-1/s3/aws4_request") {
		t.Errorf("not a SigV4 presigned URL: %s", u)
	}
	for k := range q {
		// A checksum of an empty body signed into the URL would make every real upload fail.
		if strings.HasPrefix(strings.ToLower(k), "x-amz-checksum") || strings.HasPrefix(strings.ToLower(k), "x-amz-sdk-checksum") {
			t.Errorf("URL signs %s", k)
		}
	}
	if u.Host != "127.0.0.1:9" {
		t.Errorf("host %q: MINTGATE_S3_ENDPOINT not used", u.Host)
	}
	uuidRE := `[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}`
	if !regexp.MustCompile(`^/uploads/incoming/acme/` + uuidRE + `$`).MatchString(u.Path) {
		t.Errorf("path %q: want /<bucket>/incoming/<tenant>/<uuid v4> (path style)", u.Path)
	}
	if r.str("key") != strings.TrimPrefix(u.Path, "/uploads/") || !strings.HasSuffix(u.Path, r.str("urlId")) {
		t.Errorf("key %q, urlId %q, path %q", r.str("key"), r.str("urlId"), u.Path)
	}
	if r.str("method") != http.MethodPut {
		t.Errorf("method %q", r.str("method"))
	}
}
