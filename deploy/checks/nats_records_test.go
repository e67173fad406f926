package checks_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mintgate/mintgate/shared/events"
	"github.com/mintgate/mintgate/shared/ledger"
	"github.com/mintgate/mintgate/shared/records"
	"github.com/mintgate/mintgate/shared/testenv"
)

// TestNATSAuthorizationLetsTheRecordsWork runs the upload records' code,
// each part as its own user, against the shipped authorization: the
// sweeper's feed opens its durables on both streams and writes the rows of
// the signer's grants, the completer's verdicts, the sweeper's refunds and
// the signer's aborts and tallies; the server reports no violation. Then
// what the others must not do: the completer and the signer publish no
// refund, the completer opens no records durable.
func TestNATSAuthorizationLetsTheRecordsWork(t *testing.T) {
	s := startShippedNATS(t)
	operatorStep(t, s)
	pg := testenv.StartPostgres(t)
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if _, err := records.Migrate(ctx, pg.URL(""), quiet); err != nil {
		t.Fatal(err)
	}
	db, err := records.Open(ctx, pg.UserURL("mintgate_service"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	as := func(service string) jetstream.JetStream {
		nc, _ := s.connect(t, service)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return js
	}
	feedCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		(&records.Feed{Store: db, JS: as(sweeper), Secrets: [][]byte{[]byte(testenv.GrantSecret)}, Log: quiet}).Run(feedCtx)
	}()
	t.Cleanup(func() { stop(); <-done })

	led := dialLedger(t, s, signer)
	ids := map[string]string{}
	for _, end := range []string{records.Completed, records.Refunded, records.Aborted} {
		id := uuid.NewString()
		ids[end] = id
		now := time.Now()
		if err := led.Record(ctx, ledger.Grant{URLID: id, Tenant: "acme", Tier: "user", Subject: "u:alice", Key: "incoming/acme/" + id,
			IssuedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	key := func(id string) string { return "incoming/acme/" + id }
	if _, err := events.New(as(completer)).Publish(ctx, events.Event{URLID: ids[records.Completed], Tenant: "acme", Key: key(ids[records.Completed]), Size: 3, CompletedAt: time.Now()}); err != nil {
		t.Fatalf("completer: %v", err)
	}
	if _, err := events.New(as(sweeper)).PublishRefunded(ctx, events.Ended{URLID: ids[records.Refunded], Tenant: "acme", Key: key(ids[records.Refunded]), At: time.Now()}); err != nil {
		t.Fatalf("sweeper's refunded event: %v; the server refused %q", err, s.violations(t))
	}
	signerEvents := events.New(as(signer))
	if _, err := signerEvents.PublishAborted(ctx, events.Ended{URLID: ids[records.Aborted], Tenant: "acme", Key: key(ids[records.Aborted]), At: time.Now()}); err != nil {
		t.Fatalf("signer's aborted event: %v; the server refused %q", err, s.violations(t))
	}
	minute := time.Now().UTC().Truncate(time.Minute)
	tally := records.Tally{ID: "s1/" + minute.Format(time.RFC3339), Signer: "s1", Minute: minute, Tenants: map[string]records.Tick{"acme": {Signs: 3}}}
	if _, err := signerEvents.PublishTally(ctx, "s1", tally.ID, tally); err != nil {
		t.Fatalf("signer's tally: %v; the server refused %q", err, s.violations(t))
	}
	for want, id := range ids {
		deadline := time.Now().Add(10 * time.Second)
		for {
			got, _ := db.QueryValue(ctx, "SELECT status FROM mintgate.uploads WHERE url_id = $1", id)
			if got == want {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("row %s reads %q, want %s; the server refused %q", id, got, want, s.violations(t))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if v, _ := db.QueryValue(ctx, "SELECT signs FROM mintgate.tenant_minutes WHERE tenant = 'acme'"); v != "3" {
		t.Errorf("tally: signs %q, want 3", v)
	}
	if v := s.violations(t); len(v) > 0 {
		t.Errorf("the server refused %q", v)
	}

	// What the others may not do.
	short, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if _, err := events.New(as(completer)).PublishRefunded(short, events.Ended{URLID: uuid.NewString(), Tenant: "acme"}); err == nil {
		t.Error("the completer published a refunded event")
	}
	if _, err := signerEvents.PublishRefunded(short, events.Ended{URLID: uuid.NewString(), Tenant: "acme"}); err == nil {
		t.Error("the signer published a refunded event")
	}
	if _, err := as(completer).CreateOrUpdateConsumer(short, events.Stream, jetstream.ConsumerConfig{Durable: records.Durable, FilterSubjects: []string{events.RefundedPrefix + ">"}}); err == nil {
		t.Error("the completer opened the records durable")
	}
}
