package checks_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mintgate/mintgate/shared/events"
	"github.com/mintgate/mintgate/shared/webhook"
)

// TestNATSForgedDeliveryAsTheSignerIsNeverPosted is the third review's
// finding 3 on the shipped authorization: as the signer's user, a
// delivery made by hand (an upload.completed naming a quarantined key)
// published on tenant acme's due subject, by a JetStream publish and by a
// plain one, is refused by the server and never reaches the receiver;
// the completer's genuine event after it is delivered, the only request
// the receiver sees. Before issue 36 the signer could publish it, and the
// receiver got it signed with acme's secret.
func TestNATSForgedDeliveryAsTheSignerIsNeverPosted(t *testing.T) {
	s := startShippedNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	operatorStep(t, s)
	url, ids := startRecordingReceiver(t)

	secret, err := webhook.ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	nc, _ := s.connect(t, completer)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	d := webhook.NewDeliverer(js, webhook.Config{Retries: []time.Duration{time.Second}, Timeout: 5 * time.Second, AllowPrivate: true},
		func(string) (webhook.Endpoint, bool) { return webhook.Endpoint{URL: url, Secret: secret}, true },
		webhook.NewMetrics(prometheus.NewRegistry()), slog.New(slog.DiscardHandler))
	dctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { d.Run(dctx); close(done) }()
	defer func() { stop(); <-done }()
	pub, err := events.Open(ctx, js, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // the durables exist

	const forgedID = "msg_0b9e6f0e-7f6c-4d3a-9a51-3c1f2a9d8e70_completed"
	forged, err := json.Marshal(webhook.Delivery{ID: forgedID, Tenant: "acme", Type: webhook.TypeCompleted, Timestamp: time.Now(),
		Event: json.RawMessage(`{"urlId":"0b9e6f0e-7f6c-4d3a-9a51-3c1f2a9d8e70","tenant":"acme","key":"quarantine/acme/eicar","size":68}`), EventSeq: 1})
	if err != nil {
		t.Fatal(err)
	}
	sn, _ := s.connect(t, signer)
	sjs, err := jetstream.New(sn)
	if err != nil {
		t.Fatal(err)
	}
	subject := webhook.DueSubject("acme", forgedID)
	pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
	if _, err := sjs.PublishMsg(pctx, &nats.Msg{Subject: subject, Data: forged}); err == nil {
		t.Error("the signer's JetStream publish of a due delivery was stored")
	}
	pcancel()
	if err := sn.Publish(subject, forged); err != nil {
		t.Fatal(err)
	}
	_ = sn.Flush()
	waitFor(ctx, t, s, "the server's refusal of the signer's due publish", func() bool {
		return slices.Contains(s.violations(t), "signer publish "+subject)
	})

	genuine := events.Event{URLID: "7c9e6679-7425-40de-944b-e07fc1f90ae7", Tenant: "acme", Key: "incoming/acme/7c9e6679-7425-40de-944b-e07fc1f90ae7", Size: 1, CompletedAt: time.Now()}
	if _, err := pub.Publish(ctx, genuine); err != nil {
		t.Fatal(err)
	}
	want := webhook.ID(genuine.URLID, webhook.TypeCompleted)
	waitFor(ctx, t, s, "the genuine event delivered", func() bool { return slices.Contains(ids(), want) })
	time.Sleep(time.Second) // a forged delivery stored would have gone by now
	if got := ids(); !slices.Equal(got, []string{want}) {
		t.Errorf("the receiver got %q, want only the completer's %s", got, want)
	}
	st, err := js.Stream(ctx, webhook.Stream)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := st.GetLastMsgForSubject(ctx, subject); err == nil {
		t.Errorf("the forged delivery is stored at %d", m.Sequence)
	}
}

// startRecordingReceiver is an HTTP endpoint on loopback that accepts
// every request and records its webhook-id.
func startRecordingReceiver(t *testing.T) (url string, ids func() []string) {
	t.Helper()
	var mu sync.Mutex
	var got []string
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get(webhook.HeaderID))
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String() + "/hook", func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
}
