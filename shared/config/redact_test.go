package config_test

import (
	"strings"
	"testing"

	"github.com/mintgate/mintgate/shared/config"
)

// A URL that carries credentials is printed without them, whatever is wrong
// with it (issue 10, finding 8: start-up errors printed Redis passwords).
func TestURLErrorsNeverPrintCredentials(t *testing.T) {
	const pass = "hunter2-redis-pass"
	cases := map[string]string{
		"no colon after the scheme": "rediss//:" + pass + "@redis:6379/0",
		"wrong scheme":              "http://mintgate:" + pass + "@redis:6379/0",
		"bad port":                  "redis://mintgate:" + pass + "@redis:port/0",
		"bad database":              "redis://mintgate:" + pass + "@redis:6379/zero",
		"password only":             "redis://" + pass + "@redis:port/0",
		"escaped password":          "redis://:" + pass + "%2F%40@redis:port/0",
		"no host":                   "redis://:" + pass + "@",
	}
	for name, v := range cases {
		t.Run(name, func(t *testing.T) {
			e := env(map[string]string{"MINTGATE_REDIS_URL": v})
			e.Redis()
			err := e.Err()
			if err == nil || !strings.Contains(err.Error(), "MINTGATE_REDIS_URL") {
				t.Fatalf("%q: error %v does not name the variable", v, err)
			}
			if strings.Contains(err.Error(), pass) || strings.Contains(err.Error(), "hunter2") {
				t.Errorf("the error prints the password: %v", err)
			}
		})
	}
	e := env(map[string]string{"MINTGATE_JWT_JWKS_URL": "ftp://idp:" + pass + "@idp.example/jwks"})
	e.URL("MINTGATE_JWT_JWKS_URL", "", "https")
	if err := e.Err(); err == nil || strings.Contains(err.Error(), pass) {
		t.Errorf("JWKS URL: %v", err)
	}
}

func TestRedactURL(t *testing.T) {
	cases := map[string]string{
		"redis://:pw@redis:6379/0":            "redis://redacted@redis:6379/0",
		"rediss://user:pw@redis:6379/0":       "rediss://redacted@redis:6379/0",
		"rediss//:pw@redis:6379/0":            "rediss//redacted@redis:6379/0",
		":pw@redis:6379":                      "redacted@redis:6379",
		"nats://a:pw@n1:4222,nats://b:q@n2":   "nats://redacted@n1:4222,nats://redacted@n2",
		"redis://redis:6379/0":                "redis://redis:6379/0",
		"https://idp.example/jwks":            "https://idp.example/jwks",
		"nats://u:p@ss/w@rd@n1:4222":          "nats://redacted@n1:4222",
		"tls://token@nats.mintgate-data:4222": "tls://redacted@nats.mintgate-data:4222",
	}
	for in, want := range cases {
		if got := config.RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// Every secret variable is read through Env.Secret: its value never
// appears in a configuration error, even when another message (a
// library's error, say) happens to quote it.
func TestSecretsNeverPrinted(t *testing.T) {
	for _, name := range []string{
		"MINTGATE_JWT_HS256_SECRET",
		"MINTGATE_IP_HASH_SECRET",
		"MINTGATE_GRANT_SECRET",
		"MINTGATE_GRANT_SECRET_PREVIOUS",
		"MINTGATE_ADMIN_TOKEN",
		"AWS_SECRET_ACCESS_KEY",
		"AWS_SESSION_TOKEN",
	} {
		t.Run(name, func(t *testing.T) {
			const secret = "s3cr3t-value-that-must-not-leak"
			e := env(map[string]string{name: secret})
			if got := string(e.Secret(name)); got != secret {
				t.Fatalf("Secret(%s) = %q", name, got)
			}
			e.Fail(name, "%q is too weak", secret)
			e.Fail("MINTGATE_OTHER", "a library said: parse %q: bad", "x"+secret+"y")
			err := e.Err()
			if err == nil || !strings.Contains(err.Error(), name) {
				t.Fatalf("error %v does not name %s", err, name)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("the error prints the secret: %v", err)
			}
		})
	}
	// The SDK's variables are read by Env.AWS.
	e := env(map[string]string{"AWS_SECRET_ACCESS_KEY": "aws-secret-access-key-value"})
	e.AWS()
	e.Fail("AWS_REGION", "quoting %s", "aws-secret-access-key-value")
	if err := e.Err(); err == nil || strings.Contains(err.Error(), "aws-secret-access-key-value") {
		t.Errorf("AWS secret: %v", err)
	}
}
