package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mintgate/mintgate/shared/events"
	"github.com/mintgate/mintgate/shared/testenv"
	"github.com/mintgate/mintgate/shared/webhook"
)

const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// hookStack is a completer delivering webhooks to url, on a NATS of its
// own with the operator's streams; it returns the stream's view.
func hookStack(t *testing.T, url string, env map[string]string) (*stack, *eventStream) {
	t.Helper()
	es := startEventStream(t)
	vars := map[string]string{
		"MINTGATE_NATS_URL":        es.nats.URL(),
		"MINTGATE_WEBHOOK_URL":     url,
		"MINTGATE_WEBHOOK_SECRET":  testSecret,
		"MINTGATE_WEBHOOK_RETRIES": "100ms,100ms",
		"MINTGATE_WEBHOOK_TIMEOUT": "2s",
	}
	for k, v := range env {
		vars[k] = v
	}
	return startStack(t, vars), es
}

// publishCompleted publishes a completed event of tenant acme as the
// completer does, and returns its webhook-id.
func (e *eventStream) publishCompleted(t *testing.T) string {
	t.Helper()
	id := uuid.NewString()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := events.New(e.js).Publish(ctx, events.Event{URLID: id, Tenant: "acme", Key: "incoming/acme/" + id, Size: 5, CompletedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	return webhook.ID(id, webhook.TypeCompleted)
}

// TestWebhookPrivateAddressRefused: without MINTGATE_WEBHOOK_ALLOW_PRIVATE
// an endpoint on a loopback address is refused at connect on every try
// (the receiver never sees a request), and the delivery ends as failed,
// saying why; the completer stays ready. With the flag the same receiver
// gets it.
func TestWebhookPrivateAddressRefused(t *testing.T) {
	r := testenv.StartWebhookReceiver(t, testenv.WebhookReceiverOptions{Secret: testSecret})
	hostPort := strings.TrimPrefix(r.URL, "http://")
	t.Run("refused", func(t *testing.T) {
		s, es := hookStack(t, "https://"+hostPort+"/hooks", nil)
		id := es.publishCompleted(t)
		var failed []webhook.Delivery
		eventually(t, "the delivery failed every try", func() bool {
			var err error
			failed, err = webhook.NewFailed(es.js).List(context.Background())
			return err == nil && len(failed) == 1
		})
		if f := failed[0]; f.ID != id || f.Attempts != 3 || !strings.Contains(f.LastError, "not a public address") {
			t.Errorf("failed delivery %+v, want 3 tries refused as not public", f)
		}
		if n := len(r.Deliveries(t)); n != 0 {
			t.Errorf("the receiver got %d requests through the guard", n)
		}
		if code := s.readyz(); code != 200 {
			t.Errorf("/readyz %d with the endpoint refused, want 200", code)
		}
		eventually(t, "mintgate_webhook_failed is 1", func() bool { return s.metric(t, "mintgate_webhook_failed") == 1 })
	})
	t.Run("allowed with the flag", func(t *testing.T) {
		_, es := hookStack(t, r.URL+"/hooks", map[string]string{"MINTGATE_WEBHOOK_ALLOW_PRIVATE": "true"})
		id := es.publishCompleted(t)
		eventually(t, "the receiver got it, verified", func() bool {
			for _, d := range r.Deliveries(t) {
				if d.ID == id && d.Verified && d.Status == 204 {
					return true
				}
			}
			return false
		})
	})
}
