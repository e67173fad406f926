package request

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/mintgate/mintgate/signer/internal/apierr"
)

// pngBody is a sign body the fast path takes.
const pngBody = `{"contentType":"image/png","contentLength":5}`

var fuzzPolicy = NewPolicy(104857600, map[string]bool{"image/png": true, "application/pdf": true})

func FuzzDecodeSignRequest(f *testing.F) {
	f.Add("k", []byte(pngBody))
	f.Add("", []byte(pngBody))
	f.Add(strings.Repeat("k", 256), []byte(pngBody))
	f.Add("k", []byte(`{"contentType":"image/png","contentLength":0}`))
	f.Add("k", []byte(`{"contentType":"image/png","contentLength":"5"}`))
	f.Add("k", []byte(`{"contentType":"image/png","contentLength":5,"x":1}`))
	f.Add("k", []byte(`{}{}`))
	f.Add("k", []byte(`null`))
	f.Add("k", bytes.Repeat([]byte(" "), MaxBodyBytes+1))
	f.Fuzz(func(t *testing.T, key string, body []byte) {
		req, err := Decode(key, bytes.NewReader(body), fuzzPolicy)
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
		if len(body) > MaxBodyBytes {
			t.Fatalf("accepted a body of %d bytes", len(body))
		}
	})
}

// A 415 names the types the signer accepts, sorted, so a caller can fix
// its request without reading the configuration.
func TestUnsupportedTypeListsTheAccepted(t *testing.T) {
	_, err := Decode("k", strings.NewReader(`{"contentType":"text/html","contentLength":5}`), fuzzPolicy)
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
