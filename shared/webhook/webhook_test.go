package webhook

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mintgate/mintgate/shared/config"
)

// The Standard Webhooks specification's own example: its secret, id,
// timestamp and payload give this signature in every reference library.
func TestSignMatchesTheSpecification(t *testing.T) {
	s, err := ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(1614265330, 0)
	body := []byte(`{"test": 2432232314}`)
	const want = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	if got := s.Sign("msg_p5jXN8AQM9LWM0D4loKWxJek", at, body); got != want {
		t.Errorf("Sign = %s, want %s", got, want)
	}
	if !s.Verify("msg_p5jXN8AQM9LWM0D4loKWxJek", at, body, "v1,bm9ldHU= "+want) {
		t.Error("Verify refuses its own signature among others")
	}
	if s.Verify("msg_p5jXN8AQM9LWM0D4loKWxJek", at.Add(time.Second), body, want) {
		t.Error("Verify accepts another timestamp")
	}
	if strings.Contains(s.String(), "MfKQ") {
		t.Errorf("String shows the key: %s", s)
	}
}

func TestParseSecretRefuses(t *testing.T) {
	for _, bad := range []string{"", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_", "whsec_not base64!", "whsec_c2hvcnQ="} {
		if _, err := ParseSecret(bad); !errors.Is(err, ErrBadSecret) {
			t.Errorf("ParseSecret(%q) = %v, want ErrBadSecret", bad, err)
		}
	}
}

// Bad variables are named, and the secret never printed.
func TestReadNamesBadVariables(t *testing.T) {
	const secret = "whsec_bm90LWJhc2U2NCEhIQ$$$$$$$$$$$$"
	vars := map[string]string{
		"MINTGATE_WEBHOOK_URL":     "http://hooks.example/in",
		"MINTGATE_WEBHOOK_SECRET":  secret,
		"MINTGATE_WEBHOOK_RETRIES": "5s,soon",
		"MINTGATE_WEBHOOK_TIMEOUT": "-1s",
	}
	e := config.New(func(k string) string { return vars[k] })
	Read(e)
	err := e.Err()
	for _, name := range []string{"MINTGATE_WEBHOOK_URL", "MINTGATE_WEBHOOK_SECRET", "MINTGATE_WEBHOOK_RETRIES", "MINTGATE_WEBHOOK_TIMEOUT"} {
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("error %v does not name %s", err, name)
		}
	}
	if err != nil && strings.Contains(err.Error(), "bm90LWJhc2U2") {
		t.Errorf("the error prints the secret: %v", err)
	}
	vars = map[string]string{"MINTGATE_WEBHOOK_URL": "http://127.0.0.1:9/in", "MINTGATE_WEBHOOK_ALLOW_PRIVATE": "true",
		"MINTGATE_WEBHOOK_SECRET": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}
	e = config.New(func(k string) string { return vars[k] })
	c := Read(e)
	if err := e.Err(); err != nil || len(c.Retries) != 6 || c.Timeout != DefaultTimeout {
		t.Errorf("with the flag: %+v %v, want http allowed and the defaults (six retries, 10s)", c, err)
	}
}

func TestPublic(t *testing.T) {
	for addr, want := range map[string]bool{
		"93.184.215.14": true, "2606:4700::6810:84e5": true,
		"127.0.0.1": false, "10.1.2.3": false, "172.16.0.1": false, "192.168.1.1": false, "169.254.169.254": false,
		"100.64.0.1": false, "0.0.0.0": false, "::1": false, "fe80::1": false, "fd00::1": false,
		"::ffff:127.0.0.1": false, "::ffff:10.0.0.1": false, "::169.254.169.254": false, "::127.0.0.1": false, "fec0::1": false, "64:ff9b::a00:1": false, "224.0.0.1": false, "255.255.255.255": false,
		// IPv4-translated (SIIT) and NAT64: each embeds an IPv4 address,
		// a public one too, which a translator reaches for the caller.
		"::ffff:0:7f00:1": false, "::ffff:0:a9fe:a9fe": false, "::ffff:0:5db8:d70e": false,
		"64:ff9b::7f00:1": false, "64:ff9b::a9fe:a9fe": false, "64:ff9b::5db8:d70e": false, "64:ff9b:1::a00:1": false,
	} {
		if got := Public(netip.MustParseAddr(addr)); got != want {
			t.Errorf("Public(%s) = %v, want %v", addr, got, want)
		}
	}
}

// A private address is refused where the connection is made, after the
// name was resolved: "localhost" and 127.0.0.1 alike, over https; the
// receiver never sees a request. With MINTGATE_WEBHOOK_ALLOW_PRIVATE the
// same receiver over http gets it.
func TestPrivateAddressRefusedAtConnect(t *testing.T) {
	var got atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	secret, _ := ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	ctx := context.Background()
	strict := newPoster(2*time.Second, false)
	for _, host := range []string{"127.0.0.1", "localhost"} {
		tr := strict.post(ctx, Endpoint{URL: "https://" + net.JoinHostPort(host, port) + "/in", Secret: secret}, "msg_1", time.Now(), []byte(`{}`))
		if tr.delivered() || !errors.Is(tr.Err, ErrPrivateAddress) {
			t.Errorf("%s without the flag: %+v, want ErrPrivateAddress", host, tr)
		}
	}
	if got.Load() != 0 {
		t.Fatalf("the receiver got %d requests through the guard", got.Load())
	}
	if err := CheckURL(srv.URL, false); err == nil {
		t.Error("CheckURL accepts http without the flag")
	}
	open := newPoster(2*time.Second, true)
	if tr := open.post(ctx, Endpoint{URL: srv.URL + "/in", Secret: secret}, "msg_1", time.Now(), []byte(`{}`)); !tr.delivered() || got.Load() != 1 {
		t.Errorf("with the flag: %+v, %d requests; want delivered", tr, got.Load())
	}
}

// No redirect is followed: a 3xx is a failed try, and its target never
// sees the request. Only so much of an answer is read.
func TestNoRedirectAndBoundedAnswer(t *testing.T) {
	var target atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/moved":
			http.Redirect(w, r, "/target", http.StatusTemporaryRedirect)
		case "/target":
			target.Add(1)
		default:
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(strings.Repeat("x", 1<<20)))
		}
	}))
	defer srv.Close()
	secret, _ := ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	p := newPoster(2*time.Second, true)
	if tr := p.post(context.Background(), Endpoint{URL: srv.URL + "/moved", Secret: secret}, "msg_1", time.Now(), nil); tr.delivered() || tr.Status != http.StatusTemporaryRedirect || target.Load() != 0 {
		t.Errorf("a redirect: %+v, target hit %d times", tr, target.Load())
	}
	tr := p.post(context.Background(), Endpoint{URL: srv.URL + "/big", Secret: secret}, "msg_1", time.Now(), nil)
	if tr.delivered() || tr.Status != 500 || len(tr.Err.Error()) > 400 {
		t.Errorf("a big error page: status %d, error of %d bytes", tr.Status, len(tr.Err.Error()))
	}
}

// An endpoint's URL is logged, stored with a failed delivery and listed
// without its credentials, query or fragment, where receivers keep their
// own secrets.
func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://hooks.example/in":                          "https://hooks.example/in",
		"https://user:pass@hooks.example/in?code=s3cret#f":  "https://redacted@hooks.example/in?redacted#redacted",
		"https://hooks.example/api/hook?token=abc&tenant=x": "https://hooks.example/api/hook?redacted",
		// Not a URL Go parses (a bad escape): the query goes all the same.
		"https://hooks.example.com/in%zz?token=abc":   "https://hooks.example.com/in%zz?redacted",
		"https://u:pass@hooks.example/in%zz#code=abc": "https://redacted@hooks.example/in%zz#redacted",
		"https://hooks.example/in#frag?token=abc":     "https://hooks.example/in#redacted",
		"https://hooks.example/%zz?a=s3cret#b=s3cret": "https://hooks.example/%zz?redacted#redacted",
	} {
		got := RedactURL(in)
		if strings.Contains(got, "s3cret") || strings.Contains(got, "pass") || strings.Contains(got, "abc") {
			t.Errorf("RedactURL(%q) = %q: a secret is left", in, got)
		}
		if got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}
