package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/mintgate/mintgate/shared/testenv"
	"github.com/mintgate/mintgate/signer/internal/identity"
)

// No configuration error prints a secret: not a password in a Redis or
// NATS URL (issue 10, finding 8: `MINTGATE_REDIS_URL: "rediss//:hunter2…@redis:6379/0"
// is not a redis or rediss URL`), not a secret variable's value. Each case
// also breaks another variable, so the secret would have company in a long
// message; the variables the signer does not read yet (the grant MAC key,
// the admin token) must not leak either.
func TestConfigErrorsNeverPrintSecrets(t *testing.T) {
	const secret = "hunter2-secret-value"
	cases := []struct {
		name, variable string // the variable the error must name; "" for none
		set            map[string]string
	}{
		{"redis URL typo", "MINTGATE_REDIS_URL", map[string]string{"MINTGATE_REDIS_URL": "rediss//:" + secret + "@redis:6379/0"}},
		{"redis URL bad port", "MINTGATE_REDIS_URL", map[string]string{"MINTGATE_REDIS_URL": "rediss://mintgate:" + secret + "@redis:port/0"}},
		{"redis URL bad db", "MINTGATE_REDIS_URL", map[string]string{"MINTGATE_REDIS_URL": "rediss://mintgate:" + secret + "@redis:6379/x"}},
		{"nats URL", "MINTGATE_NATS_URL", map[string]string{"MINTGATE_NATS_URL": "tls://signer:" + secret + "@nats-0:4222,http://signer:" + secret + "@nats-1"}},
		{"nats token", "MINTGATE_NATS_URL", map[string]string{"MINTGATE_NATS_URL": "nats//" + secret + "@nats-0:4222"}},
		{"jwks URL", "MINTGATE_JWT_JWKS_URL", map[string]string{"MINTGATE_JWT_HS256_SECRET": "", "MINTGATE_JWT_JWKS_URL": "ftp://idp:" + secret + "@idp.example/jwks"}},
		{"short jwt secret", "MINTGATE_JWT_HS256_SECRET", map[string]string{"MINTGATE_JWT_HS256_SECRET": secret}},
		{"short ip hash secret", "MINTGATE_IP_HASH_SECRET", map[string]string{"MINTGATE_ANON_TENANTS": "pub", "MINTGATE_IP_HASH_SECRET": secret[:12]}},
		{"aws secret without key", "AWS_ACCESS_KEY_ID", map[string]string{"AWS_SECRET_ACCESS_KEY": secret}},
		{"grant secret", "", map[string]string{"MINTGATE_GRANT_SECRET": secret}},
		{"admin token", "", map[string]string{"MINTGATE_ADMIN_TOKEN": secret}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{
				"MINTGATE_S3_BUCKET":        "uploads",
				"MINTGATE_S3_REGION":        "us-east-1",
				"MINTGATE_JWT_HS256_SECRET": testSecret,
				"MINTGATE_URL_TTL":          "never", // the company
			}
			for k, v := range tc.set {
				env[k] = v
			}
			err := run(context.Background(), []string{"signer"}, mapEnv(env), io.Discard)
			if err == nil || !strings.Contains(err.Error(), "MINTGATE_URL_TTL") || !strings.Contains(err.Error(), tc.variable) {
				t.Fatalf("run: %v; want an error naming MINTGATE_URL_TTL and %s", err, tc.variable)
			}
			if strings.Contains(err.Error(), secret[:12]) {
				t.Errorf("the error prints the secret: %v", err)
			}
		})
	}
}

// JWKS mode trusts whatever keys the URL serves and, at a shared identity
// provider, every app's tokens carry tenant_id: the keys must come over
// TLS (a loopback URL excepted, for tests and sidecars) and tokens must be
// minted for us (issue 10, finding 9).
func TestJWKSModeNeedsHTTPSAndAudience(t *testing.T) {
	cases := []struct {
		name, url, audience string
		variable            string // the variable the error names; "" for accepted
	}{
		{"https with audience", "https://idp.example/.well-known/jwks.json", testAudience, ""},
		{"loopback http", "http://127.0.0.1:8000/jwks", testAudience, ""},
		{"loopback http by name", "http://localhost:8000/jwks", testAudience, ""},
		{"loopback IPv6", "http://[::1]:8000/jwks", testAudience, ""},
		{"plain http", "http://idp.example/.well-known/jwks.json", testAudience, "MINTGATE_JWT_JWKS_URL"},
		{"http to a name that only starts like localhost", "http://localhost.idp.example/jwks", testAudience, "MINTGATE_JWT_JWKS_URL"},
		{"no audience", "https://idp.example/.well-known/jwks.json", "", "MINTGATE_JWT_AUDIENCE"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadConfig(mapEnv(map[string]string{
				"MINTGATE_S3_BUCKET":    "uploads",
				"MINTGATE_JWT_JWKS_URL": tc.url,
				"MINTGATE_JWT_AUDIENCE": tc.audience,
				"MINTGATE_GRANT_SECRET": testenv.GrantSecret,
			}))
			switch {
			case tc.variable == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.variable != "" && (err == nil || !strings.Contains(err.Error(), tc.variable)):
				t.Fatalf("error %v; want one naming %s", err, tc.variable)
			}
		})
	}
}

// startWarnings is the signer's configuration of env with set on top of
// it, and what the signer warns about at start with it.
func startWarnings(t *testing.T, env, set map[string]string) (cfg, *bytes.Buffer) {
	t.Helper()
	for k, v := range set {
		env[k] = v
	}
	c, err := loadConfig(mapEnv(env))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	warnRisky(slog.New(slog.NewJSONHandler(&out, nil)), c)
	return c, &out
}

// The warning about anonymous callers read by their socket address fires
// when MINTGATE_IP_SOURCE was left to its default, not when an operator set
// remote on purpose (clients connecting directly, as on the local stack).
func TestRemoteIPWarningOnlyWhenDefaulted(t *testing.T) {
	cases := []struct {
		name string
		set  map[string]string
		warn bool
	}{
		{"defaulted, anonymous tenants", map[string]string{}, true},
		{"explicit remote, anonymous tenants", map[string]string{"MINTGATE_IP_SOURCE": "remote"}, false},
		{"defaulted, no anonymous tenants", map[string]string{"MINTGATE_ANON_TENANTS": ""}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{
				"MINTGATE_S3_BUCKET":        "uploads",
				"MINTGATE_GRANT_SECRET":     testenv.GrantSecret,
				"MINTGATE_JWT_HS256_SECRET": "a-jwt-secret-of-at-least-32-bytes!!",
				"MINTGATE_ANON_TENANTS":     "demo",
				"MINTGATE_IP_HASH_SECRET":   "an-ip-hash-secret-of-32-bytes!!!",
			}
			_, out := startWarnings(t, env, tc.set)
			if got := strings.Contains(out.String(), "MINTGATE_IP_SOURCE=remote"); got != tc.warn {
				t.Errorf("warned %v, want %v:\n%s", got, tc.warn, out.String())
			}
		})
	}
}

// HS256 shares its key with the token issuer, which may sign tokens for
// other services with it: without an audience the signer says so loudly at
// start, and once the audience is set, a token the same key signed for
// another audience is refused.
func TestHS256WithoutAudienceWarns(t *testing.T) {
	const secret = "a-jwt-secret-of-at-least-32-bytes!!"
	cases := []struct {
		name             string
		set              map[string]string
		warnAud, warnIss bool
		otherAudienceOK  bool // a token for aud "billing" is accepted
	}{
		{"neither", map[string]string{}, true, true, true},
		{"audience only", map[string]string{"MINTGATE_JWT_AUDIENCE": "mintgate"}, false, true, false},
		{"both", map[string]string{"MINTGATE_JWT_AUDIENCE": "mintgate", "MINTGATE_JWT_ISSUER": "https://id.example"}, false, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{
				"MINTGATE_S3_BUCKET":        "uploads",
				"MINTGATE_GRANT_SECRET":     testenv.GrantSecret,
				"MINTGATE_JWT_HS256_SECRET": secret,
			}
			c, out := startWarnings(t, env, tc.set)
			if got := strings.Contains(out.String(), "without MINTGATE_JWT_AUDIENCE"); got != tc.warnAud {
				t.Errorf("audience warning %v, want %v:\n%s", got, tc.warnAud, out.String())
			}
			if got := strings.Contains(out.String(), "without MINTGATE_JWT_ISSUER"); got != tc.warnIss {
				t.Errorf("issuer warning %v, want %v:\n%s", got, tc.warnIss, out.String())
			}
			if tc.warnAud && !strings.Contains(out.String(), `"level":"WARN"`) {
				t.Errorf("not a warning:\n%s", out.String())
			}

			id, err := identity.New(context.Background(), c.Config, time.Now)
			if err != nil {
				t.Fatal(err)
			}
			tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
				"sub": "alice", "tenant_id": "acme", "aud": "billing", "iss": "https://id.example",
				"exp": time.Now().Add(time.Minute).Unix(),
			}).SignedString([]byte(secret))
			if err != nil {
				t.Fatal(err)
			}
			r := httptest.NewRequest(http.MethodGet, "/uploads/quota", nil)
			r.Header.Set("Authorization", "Bearer "+tok)
			_, aerr := id.Authenticate(r)
			if got := aerr == nil; got != tc.otherAudienceOK {
				t.Errorf("token for another audience accepted %v, want %v (%v)", got, tc.otherAudienceOK, aerr)
			}
		})
	}
}

// Trusting a private range as wide as a cluster's pods lets any pod there
// spoof X-Forwarded-For: the signer says so at start, naming the range.
func TestWideTrustedProxiesWarn(t *testing.T) {
	for proxies, warn := range map[string]bool{
		"10.0.0.0/8":              true,
		"10.42.7.0/24,10.0.0.0/8": true,
		"10.42.7.0/24,10.42.9.17": false,
	} {
		c, err := loadConfig(mapEnv(map[string]string{
			"MINTGATE_S3_BUCKET":        "uploads",
			"MINTGATE_GRANT_SECRET":     testenv.GrantSecret,
			"MINTGATE_JWT_HS256_SECRET": "a-jwt-secret-of-at-least-32-bytes!!",
			"MINTGATE_JWT_AUDIENCE":     "mintgate",
			"MINTGATE_JWT_ISSUER":       "https://id.example",
			"MINTGATE_IP_SOURCE":        "xff",
			"MINTGATE_TRUSTED_PROXIES":  proxies,
		}))
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		warnRisky(slog.New(slog.NewJSONHandler(&out, nil)), c)
		got := strings.Contains(out.String(), "wide private range") && strings.Contains(out.String(), `"range":"10.0.0.0/8"`)
		if got != warn {
			t.Errorf("%s: warned %v, want %v:\n%s", proxies, got, warn, out.String())
		}
	}
}

// Every service reads its listen addresses and MINTGATE_NATS_URL through
// shared/config, so they agree: a port without host:port is refused at
// start, naming the variable, and ws:// and wss:// NATS URLs are taken.
func TestListenAddressesAndNATSURLs(t *testing.T) {
	cases := []struct {
		set      map[string]string
		variable string // the variable the error names; "" for accepted
	}{
		{map[string]string{"MINTGATE_HTTP_ADDR": "8080"}, "MINTGATE_HTTP_ADDR"},
		{map[string]string{"MINTGATE_HTTP_ADDR": "127.0.0.1:"}, "MINTGATE_HTTP_ADDR"},
		{map[string]string{"MINTGATE_OPS_ADDR": "9080"}, "MINTGATE_OPS_ADDR"},
		{map[string]string{"MINTGATE_HTTP_ADDR": "127.0.0.1:8080", "MINTGATE_OPS_ADDR": "[::1]:9080"}, ""},
		{map[string]string{"MINTGATE_NATS_URL": "wss://nats.example:443,ws://127.0.0.1:8080"}, ""},
		{map[string]string{"MINTGATE_NATS_URL": "http://nats.example:4222"}, "MINTGATE_NATS_URL"},
	}
	for _, tc := range cases {
		env := map[string]string{
			"MINTGATE_S3_BUCKET":        "uploads",
			"MINTGATE_GRANT_SECRET":     testenv.GrantSecret,
			"MINTGATE_JWT_HS256_SECRET": testSecret,
		}
		for k, v := range tc.set {
			env[k] = v
		}
		_, err := loadConfig(mapEnv(env))
		switch {
		case tc.variable == "" && err != nil:
			t.Errorf("%v refused: %v", tc.set, err)
		case tc.variable != "" && (err == nil || !strings.Contains(err.Error(), tc.variable)):
			t.Errorf("%v: error %v; want one naming %s", tc.set, err, tc.variable)
		}
	}
}
