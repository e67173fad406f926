// Package demo is the signer's demo upload page, embedded in the binary:
// Uppy 6's Dashboard uploading through the JavaScript client's Mintgate
// plugin (api/js), a single presigned PUT up to the signer's limit and a
// multipart upload above it, then GET /uploads/{urlId} until the completer
// has verified the object; Golden Retriever and its service worker
// (dist/sw.js) resume an upload across a reload. Its script and styles are built from npm
// (web/, by deploy/local/web.sh) into static/dist before the signer is
// built; the page loads nothing from another host. It exists to show the
// flow end to end (and to drive it from a headless browser in integration
// tests); the signer mounts it only when MINTGATE_DEMO_PAGE=on.
package demo

import (
	"embed"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"strings"
)

// Path is where the signer mounts the page.
const Path = "/demo/"

// serviceWorker is Golden Retriever's service worker, under the page's
// path: it keeps picked files' bytes across a reload.
const serviceWorker = "/dist/sw.js"

//go:embed static
var static embed.FS

// bundle is the built script: a signer built before web/ was leaves it
// out, and serves notBuilt instead of the page.
const bundle = "static/dist/app.js"

// built is whether the embedded files hold the bundle; they are fixed at
// build time, so it is read once.
var built = func() bool {
	_, err := fs.Stat(static, bundle)
	return err == nil
}()

// Built reports whether the page's script was built into this binary.
func Built() bool { return built }

const notBuilt = `<!doctype html><html lang="en"><meta charset="utf-8"><title>mintgate · demo upload</title>
<p>The demo page's script was not built into this signer. Run <code>deploy/local/web.sh</code>
(<code>make up</code> does), then build the signer again.</p></html>
`

// csp keeps the page to its own scripts and styles. connect-src must allow
// any origin: the PUT goes to S3, whose origin only the signer's answer names.
const csp = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; " +
	"connect-src 'self' http: https:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// Options are the page's settings, served to its script as config.json.
type Options struct {
	// TracesURL is the base URL of a Jaeger query API holding the
	// services' traces (MINTGATE_DEMO_TRACES_URL): the page reads
	// {TracesURL}/api/traces/{traceId} to draw a completed upload's
	// timeline; "" draws none. Jaeger must allow the page's origin (CORS).
	TracesURL string `json:"tracesUrl"`
}

// configPath is where the page reads its Options.
const configPath = "/config.json"

// Handler serves the page with no Options: HandlerWith(Options{}).
func Handler() http.Handler { return HandlerWith(Options{}) }

// HandlerWith serves the page and its Options. It answers for paths under /demo/ as well as for
// paths already stripped of that prefix, so it can be mounted as is
// (echo: e.GET("/demo*", echo.WrapHandler(demo.Handler()))) or behind
// http.StripPrefix. /demo redirects to /demo/.
func HandlerWith(o Options) http.Handler {
	settings, err := json.Marshal(o)
	if err != nil {
		panic(err) // a struct of strings always marshals
	}
	files, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded folder is fixed at build time
	}
	server := http.FileServerFS(files)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		p := r.URL.Path
		if p == "/demo" || p == "" {
			target := Path
			if r.URL.RawQuery != "" {
				target += "?" + r.URL.RawQuery
			}
			http.Redirect(w, r, target, http.StatusMovedPermanently)
			return
		}
		if rest, ok := strings.CutPrefix(p, "/demo/"); ok {
			p = "/" + rest
		}
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		// The page never reads a token from its address, but a link may carry
		// one anyway (it is dropped from history): never send the address on.
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		if p == serviceWorker {
			// The worker lives in dist/ but serves the page at /demo/.
			h.Set("Service-Worker-Allowed", Path)
		}
		if p == configPath {
			h.Set("Content-Type", "application/json")
			_, _ = w.Write(settings)
			return
		}
		if !built && (p == "/" || p == "/index.html") {
			h.Set("Content-Type", "text/html; charset=utf-8")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, notBuilt)
			return
		}
		r2 := r.Clone(r.Context())
		r2.URL.Path = p
		r2.URL.RawPath = ""
		server.ServeHTTP(w, r2)
	})
}
