package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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
	return e.publish(t, "acme")
}

// publish publishes a completed event of tenant as the completer does,
// and returns its webhook-id.
func (e *eventStream) publish(t *testing.T, tenant string) string {
	t.Helper()
	id := uuid.NewString()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := events.New(e.js).Publish(ctx, events.Event{URLID: id, Tenant: tenant, Key: "incoming/" + tenant + "/" + id, Size: 5, CompletedAt: time.Now().UTC()}); err != nil {
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
			page, err := webhook.NewFailed(es.js).List(context.Background(), "", 0)
			failed = page.Failed
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

// TestWebhookSlowEndpointBlocksNoOtherTenant: a tenant whose endpoint
// answers in 3 s, with a backlog of 40 events, holds at most 8 tries at
// once; another tenant's event, published after that backlog, is
// delivered at once all the same.
func TestWebhookSlowEndpointBlocksNoOtherTenant(t *testing.T) {
	slow := testenv.StartWebhookReceiver(t, testenv.WebhookReceiverOptions{Secret: testSecret, Delay: 3 * time.Second})
	fast := testenv.StartWebhookReceiver(t, testenv.WebhookReceiverOptions{Secret: testSecret})
	file := filepath.Join(t.TempDir(), "tenant-tiers.json")
	if err := os.WriteFile(file, []byte(fmt.Sprintf(`{"slow":{"webhook":{"url":%q,"secret":%q}}}`, slow.URL+"/slow", testSecret)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, es := hookStack(t, fast.URL+"/hooks", map[string]string{"MINTGATE_WEBHOOK_ALLOW_PRIVATE": "true",
		"MINTGATE_TENANT_TIERS_FILE": file, "MINTGATE_WEBHOOK_TIMEOUT": "10s"})
	for range 40 {
		es.publish(t, "slow")
	}
	time.Sleep(500 * time.Millisecond) // the backlog is taken first
	start := time.Now()
	id := es.publish(t, "acme")
	eventually(t, "the other tenant's event delivered", func() bool {
		for _, d := range fast.Deliveries(t) {
			if d.ID == id && d.Verified {
				return true
			}
		}
		return false
	})
	// Before the slow endpoint's backlog (five rounds of 3 s) drained: by
	// order, not by a clock, so a busy machine cannot fail it.
	if n := len(slow.Deliveries(t)); n >= 40 {
		t.Errorf("the other tenant's event was delivered only after the slow endpoint's %d tries", n)
	}
	// The slow endpoint has its 8 tries in flight, and no more until one
	// of them is answered (3 s after it was sent).
	eventually(t, "8 tries at the slow endpoint", func() bool { return len(slow.Deliveries(t)) >= 8 })
	if n, since := len(slow.Deliveries(t)), time.Since(start); n > 8 && since < 2500*time.Millisecond {
		t.Errorf("the slow endpoint got %d requests within %v, before its first answer; want at most 8 at once", n, since)
	}
}

// TestWebhookStreamMissingKeepsTheCompleterUnready: with webhooks on and
// no MINTGATE_WEBHOOKS (the operator step has not run since the upgrade),
// /readyz names webhooks; once the step has run the completer is ready
// and the events published meanwhile are delivered.
func TestWebhookStreamMissingKeepsTheCompleterUnready(t *testing.T) {
	r := testenv.StartWebhookReceiver(t, testenv.WebhookReceiverOptions{Secret: testSecret})
	srv := testenv.StartNATS(t)
	_, js := testenv.JetStream(t, srv.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := events.EnsureStream(ctx, js, 15*time.Minute, 0); err != nil { // an older operator step: no webhooks stream
		t.Fatal(err)
	}
	s := startStack(t, map[string]string{
		"MINTGATE_NATS_URL": srv.URL(), "MINTGATE_WEBHOOK_URL": r.URL + "/hooks", "MINTGATE_WEBHOOK_SECRET": testSecret,
		"MINTGATE_WEBHOOK_ALLOW_PRIVATE": "true",
	})
	es := &eventStream{nats: srv, js: js}
	time.Sleep(500 * time.Millisecond)
	if code := s.readyz(); code != 503 {
		t.Errorf("/readyz %d without the webhooks stream, want 503", code)
	}
	id := es.publish(t, "acme")
	if _, err := webhook.EnsureStream(ctx, js, 0, webhook.DefaultMaxBytes); err != nil { // the operator step
		t.Fatal(err)
	}
	eventually(t, "ready once the stream exists", func() bool { return s.readyz() == 200 })
	eventually(t, "the event published meanwhile delivered", func() bool {
		for _, d := range r.Deliveries(t) {
			if d.ID == id && d.Verified {
				return true
			}
		}
		return false
	})
}

// TestWebhookConsumerDeletedIsOpenedAgain: a durable deleted while the
// completer runs (an operator's mistake, a stream made again) is opened
// again, and the events published after it are delivered.
func TestWebhookConsumerDeletedIsOpenedAgain(t *testing.T) {
	r := testenv.StartWebhookReceiver(t, testenv.WebhookReceiverOptions{Secret: testSecret})
	_, es := hookStack(t, r.URL+"/hooks", map[string]string{"MINTGATE_WEBHOOK_ALLOW_PRIVATE": "true"})
	delivered := func(id string) func() bool {
		return func() bool {
			for _, d := range r.Deliveries(t) {
				if d.ID == id && d.Verified {
					return true
				}
			}
			return false
		}
	}
	first := es.publishCompleted(t)
	eventually(t, "the first event delivered", delivered(first))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := es.js.DeleteConsumer(ctx, events.Stream, webhook.Durable); err != nil {
		t.Fatal(err)
	}
	second := es.publishCompleted(t)
	eventually(t, "an event published after the consumer was deleted delivered", delivered(second))
}
