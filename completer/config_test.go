package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mintgate/mintgate/shared/service"
	"github.com/mintgate/mintgate/shared/tiers"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestConfigDefaults(t *testing.T) {
	c, err := loadConfig(env(map[string]string{"MINTGATE_SQS_QUEUE_URL": "https://sqs.eu-west-1.amazonaws.com/123456789012/uploads", "MINTGATE_S3_BUCKET": "uploads"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTPAddr != ":8081" || c.DoneTTL != 15*time.Minute || c.URLTTL != 120*time.Second ||
		c.Grace != 30*time.Second || c.Visibility != 0 || c.Redis.Timeout != 150*time.Millisecond || c.Events {
		t.Fatalf("defaults %+v", c)
	}
}

func TestConfigBadValuesNameTheVariable(t *testing.T) {
	base := map[string]string{"MINTGATE_SQS_QUEUE_URL": "http://127.0.0.1:4566/000000000000/uploads", "MINTGATE_S3_BUCKET": "uploads"}
	cases := []struct{ name, value string }{
		{"MINTGATE_S3_BUCKET", ""}, // required: which bucket's records count
		{"MINTGATE_SQS_QUEUE_URL", ""},
		{"MINTGATE_SQS_QUEUE_URL", "uploads"},
		{"MINTGATE_SQS_ENDPOINT", "localhost:4566"},
		{"MINTGATE_SQS_VISIBILITY_TIMEOUT", "1500ms"},
		{"MINTGATE_SQS_VISIBILITY_TIMEOUT", "13h"},
		{"MINTGATE_SQS_VISIBILITY_TIMEOUT", "soon"},
		{"MINTGATE_DONE_TTL", "0s"},
		{"MINTGATE_URL_TTL", "2"},
		{"MINTGATE_SWEEP_GRACE", "-30s"},
		{"MINTGATE_REDIS_URL", "http://127.0.0.1:6379"},
		{"MINTGATE_REDIS_TIMEOUT", "fast"},
		{"AWS_ACCESS_KEY_ID", "AKIDONLY"},
		{"MINTGATE_NATS_URL", "localhost:4222"},
		// Webhooks: a bad secret refuses the start; http only with the flag;
		// a URL needs the events stream (NATS).
		{"MINTGATE_WEBHOOK_SECRET", "whsec_tooshort"},
		{"MINTGATE_WEBHOOK_SECRET", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"},
		{"MINTGATE_WEBHOOK_URL", "http://hooks.example/in"},
		{"MINTGATE_WEBHOOK_URL", "https://hooks.example/in"},
		{"MINTGATE_WEBHOOK_RETRIES", "5s,later"},
		{"MINTGATE_WEBHOOK_TIMEOUT", "0s"},
		{"MINTGATE_WEBHOOK_ALLOW_PRIVATE", "maybe"},
	}
	for _, c := range cases {
		vars := map[string]string{}
		for k, v := range base {
			vars[k] = v
		}
		vars[c.name] = c.value
		if _, err := loadConfig(env(vars)); err == nil || !strings.Contains(err.Error(), c.name) {
			t.Errorf("%s=%q: error %v does not name it", c.name, c.value, err)
		}
	}
}

// TestEventsOnlyWithNATSURL: events are on exactly when MINTGATE_NATS_URL
// is set, and the start-up line shows the server without its password.
func TestEventsOnlyWithNATSURL(t *testing.T) {
	c, err := loadConfig(env(map[string]string{"MINTGATE_SQS_QUEUE_URL": "https://sqs.eu-west-1.amazonaws.com/123456789012/uploads",
		"MINTGATE_S3_BUCKET": "uploads", "MINTGATE_NATS_URL": "tls://completer:s3cret@nats:4222", "MINTGATE_NATS_CREDS": "/run/secrets/nats"}))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Events || c.NATS.URL != "tls://completer:s3cret@nats:4222" || c.NATS.Creds != "/run/secrets/nats" {
		t.Errorf("events %v, nats %+v", c.Events, c.NATS)
	}
	if s := c.String(); strings.Contains(s, "s3cret") || !strings.Contains(s, "events=tls://") {
		t.Errorf("start-up line %q", s)
	}
}

// TestDoneTTLMustOutliveTheSweep: a done marker that expires before the
// sweeper looks at the grant would refund a completed upload.
func TestDoneTTLMustOutliveTheSweep(t *testing.T) {
	cases := []struct {
		vars map[string]string
		ok   bool
	}{
		{map[string]string{"MINTGATE_DONE_TTL": "5m"}, true}, // 2 × (120 s + 30 s)
		{map[string]string{"MINTGATE_DONE_TTL": "4m59s"}, false},
		{map[string]string{"MINTGATE_DONE_TTL": "150s"}, false},
		{map[string]string{"MINTGATE_URL_TTL": "10m"}, false}, // 15 min default < 2 × 10.5 min
		{map[string]string{"MINTGATE_URL_TTL": "10m", "MINTGATE_DONE_TTL": "1h"}, true},
		{map[string]string{"MINTGATE_SWEEP_GRACE": "8m"}, false},
	}
	for _, c := range cases {
		c.vars["MINTGATE_SQS_QUEUE_URL"] = "http://127.0.0.1:4566/000000000000/uploads"
		c.vars["MINTGATE_S3_BUCKET"] = "uploads"
		_, err := loadConfig(env(c.vars))
		if c.ok && err != nil {
			t.Errorf("%v refused: %v", c.vars, err)
		}
		if !c.ok && (err == nil || !strings.Contains(err.Error(), "MINTGATE_DONE_TTL")) {
			t.Errorf("%v: error %v does not name MINTGATE_DONE_TTL", c.vars, err)
		}
	}
}

// TestRunRefusesBadConfig: run stops before it starts anything.
func TestRunRefusesBadConfig(t *testing.T) {
	var out bytes.Buffer
	err := run(context.Background(), []string{"completer"}, env(map[string]string{
		"MINTGATE_SQS_QUEUE_URL": "http://127.0.0.1:1/000000000000/uploads",
		"MINTGATE_DONE_TTL":      "1m",
	}), &out)
	if err == nil || !strings.Contains(err.Error(), "MINTGATE_DONE_TTL") {
		t.Fatalf("run = %v", err)
	}
	if err := run(context.Background(), []string{"completer", "-receivers", "0"}, env(nil), &out); err == nil {
		t.Fatal("-receivers 0 accepted")
	}
}

func TestUploadKeys(t *testing.T) {
	const id = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
	cases := []struct{ key, tenant, reason string }{
		{"incoming/acme/" + id, "acme", ""},
		{"incoming/Acme_co-2/" + id, "Acme_co-2", ""},
		{"incoming/acme/my photo+1.jpg", "", ignoredURLID},
		{"incoming/acme/" + strings.ToUpper(id), "", ignoredURLID},
		{"incoming/acme/{" + id + "}", "", ignoredURLID},
		{"incoming/acme/urn:uuid:" + id, "", ignoredURLID},
		{"incoming/acme/" + strings.ReplaceAll(id, "-", ""), "", ignoredURLID},
		{"incoming/acme/" + id + "/x", "", ignoredURLID},
		{"incoming/acme/", "", ignoredURLID},
		{"incoming/ac:me/" + id, "", ignoredTenant},
		{"incoming/{t:acme}/" + id, "", ignoredTenant},
		{"incoming//" + id, "", ignoredTenant},
		{"incoming/" + id, "", ignoredTenant},
		{"incoming/" + strings.Repeat("a", 65) + "/" + id, "", ignoredTenant},
		{"uploads/acme/" + id, "", ignoredOutside},
		{"/incoming/acme/" + id, "", ignoredOutside},
		{"Incoming/acme/" + id, "", ignoredOutside},
		{"HappyFace.jpg", "", ignoredOutside},
	}
	for _, c := range cases {
		tenant, urlID, reason := upload(c.key)
		if reason != c.reason || tenant != c.tenant || (reason == "" && urlID != id) {
			t.Errorf("upload(%q) = %q, %q, %q; want tenant %q reason %q", c.key, tenant, urlID, reason, c.tenant, c.reason)
		}
	}
}

// TestReceiversFromFlagOrEnvironment: MINTGATE_SQS_RECEIVERS sets how many
// long polls run; the -receivers flag of operators' scripts still works
// and wins when both are given; a bad value of either is refused, naming it.
func TestReceiversFromFlagOrEnvironment(t *testing.T) {
	base := map[string]string{"MINTGATE_SQS_QUEUE_URL": "http://127.0.0.1:4566/000000000000/uploads", "MINTGATE_S3_BUCKET": "uploads"}
	cases := []struct {
		env   string
		args  []string
		want  int
		wrong string // what the error names; "" for accepted
	}{
		{"", nil, 4, ""},
		{"7", nil, 7, ""},
		{"", []string{"-receivers", "2"}, 2, ""},
		{"7", []string{"-receivers", "2"}, 2, ""},
		{"7", []string{"-receivers=9"}, 9, ""},
		{"0", nil, 0, "MINTGATE_SQS_RECEIVERS"},
		{"many", nil, 0, "MINTGATE_SQS_RECEIVERS"},
		{"", []string{"-receivers", "0"}, 0, "-receivers"},
		{"7", []string{"-receivers", "x"}, 0, "-receivers"},
	}
	for _, tc := range cases {
		vars := map[string]string{"MINTGATE_SQS_RECEIVERS": tc.env}
		for k, v := range base {
			vars[k] = v
		}
		// As run does: the flags first, then the environment under them.
		var out bytes.Buffer
		n := 0
		err := service.Flags("completer", append([]string{"completer"}, tc.args...), &out, receiversFlag(&n))
		var c cfg
		if err == nil {
			c, err = configure(env(vars), n)
		}
		switch {
		case tc.wrong == "" && err != nil:
			t.Errorf("env %q, args %q: %v", tc.env, tc.args, err)
		case tc.wrong == "" && c.Receivers != tc.want:
			t.Errorf("env %q, args %q: %d receivers, want %d", tc.env, tc.args, c.Receivers, tc.want)
		case tc.wrong != "" && (err == nil || !strings.Contains(err.Error(), tc.wrong)):
			t.Errorf("env %q, args %q: error %v; want one naming %s", tc.env, tc.args, err, tc.wrong)
		}
	}
}

// The completer reads its listen address and MINTGATE_NATS_URL as the
// other services do: host:port only, and ws:// or wss:// NATS URLs taken.
func TestListenAddressAndNATSURLs(t *testing.T) {
	cases := []struct {
		name, value string
		ok          bool
	}{
		{"MINTGATE_HTTP_ADDR", "8081", false},
		{"MINTGATE_HTTP_ADDR", "0.0.0.0:8081", true},
		{"MINTGATE_NATS_URL", "wss://nats.example:443", true},
		{"MINTGATE_NATS_URL", "ws://127.0.0.1:8080,nats://127.0.0.1:4222", true},
	}
	for _, tc := range cases {
		_, err := loadConfig(env(map[string]string{"MINTGATE_SQS_QUEUE_URL": "http://127.0.0.1:4566/000000000000/uploads",
			"MINTGATE_S3_BUCKET": "uploads", tc.name: tc.value}))
		if tc.ok && err != nil {
			t.Errorf("%s=%q refused: %v", tc.name, tc.value, err)
		}
		if !tc.ok && (err == nil || !strings.Contains(err.Error(), tc.name)) {
			t.Errorf("%s=%q: error %v does not name it", tc.name, tc.value, err)
		}
	}
}

// TestRunNeverLogsABadWebhookURLsQuery: a webhook URL that does not parse
// (a bad escape) stops the start, named without its query, where a
// receiver keeps its own secret (the third review's finding 5: it was
// printed whole). Its tenant-file form is refused the same way.
func TestRunNeverLogsABadWebhookURLsQuery(t *testing.T) {
	const leak = "tok3n-s3cret"
	_, err := tiers.ParseWebhooks([]byte(`{"acme":{"webhook":{"url":"https://hooks.example.com/in%zz?token=` + leak + `","secret":"` + testSecret + `"}}}`))
	if err == nil || strings.Contains(err.Error(), leak) || !strings.Contains(err.Error(), "hooks.example.com/in%zz") {
		t.Errorf("the tenant tiers file's URL: %v, want it named without its query", err)
	}
	for _, vars := range []map[string]string{
		{"MINTGATE_WEBHOOK_URL": "https://hooks.example.com/in%zz?token=" + leak, "MINTGATE_WEBHOOK_SECRET": testSecret},
		{"MINTGATE_WEBHOOK_URL": "https://hooks.example.com/in%zz#code=" + leak, "MINTGATE_WEBHOOK_SECRET": testSecret},
	} {
		vars["MINTGATE_NATS_URL"] = "nats://127.0.0.1:1"
		var out bytes.Buffer
		err := run(context.Background(), []string{"completer"}, env(vars), &out)
		if err == nil {
			t.Fatalf("%v: started", vars)
		}
		if strings.Contains(err.Error()+out.String(), leak) || !strings.Contains(err.Error(), "hooks.example.com/in%zz") {
			t.Errorf("%v: %v\n%s\nwant the URL named without its query or fragment", vars, err, out.String())
		}
	}
}
