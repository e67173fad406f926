package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mintgate/mintgate/shared/events"
	"github.com/mintgate/mintgate/shared/ledger"
	"github.com/mintgate/mintgate/shared/testenv"
	"github.com/mintgate/mintgate/shared/webhook"
)

// TestRunCreatesThenKeepsTheStreams: the operator step creates the three
// streams shaped by the services' variables, a second run changes
// nothing, and a ledger then opens on them.
func TestRunCreatesThenKeepsTheStreams(t *testing.T) {
	srv := testenv.StartNATS(t)
	vars := map[string]string{
		"MINTGATE_NATS_URL":       srv.URL(),
		"MINTGATE_SWEEP_GRACE":    "30s",
		"MINTGATE_DONE_TTL":       "20m",
		"MINTGATE_LEDGER_MAX_AGE": "240h",
	}
	getenv := func(k string) string { return vars[k] }
	for range 2 {
		var out testenv.Buffer
		if err := run(context.Background(), []string{"streams"}, getenv, &out); err != nil {
			t.Fatalf("run: %v\n%s", err, out.String())
		}
	}
	_, js := testenv.JetStream(t, srv.URL())
	ctx := context.Background()
	g, err := js.Stream(ctx, ledger.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	if c := g.CachedInfo().Config; !c.AllowMsgSchedules || c.MaxAge != 240*time.Hour || c.Replicas != 1 {
		t.Errorf("ledger stream %+v", c)
	}
	u, err := js.Stream(ctx, events.Stream)
	if err != nil {
		t.Fatal(err)
	}
	if d := u.CachedInfo().Config.Duplicates; d != 20*time.Minute {
		t.Errorf("events window %v, want MINTGATE_DONE_TTL's 20m", d)
	}
	// Without MINTGATE_LEDGER_MAX_AGE a later run keeps the 240h.
	delete(vars, "MINTGATE_LEDGER_MAX_AGE")
	if err := run(ctx, []string{"streams"}, getenv, &testenv.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if g, _ = js.Stream(ctx, ledger.DefaultStream); g.CachedInfo().Config.MaxAge != 240*time.Hour {
		t.Errorf("max age %v after a run without MINTGATE_LEDGER_MAX_AGE, want the stream's 240h", g.CachedInfo().Config.MaxAge)
	}
	short, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := ledger.Open(short, js, ledger.Config{Grace: 30 * time.Second, Secret: []byte(testenv.GrantSecret)}); err != nil {
		t.Errorf("a service's Open after the operator step: %v", err)
	}
	if _, err := events.Open(short, js, 20*time.Minute); err != nil {
		t.Errorf("the completer's Open after the operator step: %v", err)
	}
	if _, err := webhook.StreamInfo(short, js); err != nil {
		t.Errorf("the webhooks' stream after the operator step: %v", err)
	}
}

// TestRunRefusesAMaxAgeThatDropsGrants names the variable.
func TestRunRefusesAMaxAgeThatDropsGrants(t *testing.T) {
	vars := map[string]string{"MINTGATE_LEDGER_MAX_AGE": "1h", "MINTGATE_STREAM_REPLICAS": "7"}
	err := run(context.Background(), []string{"streams"}, func(k string) string { return vars[k] }, &testenv.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "MINTGATE_LEDGER_MAX_AGE") || !strings.Contains(err.Error(), "MINTGATE_STREAM_REPLICAS") {
		t.Fatalf("run: %v; want both variables named", err)
	}
}

// TestRunBoundsTheWebhooksStream: the operator step bounds
// MINTGATE_WEBHOOKS to 1 GiB by default, or to
// MINTGATE_WEBHOOK_STREAM_MAX_BYTES, with new messages refused at the
// bound; a stream made by an older step (no bound) is updated in place.
func TestRunBoundsTheWebhooksStream(t *testing.T) {
	srv := testenv.StartNATS(t)
	_, js := testenv.JetStream(t, srv.URL())
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, webhook.StreamConfig(1, -1)); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"MINTGATE_NATS_URL": srv.URL()}
	getenv := func(k string) string { return vars[k] }
	for _, c := range []struct {
		set  string
		want int64
	}{{"", 1 << 30}, {"1048576", 1 << 20}} {
		vars["MINTGATE_WEBHOOK_STREAM_MAX_BYTES"] = c.set
		if err := run(ctx, []string{"streams"}, getenv, &testenv.Buffer{}); err != nil {
			t.Fatal(err)
		}
		s, err := js.Stream(ctx, webhook.Stream)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.CachedInfo().Config; got.MaxBytes != c.want {
			t.Errorf("MINTGATE_WEBHOOK_STREAM_MAX_BYTES=%q: max bytes %d, want %d", c.set, got.MaxBytes, c.want)
		}
	}
	vars["MINTGATE_WEBHOOK_STREAM_MAX_BYTES"] = "1000"
	if err := run(ctx, []string{"streams"}, getenv, &testenv.Buffer{}); err == nil || !strings.Contains(err.Error(), "MINTGATE_WEBHOOK_STREAM_MAX_BYTES") {
		t.Errorf("a bound of 1000 bytes: %v, want the variable named", err)
	}
}

// TestRunAppliesTheRecordsSchema: with MINTGATE_POSTGRES_URL the operator
// step migrates the records' schema and grants the services' role its
// rows, twice without harm; the role can then write a row.
func TestRunAppliesTheRecordsSchema(t *testing.T) {
	srv := testenv.StartNATS(t)
	pg := testenv.StartPostgres(t)
	vars := map[string]string{"MINTGATE_NATS_URL": srv.URL(), "MINTGATE_POSTGRES_URL": pg.URL("")}
	for range 2 {
		var out testenv.Buffer
		if err := run(context.Background(), []string{"streams"}, func(k string) string { return vars[k] }, &out); err != nil {
			t.Fatalf("run: %v\n%s", err, out.String())
		}
		if !strings.Contains(out.String(), "upload records schema ready") {
			t.Fatalf("no schema line:\n%s", out.String())
		}
	}
	if got := pg.SQL(t, "SELECT has_table_privilege('mintgate_service', 'mintgate.uploads', 'INSERT')"); got != "t" {
		t.Fatalf("the services' role may insert rows: %s", got)
	}
}
