package main

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mintgate/mintgate/shared/testenv"
	"github.com/mintgate/mintgate/shared/webhook"
)

// checkFailedWebhooks stores a failed delivery as the completer does, then
// lists it and redelivers it through the admin routes, checking each
// answer against the document; a second redelivery is 404. It returns the
// routes' paths (the caller checks their 503 with NATS down).
func checkFailedWebhooks(t *testing.T, c *apiCheck, ops *signer, natsURL string, admin map[string]string) (failedPath, redeliver string) {
	t.Helper()
	const id = "msg_7c9e6679-7425-40de-944b-e07fc1f90ae7_completed"
	_, js := testenv.JetStream(t, natsURL)
	at := time.Now().UTC().Truncate(time.Second)
	rec, err := json.Marshal(webhook.Delivery{ID: id, Tenant: "acme", Type: webhook.TypeCompleted, Timestamp: at,
		Event: json.RawMessage(`{"urlId":"7c9e6679-7425-40de-944b-e07fc1f90ae7","tenant":"acme"}`), Attempts: 7,
		URL: "https://hooks.example/mintgate", LastStatus: 503, LastError: "answered 503: down", FailedAt: &at})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: webhook.FailedSubject("acme", id), Data: rec}); err != nil {
		t.Fatal(err)
	}
	failedPath, redeliver = "/admin/webhooks/failed", "/admin/webhooks/failed/"+id+"/redeliver"
	list := c.expect(http.StatusOK, http.MethodGet, failedPath, ops.do(http.MethodGet, failedPath, admin, ""))
	var got struct{ Failed []webhook.Delivery }
	if err := json.Unmarshal(list.raw, &got); err != nil || len(got.Failed) != 1 || got.Failed[0].ID != id || got.Failed[0].Attempts != 7 {
		t.Errorf("GET %s: %s (%v), want the one failed delivery", failedPath, list.raw, err)
	}
	c.expect(http.StatusUnauthorized, http.MethodGet, failedPath, ops.do(http.MethodGet, failedPath, nil, ""))
	c.expect(http.StatusUnauthorized, http.MethodPost, redeliver, ops.do(http.MethodPost, redeliver, nil, ""))
	c.expect(http.StatusAccepted, http.MethodPost, redeliver, ops.do(http.MethodPost, redeliver, admin, ""))
	c.expect(http.StatusNotFound, http.MethodPost, redeliver, ops.do(http.MethodPost, redeliver, admin, ""))
	list = c.expect(http.StatusOK, http.MethodGet, failedPath, ops.do(http.MethodGet, failedPath, admin, ""))
	if err := json.Unmarshal(list.raw, &got); err != nil || len(got.Failed) != 0 {
		t.Errorf("after the redelivery: %s, want none failed", list.raw)
	}
	// Due again, from its first try, with the same id.
	s, err := js.Stream(ctx, webhook.Stream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctx, webhook.DueSubject("acme", id))
	var due webhook.Delivery
	if err != nil || json.Unmarshal(m.Data, &due) != nil || due.ID != id || due.Attempts != 0 {
		t.Errorf("the redelivery's due message: %v %+v", err, due)
	}
	return failedPath, redeliver
}
