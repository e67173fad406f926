package main

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/mintgate/mintgate/api"
	"github.com/mintgate/mintgate/shared/testenv"
)

// Review issue 28, item 1: with MINTGATE_S3_INTERNAL_ENDPOINT set, every
// part URL named the internal endpoint (the part presigner was built from
// the services' own client), which no browser of a compose stack reaches.
// Here both endpoints are one versitygw spelled two ways: the URLs a
// browser gets — a single PUT's and each part's — name the public
// spelling and still upload; the signer's own calls (create, list,
// complete) go through the internal one.
func TestPartURLsNameThePublicEndpoint(t *testing.T) {
	v := testenv.StartVersityGW(t, "")
	internal, err := url.Parse(v.Endpoint) // http://127.0.0.1:<port>
	if err != nil {
		t.Fatal(err)
	}
	public := "localhost:" + internal.Port()
	s := startMultipartOn(t, v, map[string]string{
		"MINTGATE_S3_ENDPOINT":          "http://" + public,
		"MINTGATE_S3_INTERNAL_ENDPOINT": v.Endpoint,
	})
	alice := s.token("acme", "alice")

	single := s.sign(alice, newKey(), pngBody)
	if single.status != http.StatusCreated || hostOf(t, single.str("url")) != public {
		t.Fatalf("single PUT: %d %s, want a URL on %s", single.status, single.raw, public)
	}

	g := s.create(alice, newKey(), 12*mib)
	if g.status != http.StatusCreated {
		t.Fatalf("create: %d %s", g.status, g.raw)
	}
	id, key := g.str("urlId"), g.str("key")
	ps := signed(t, s.parts(alice, id, 1, 2, 3))
	sizes := []int64{5 * mib, 5 * mib, 2 * mib}
	var done []api.CompletedPart
	for i, p := range ps {
		if h := hostOf(t, p.URL); h != public {
			t.Errorf("part %d's URL names %s, want the public %s: %s", p.PartNumber, h, public, p.URL)
		}
		done = append(done, s.put(p, sizes[i]))
	}
	if c := s.complete(alice, id, done); c.status != http.StatusOK {
		t.Fatalf("complete: %d %s", c.status, c.raw)
	}
	if n := s.head(key); n != 12*mib {
		t.Fatalf("the object holds %d bytes, want 12 MiB", n)
	}
}

// hostOf is the host:port a URL names.
func hostOf(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil || !strings.HasPrefix(u.Scheme, "http") {
		t.Fatalf("not a URL: %q", raw)
	}
	return u.Host
}
