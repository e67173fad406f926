package checks_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mintgate/mintgate/shared/events"
	"github.com/mintgate/mintgate/shared/schedule"
	"github.com/mintgate/mintgate/shared/webhook"
)

// TestNATSAuthorizationLetsTheWebhooksWork runs the webhooks' own code
// against the shipped authorization, each end as its user: the
// completer's deliverer creates its two durables, delivers a first try,
// schedules a retry that fires and delivers (its event read again from
// MINTGATE_UPLOADS), stores a delivery that failed every try and counts
// the failed ones; the signer's admin store lists it and asks the
// completer to redeliver it, which it does; the completer fires a
// schedule the server did not (the rescue). The server reports no
// permission violation. The signer can no longer write MINTGATE_WEBHOOKS:
// its publish of a due delivery and its delete of a failed record are
// refused (issue 36), and the failed record stays.
func TestNATSAuthorizationLetsTheWebhooksWork(t *testing.T) {
	s := startShippedNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	operatorStep(t, s)

	base, delivered, healed := startFlakyReceiver(t)

	secret, err := webhook.ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	cfg := webhook.Config{Retries: []time.Duration{100 * time.Millisecond, 200 * time.Millisecond}, Timeout: 5 * time.Second, AllowPrivate: true}
	nc, _ := s.connect(t, completer)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	d := webhook.NewDeliverer(js, cfg, func(tenant string) (webhook.Endpoint, bool) {
		return webhook.Endpoint{URL: base + "/" + tenant, Secret: secret}, true
	}, webhook.NewMetrics(prometheus.NewRegistry()), slog.New(slog.DiscardHandler))
	dctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { d.Run(dctx); close(done) }()
	defer func() { stop(); <-done }()
	if err := d.Ping(ctx); err != nil {
		t.Fatalf("completer's readiness check: %v; the server refused %q", err, s.violations(t))
	}

	pub, err := events.Open(ctx, js, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // the durables exist before the events
	for _, tenant := range []string{"acme", "dead"} {
		ev := events.Event{URLID: "0b9e6f0e-7f6c-4d3a-9a51-3c1f2a9d8e7" + tenant[:1], Tenant: tenant, Key: "k", Size: 1, CompletedAt: time.Now()}
		if _, err := pub.Publish(ctx, ev); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	waitFor(ctx, t, s, "the retry delivered", func() bool { return delivered.Load() == 1 })

	sn, _ := s.connect(t, signer)
	sjs, err := jetstream.New(sn)
	if err != nil {
		t.Fatal(err)
	}
	failed := webhook.NewFailed(sjs)
	var list []webhook.Delivery
	waitFor(ctx, t, s, "the dead endpoint's delivery listed as failed", func() bool {
		page, err := failed.List(ctx, "", 0)
		list = page.Failed
		return err == nil && len(list) == 1
	})
	if n, err := webhook.NewFailed(js).Count(ctx); err != nil || n != 1 {
		t.Errorf("completer counts %d failed (%v), want 1", n, err)
	}
	checkSignerCannotWrite(ctx, t, s, sjs, list[0])
	healed.Store(true)
	if _, err := failed.Redeliver(ctx, list[0].ID); err != nil {
		t.Fatalf("signer redelivers: %v; the server refused %q", err, s.violations(t))
	}
	waitFor(ctx, t, s, "the redelivery delivered", func() bool { return delivered.Load() == 2 })

	checkRescue(ctx, t, s, js, d, delivered, list[0])
	if v := without(s.violations(t), refusedSigner); len(v) > 0 {
		t.Errorf("the webhooks' own calls were refused: %q\n(add the subjects to deploy/nats/authorization.conf if the code needs them)", v)
	}
}

// waitFor polls cond until it holds, failing with the server's refusals
// when ctx ends first.
func waitFor(ctx context.Context, t *testing.T, s shippedNATS, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting: %s; the server refused %q", what, s.violations(t))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// startFlakyReceiver is an HTTP endpoint on loopback: tenant "acme"'s path
// fails its first try, "dead"'s every try until healed. It counts the
// requests it accepted.
func startFlakyReceiver(t *testing.T) (base string, delivered *atomic.Int64, healed *atomic.Bool) {
	t.Helper()
	var tries atomic.Int64
	delivered, healed = new(atomic.Int64), new(atomic.Bool)
	mux := http.NewServeMux()
	mux.HandleFunc("/acme", func(w http.ResponseWriter, r *http.Request) {
		if tries.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		delivered.Add(1)
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("/dead", func(w http.ResponseWriter, r *http.Request) {
		if !healed.Load() {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		delivered.Add(1)
		w.WriteHeader(http.StatusNoContent)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String(), delivered, healed
}

// refusedSigner are the signer's refusals checkSignerCannotWrite causes.
var refusedSigner = []string{
	"signer publish " + webhook.DueSubject("acme", "msg_forged_completed"),
	"signer publish $JS.API.STREAM.MSG.DELETE." + webhook.Stream,
}

// without is v without the entries of drop.
func without(v, drop []string) []string {
	var out []string
	for _, s := range v {
		if !slices.Contains(drop, s) {
			out = append(out, s)
		}
	}
	return out
}

// checkSignerCannotWrite: as the signer, the shipped authorization
// refuses a delivery published on a due subject (which the completer
// would send, signed with the tenant's secret) and the delete of a
// failed record, with the signer's real store and connection; the record
// stays listed.
func checkSignerCannotWrite(ctx context.Context, t *testing.T, s shippedNATS, sjs jetstream.JetStream, rec webhook.Delivery) {
	t.Helper()
	forged := rec
	forged.ID, forged.Tenant = "msg_forged_completed", "acme"
	body, err := json.Marshal(forged)
	if err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := sjs.PublishMsg(pctx, &nats.Msg{Subject: webhook.DueSubject("acme", forged.ID), Data: body}); err == nil {
		t.Error("the signer published a due delivery into " + webhook.Stream)
	}
	st, err := sjs.Stream(ctx, webhook.Stream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetLastMsgForSubject(ctx, webhook.FailedSubject(rec.Tenant, rec.ID))
	if err != nil {
		t.Fatal(err)
	}
	dctx, cancel2 := context.WithTimeout(ctx, 2*time.Second)
	defer cancel2()
	if err := st.DeleteMsg(dctx, m.Sequence); err == nil {
		t.Error("the signer deleted a failed record of " + webhook.Stream)
	}
	waitFor(ctx, t, s, "the server's refusals of the signer's writes", func() bool {
		v := s.violations(t)
		return slices.Contains(v, refusedSigner[0]) && slices.Contains(v, refusedSigner[1])
	})
	if page, err := webhook.NewFailed(sjs).List(ctx, "", 0); err != nil || len(page.Failed) != 1 {
		t.Errorf("after the signer's refused delete: %d failed listed (%v), want the 1", len(page.Failed), err)
	}
}

// checkRescue: a retry of rec's event scheduled in an hour, which a
// deliverer whose clock runs two hours ahead finds overdue; it fires it
// itself, as the completer's user, and the endpoint gets it.
func checkRescue(ctx context.Context, t *testing.T, s shippedNATS, js jetstream.JetStream, d *webhook.Deliverer, delivered *atomic.Int64, rec webhook.Delivery) {
	t.Helper()
	before := delivered.Load()
	rec.Attempts, rec.FailedAt = 1, nil
	stuck, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	msg := &nats.Msg{Subject: webhook.SchedSubject(rec.Tenant, rec.ID), Header: nats.Header{}, Data: stuck}
	msg.Header.Set(jetstream.ScheduleHeader, schedule.At(time.Now().Add(time.Hour)))
	msg.Header.Set(jetstream.ScheduleTargetHeader, webhook.DueSubject(rec.Tenant, rec.ID))
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		t.Fatalf("completer schedules a retry: %v; the server refused %q", err, s.violations(t))
	}
	if n := d.Rescue(ctx, time.Now().Add(2*time.Hour)); n != 1 {
		t.Fatalf("the rescue fired %d schedules, want 1; the server refused %q", n, s.violations(t))
	}
	waitFor(ctx, t, s, "the rescued retry delivered", func() bool { return delivered.Load() == before+1 })
}
