package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mintgate/mintgate/shared/testenv"
	"github.com/mintgate/mintgate/shared/webhook"
)

// The soak's webhooks: the completer delivers every upload event to a
// receiver (deploy/webhook-receiver, verifying with the standardwebhooks
// npm library) that answers 503 to a share of the tries, chosen by the
// soak's seed, while the faults kill and stall the completer and NATS.
// After the load drains, every completed or rejected upload must have
// been delivered at least once, verified, and nothing with a wrong
// signature nor kept as failed.
const (
	// webhookSecret signs the soak's deliveries (whsec_ + 32 bytes, base64).
	webhookSecret = "whsec_Y2hhb3Mtc29hay13ZWJob29rLXNlY3JldC0wMTIzNDU2Nzg5YQ=="
	// webhookFailShare of the tries are answered 503.
	webhookFailShare = 0.2
	// webhookRetries are short, so a delivery has ten tries within the
	// settle time: the chance that one event fails all of them is
	// webhookFailShare^10, 1e-7.
	webhookRetries = "200ms,500ms,1s,1s,2s,2s,3s,3s,5s"
	// webhookDrain bounds the wait, after the settle, for the last
	// deliveries: a completer killed with tries in flight leaves them to
	// JetStream's redelivery after the consumer's ack wait (2 ×
	// MINTGATE_WEBHOOK_TIMEOUT + 30 s).
	webhookDrain = 60 * time.Second
)

// startWebhooks starts the soak's receiver; its environment is the
// completer's webhook variables.
func startWebhooks(t *testing.T, seed uint64) (*testenv.WebhookReceiver, map[string]string) {
	t.Helper()
	r := testenv.StartWebhookReceiver(t, testenv.WebhookReceiverOptions{
		Secret: webhookSecret, FailShare: webhookFailShare, Seed: int64(seed),
	})
	return r, map[string]string{
		"MINTGATE_WEBHOOK_URL":           r.URL + "/",
		"MINTGATE_WEBHOOK_SECRET":        webhookSecret,
		"MINTGATE_WEBHOOK_ALLOW_PRIVATE": "true",
		"MINTGATE_WEBHOOK_TIMEOUT":       "2s",
		"MINTGATE_WEBHOOK_RETRIES":       webhookRetries,
	}
}

// hooked is what the receiver saw, judged against the stream's events.
type hooked struct {
	want      int      // webhook-ids of the stream's events
	delivered int      // of them, answered 204 after a verified try
	missing   []string // of them, never delivered
	tries     int      // requests the receiver got
	failed503 int      // tries it failed on purpose
	wrongSig  int      // tries it could not verify
	phantom   []string // verified deliveries of no event, or of the wrong type or urlId
	kept      int      // deliveries kept as failed in MINTGATE_WEBHOOKS
	waited    time.Duration
	err       error
}

// readWebhooks waits, up to webhookDrain, until every event of the
// stream has a delivery the receiver verified and answered 204, then
// judges what it received.
func (st *stack) readWebhooks(ctx context.Context, t *testing.T, ev map[string]*urlEvents) hooked {
	t.Helper()
	want := map[string]string{} // webhook-id → urlId
	for id, e := range ev {
		if e.completed > 0 {
			want[webhook.ID(id, webhook.TypeCompleted)] = id
		}
		if e.rejected > 0 {
			want[webhook.ID(id, webhook.TypeRejected)] = id
		}
	}
	began := time.Now()
	var h hooked
	for {
		ds := st.webhooks.Deliveries(t)
		h = judgeWebhooks(want, ds)
		if len(h.missing) == 0 || time.Since(began) > webhookDrain || ctx.Err() != nil {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	h.waited = time.Since(began)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	h.kept, h.err = webhook.NewFailed(st.js).Count(cctx)
	if len(h.missing) > 0 {
		t.Logf("%s: %d events never webhooked, e.g. %s", st.topo.name, len(h.missing), strings.Join(h.missing[:min(5, len(h.missing))], " "))
	}
	return h
}

// judgeWebhooks compares the receiver's list with want (webhook-id →
// urlId).
func judgeWebhooks(want map[string]string, ds []testenv.WebhookDelivery) hooked {
	h := hooked{want: len(want), tries: len(ds)}
	got := map[string]bool{}
	for _, d := range ds {
		switch {
		case !d.Verified:
			h.wrongSig++
			continue
		case d.Status == 503:
			h.failed503++
		}
		urlID, ok := want[d.ID]
		var data struct {
			URLID string `json:"urlId"`
		}
		_ = json.Unmarshal(d.Data, &data)
		if !ok || webhook.ID(urlID, d.Type) != d.ID || data.URLID != urlID {
			h.phantom = append(h.phantom, fmt.Sprintf("%s (%s, urlId %q)", d.ID, d.Type, data.URLID))
			continue
		}
		if d.Status == 204 {
			got[d.ID] = true
		}
	}
	h.delivered = len(got)
	for _, id := range slices.Sorted(maps.Keys(want)) {
		if !got[id] {
			h.missing = append(h.missing, id)
		}
	}
	return h
}

// checkWebhooks adds the webhook rows.
func (r *report) checkWebhooks(h hooked) {
	r.summary = append(r.summary, fmt.Sprintf("webhooks: %d tries for %d events, %d answered 503 on purpose (%.0f%%); waited %v after the settle for the last",
		h.tries, h.want, h.failed503, 100*webhookFailShare, h.waited.Round(100*time.Millisecond)))
	r.add("every upload event webhooked at least once, verified (0 undelivered after the drain)",
		fmt.Sprintf("%d of %d", h.delivered, h.want), "all", h.delivered == h.want && h.want > 0)
	r.add("no webhook with a wrong signature", fmt.Sprint(h.wrongSig), "0", h.wrongSig == 0)
	r.add("every webhook is one of the stream's events (its id, type and urlId)",
		strings.Join(append([]string{fmt.Sprint(len(h.phantom))}, h.phantom[:min(3, len(h.phantom))]...), " "), "0", len(h.phantom) == 0)
	kept := fmt.Sprint(h.kept)
	if h.err != nil {
		kept = h.err.Error()
	}
	r.add("no webhook kept as failed", kept, "0", h.err == nil && h.kept == 0)
}

// The webhook rows: a delivery counts once verified and answered 204,
// whatever the 503s and repeats before it; a wrong signature, a
// delivery of no event, an event never delivered or one kept as failed
// fail their rows.
func TestWebhookRows(t *testing.T) {
	want := map[string]string{"msg_a_completed": "a", "msg_b_rejected": "b"}
	d := func(id, typ, urlID string, verified bool, status int) testenv.WebhookDelivery {
		return testenv.WebhookDelivery{ID: id, Type: typ, Verified: verified, Status: status, Data: json.RawMessage(`{"urlId":"` + urlID + `"}`)}
	}
	a503, a204 := d("msg_a_completed", "upload.completed", "a", true, 503), d("msg_a_completed", "upload.completed", "a", true, 204)
	b204 := d("msg_b_rejected", "upload.rejected", "b", true, 204)
	for _, c := range []struct {
		name string
		ds   []testenv.WebhookDelivery
		kept int
		fail []string
	}{
		{"retried, then delivered, a repeat", []testenv.WebhookDelivery{a503, a204, b204, a204}, 0, nil},
		{"one never delivered", []testenv.WebhookDelivery{a503, a503, b204}, 1,
			[]string{"every upload event webhooked at least once, verified (0 undelivered after the drain)", "no webhook kept as failed"}},
		{"a wrong signature", []testenv.WebhookDelivery{a204, b204, d("msg_a_completed", "upload.completed", "a", false, 401)}, 0,
			[]string{"no webhook with a wrong signature"}},
		{"the wrong type", []testenv.WebhookDelivery{a204, d("msg_b_rejected", "upload.completed", "b", true, 204)}, 0,
			[]string{"every upload event webhooked at least once, verified (0 undelivered after the drain)", "every webhook is one of the stream's events (its id, type and urlId)"}},
		{"another urlId", []testenv.WebhookDelivery{a204, b204, d("msg_c_completed", "upload.completed", "c", true, 204)}, 0,
			[]string{"every webhook is one of the stream's events (its id, type and urlId)"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := judgeWebhooks(want, c.ds)
			h.kept = c.kept
			r := &report{}
			r.checkWebhooks(h)
			var failed []string
			for _, x := range r.rows {
				if !x.ok {
					failed = append(failed, x.name)
				}
			}
			if !slices.Equal(failed, c.fail) {
				t.Fatalf("failed rows %q, want %q", failed, c.fail)
			}
		})
	}
}
