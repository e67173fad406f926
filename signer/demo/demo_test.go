package demo_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mintgate/mintgate/signer/demo"
)

// TestHandler needs the page built (deploy/local/web.sh; make test runs it).
func TestHandler(t *testing.T) {
	if !demo.Built() {
		t.Fatal("the demo page's script is not built: run deploy/local/web.sh")
	}
	h := demo.Handler()
	tests := []struct {
		name, method, path string
		status             int
		contentType        string // prefix
		body               string // substring
		location           string
	}{
		{"page", "GET", "/demo/", 200, "text/html", `id="dashboard"`, ""},
		{"page without prefix", "GET", "/", 200, "text/html", `id="uploads"`, ""},
		{"script", "GET", "/demo/dist/app.js", 200, "text/javascript", "/uploads/multipart", ""},
		{"Uppy's styles", "GET", "/demo/dist/app.css", 200, "text/css", ".uppy-Dashboard", ""},
		{"style", "GET", "/demo/style.css", 200, "text/css", "#uploads", ""},
		{"head", "HEAD", "/demo/dist/app.js", 200, "text/javascript", "", ""},
		{"bare prefix keeps the query", "GET", "/demo?tenant=acme", 301, "", "", "/demo/?tenant=acme"},
		{"missing", "GET", "/demo/nope.js", 404, "", "", ""},
		{"post", "POST", "/demo/", 405, "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, nil))
			res := rec.Result()
			body, _ := io.ReadAll(res.Body)
			if res.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", res.StatusCode, tt.status, body)
			}
			if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, tt.contentType) {
				t.Errorf("Content-Type %q, want %q…", ct, tt.contentType)
			}
			if !strings.Contains(string(body), tt.body) {
				t.Errorf("body lacks %q", tt.body)
			}
			if loc := res.Header.Get("Location"); loc != tt.location {
				t.Errorf("Location %q, want %q", loc, tt.location)
			}
			if tt.status == http.StatusOK {
				if res.Header.Get("Content-Security-Policy") == "" || res.Header.Get("Referrer-Policy") != "no-referrer" {
					t.Errorf("security headers missing: %v", res.Header)
				}
			}
		})
	}
}

// TestServiceWorker: Golden Retriever's worker is served from dist/ for
// the page's whole path, so a reload finds the picked files' bytes.
func TestServiceWorker(t *testing.T) {
	if !demo.Built() {
		t.Fatal("the demo page's script is not built: run deploy/local/web.sh")
	}
	rec := httptest.NewRecorder()
	demo.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/demo/dist/sw.js", nil))
	res := rec.Result()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/javascript") {
		t.Fatalf("sw.js: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	if !strings.Contains(string(body), "uppy/GET_FILES") {
		t.Errorf("sw.js is not Golden Retriever's worker")
	}
	if got := res.Header.Get("Service-Worker-Allowed"); got != demo.Path {
		t.Errorf("Service-Worker-Allowed %q, want %q", got, demo.Path)
	}
}

// TestConfig: the page reads its traces URL from config.json; none is "".
func TestConfig(t *testing.T) {
	for _, tc := range []struct {
		opts demo.Options
		want string
	}{
		{demo.Options{}, `{"tracesUrl":""}`},
		{demo.Options{TracesURL: "http://127.0.0.1:16686"}, `{"tracesUrl":"http://127.0.0.1:16686"}`},
	} {
		rec := httptest.NewRecorder()
		demo.HandlerWith(tc.opts).ServeHTTP(rec, httptest.NewRequest("GET", "/demo/config.json", nil))
		if rec.Code != 200 || rec.Body.String() != tc.want || rec.Header().Get("Content-Type") != "application/json" {
			t.Errorf("config.json with %+v: %d %q (%s), want %s", tc.opts, rec.Code, rec.Body, rec.Header().Get("Content-Type"), tc.want)
		}
	}
}
