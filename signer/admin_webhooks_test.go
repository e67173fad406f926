package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mintgate/mintgate/shared/events"
	"github.com/mintgate/mintgate/shared/testenv"
	"github.com/mintgate/mintgate/shared/webhook"
)

// checkFailedWebhooks stores two failed deliveries as the completer does
// (each naming its event in MINTGATE_UPLOADS), then pages through them
// and redelivers one through the admin routes, a completer's deliverer
// answering the request, checking each answer against the document; a
// second redelivery is 404. It returns the routes' paths (the caller
// checks their 503 with NATS down).
func checkFailedWebhooks(t *testing.T, c *apiCheck, ops *signer, natsURL string, admin map[string]string) (failedPath, redeliver string) {
	t.Helper()
	_, js := testenv.JetStream(t, natsURL)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	startDeliverer(ctx, t, js)
	const id = "msg_7c9e6679-7425-40de-944b-e07fc1f90ae7_completed"
	storeFailed(ctx, t, js, "7c9e6679-7425-40de-944b-e07fc1f90ae7")
	storeFailed(ctx, t, js, "0b9e6f0e-7f6c-4d3a-9a51-3c1f2a9d8e70")
	failedPath, redeliver = "/admin/webhooks/failed", "/admin/webhooks/failed/"+id+"/redeliver"
	type page struct {
		Failed []webhook.Delivery
		Next   *string
	}
	var got page
	first := c.expect(http.StatusOK, http.MethodGet, failedPath, ops.do(http.MethodGet, failedPath+"?limit=1", admin, ""))
	if err := json.Unmarshal(first.raw, &got); err != nil || len(got.Failed) != 1 || got.Failed[0].ID != id || got.Failed[0].Attempts != 7 || got.Next == nil {
		t.Fatalf("GET %s?limit=1: %s (%v), want the oldest failed delivery and a next page", failedPath, first.raw, err)
	}
	second := c.expect(http.StatusOK, http.MethodGet, failedPath, ops.do(http.MethodGet, failedPath+"?limit=1&cursor="+*got.Next, admin, ""))
	got = page{}
	if err := json.Unmarshal(second.raw, &got); err != nil || len(got.Failed) != 1 || got.Failed[0].ID == id || got.Next != nil {
		t.Errorf("the next page: %s (%v), want the other delivery and no next", second.raw, err)
	}
	for _, bad := range []string{"?cursor=x", "?cursor=0", "?limit=0", "?limit=1001"} {
		c.expect(http.StatusBadRequest, http.MethodGet, failedPath, ops.do(http.MethodGet, failedPath+bad, admin, ""))
	}
	c.expect(http.StatusUnauthorized, http.MethodGet, failedPath, ops.do(http.MethodGet, failedPath, nil, ""))
	c.expect(http.StatusUnauthorized, http.MethodPost, redeliver, ops.do(http.MethodPost, redeliver, nil, ""))
	c.expect(http.StatusAccepted, http.MethodPost, redeliver, ops.do(http.MethodPost, redeliver, admin, ""))
	c.expect(http.StatusNotFound, http.MethodPost, redeliver, ops.do(http.MethodPost, redeliver, admin, ""))
	all := c.expect(http.StatusOK, http.MethodGet, failedPath, ops.do(http.MethodGet, failedPath, admin, ""))
	got = page{}
	if err := json.Unmarshal(all.raw, &got); err != nil || len(got.Failed) != 1 || got.Failed[0].ID == id {
		t.Errorf("after the redelivery: %s, want the other one failed", all.raw)
	}
	// Due again, from its first try, with the same id, by the completer.
	s, err := js.Stream(ctx, webhook.Stream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctx, webhook.DueSubject("acme", id))
	var due webhook.Delivery
	if err != nil || json.Unmarshal(m.Data, &due) != nil || due.ID != id || due.Attempts != 0 || due.EventSeq == 0 {
		t.Errorf("the redelivery's due message: %v %+v", err, due)
	}
	return failedPath, redeliver
}

// startDeliverer runs a completer's deliverer on js until ctx ends: it
// answers the redelivery requests (tenant acme has no endpoint: nothing
// is sent).
func startDeliverer(ctx context.Context, t *testing.T, js jetstream.JetStream) {
	t.Helper()
	d := webhook.NewDeliverer(js, webhook.Config{Retries: []time.Duration{time.Second}, Timeout: time.Second},
		func(string) (webhook.Endpoint, bool) { return webhook.Endpoint{}, false },
		webhook.NewMetrics(prometheus.NewRegistry()), slog.New(slog.DiscardHandler))
	done := make(chan struct{})
	dctx, stop := context.WithCancel(ctx)
	go func() { d.Run(dctx); close(done) }()
	t.Cleanup(func() { stop(); <-done })
}

// storeFailed publishes urlID's completed event of tenant acme, and its
// delivery as failed after 7 tries, as the completer does.
func storeFailed(ctx context.Context, t *testing.T, js jetstream.JetStream, urlID string) {
	t.Helper()
	at := time.Now().UTC().Truncate(time.Second)
	ev := events.Event{URLID: urlID, Tenant: "acme", Key: "incoming/acme/" + urlID, Size: 1, CompletedAt: at}
	if _, err := events.New(js).Publish(ctx, ev); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, events.Stream)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := st.GetLastMsgForSubject(ctx, events.Subject("acme"))
	if err != nil {
		t.Fatal(err)
	}
	id := webhook.ID(urlID, webhook.TypeCompleted)
	rec, err := json.Marshal(webhook.Delivery{ID: id, Tenant: "acme", Type: webhook.TypeCompleted, Timestamp: at,
		Event: stored.Data, EventSeq: stored.Sequence, Attempts: 7,
		URL: "https://hooks.example/mintgate", LastStatus: 503, LastError: "answered 503: down", FailedAt: &at})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: webhook.FailedSubject("acme", id), Data: rec}); err != nil {
		t.Fatal(err)
	}
}
