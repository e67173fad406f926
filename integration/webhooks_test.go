package integration

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mintgate/mintgate/shared/events"
	"github.com/mintgate/mintgate/shared/testenv"
	"github.com/mintgate/mintgate/shared/webhook"
)

// Webhooks on the whole stack: real uploads through the signer, S3 and the
// completer, delivered to deploy/webhook-receiver, which verifies every
// request with the standardwebhooks npm library (not mintgate's code).

// webhookRetries is a short MINTGATE_WEBHOOK_RETRIES: four tries within
// about two seconds.
const webhookRetries = "200ms,500ms,1s"

// newSecret is a fresh whsec_ secret of 32 random bytes.
func newSecret(t *testing.T) string {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "whsec_" + base64.StdEncoding.EncodeToString(b)
}

// hookEnv is the webhook variables of a stack delivering to url.
func hookEnv(url, secret string) map[string]string {
	return map[string]string{
		"MINTGATE_WEBHOOK_URL":           url,
		"MINTGATE_WEBHOOK_SECRET":        secret,
		"MINTGATE_WEBHOOK_RETRIES":       webhookRetries,
		"MINTGATE_WEBHOOK_TIMEOUT":       "2s",
		"MINTGATE_WEBHOOK_ALLOW_PRIVATE": "true",
	}
}

// upload signs and PUTs one object as tenant's user and waits until it
// reads completed; it returns the urlId.
func (s *stack) upload(t *testing.T, tenant string) string {
	t.Helper()
	tok := s.token(t, tenant, "hooks")
	body := []byte("\x89PNG\r\n\x1a\n-webhook")
	g := s.mustSign(t, tok, len(body))
	if code := put(t, g, body); code != http.StatusOK {
		t.Fatalf("PUT %s: %d", g.Key, code)
	}
	s.waitStatus(t, tok, g.URLID, "completed", 30*time.Second)
	return g.URLID
}

// triesOf is the receiver's requests of one webhook-id, oldest first.
func triesOf(t *testing.T, r *testenv.WebhookReceiver, id string) []testenv.WebhookDelivery {
	t.Helper()
	var out []testenv.WebhookDelivery
	for _, d := range r.Deliveries(t) {
		if d.ID == id {
			out = append(out, d)
		}
	}
	return out
}

// waitDelivered waits until the receiver accepted (verified, 2xx) a
// request of id, and returns all its requests.
func waitDelivered(t *testing.T, r *testenv.WebhookReceiver, id string, within time.Duration) []testenv.WebhookDelivery {
	t.Helper()
	var tries []testenv.WebhookDelivery
	eventually(t, within, "webhook "+id+" delivered and verified", func() bool {
		tries = triesOf(t, r, id)
		for _, d := range tries {
			if d.Verified && d.Status/100 == 2 {
				return true
			}
		}
		return false
	})
	for _, d := range tries {
		if !d.Verified {
			t.Errorf("webhook %s: a request the standardwebhooks library refused: %+v", id, d)
		}
	}
	return tries
}

// TestWebhookRetriedThenDelivered: an upload's completed event reaches the
// endpoint signed as Standard Webhooks says; the receiver's two 503s are
// retried, every try carrying the same webhook-id and body. A rejected
// event is delivered as upload.rejected.
func TestWebhookRetriedThenDelivered(t *testing.T) {
	secret := newSecret(t)
	r := testenv.StartWebhookReceiver(t, testenv.WebhookReceiverOptions{Secret: secret, FailFirst: 2})
	s := newStack(t, stackOptions{Extra: hookEnv(r.URL+"/hooks", secret)})
	id := s.upload(t, "acme")
	hook := "msg_" + id + "_completed"
	tries := waitDelivered(t, r, hook, 30*time.Second)
	if len(tries) != 3 || tries[0].Status != 503 || tries[1].Status != 503 || tries[2].Status/100 != 2 {
		t.Fatalf("tries of %s: %+v, want 503, 503, then 2xx", hook, tries)
	}
	var ev events.Event
	if err := json.Unmarshal(tries[2].Data, &ev); err != nil || ev.URLID != id || ev.Tenant != "acme" || ev.Key != "incoming/acme/"+id {
		t.Errorf("data %s (%v), want the completed event of %s", tries[2].Data, err, id)
	}
	for _, d := range tries {
		if d.Type != "upload.completed" || d.Path != "/hooks" || string(d.Data) != string(tries[0].Data) {
			t.Errorf("try %+v differs from the first", d)
		}
	}

	// A rejected event, as the completer publishes it.
	rejected := events.Rejected{URLID: "5d0c1a7e-2b3f-4c8d-9e6a-7f1b2c3d4e5f", Tenant: "acme", Key: "incoming/acme/5d0c1a7e-2b3f-4c8d-9e6a-7f1b2c3d4e5f",
		Size: 9, Reason: "type_mismatch", RejectedAt: time.Now().UTC()}
	publishRejected(t, s, rejected)
	tries = waitDelivered(t, r, "msg_"+rejected.URLID+"_rejected", 30*time.Second)
	if last := tries[len(tries)-1]; last.Type != "upload.rejected" || !strings.Contains(string(last.Data), `"reason":"type_mismatch"`) {
		t.Errorf("rejected webhook %+v", last)
	}
	if n := metric(t, s.CompleterURL, "mintgate_webhook_deliveries_total"); n < 4 {
		t.Errorf("mintgate_webhook_deliveries_total %v, want at least 4 (2 retries, 2 delivered)", n)
	}
	// A handled retry leaves the stream: it keeps only what is still to
	// be tried or kept as failed, so a consumer made again tries no
	// delivered webhook of the past again.
	eventually(t, 20*time.Second, "no fired retry left in MINTGATE_WEBHOOKS", func() bool {
		return dueLeft(t, s) == 0
	})
	// The lag dashboards read: one observation per delivery.
	if n := metric(t, s.CompleterURL, "mintgate_webhook_lag_seconds"); n != 2 {
		t.Errorf("mintgate_webhook_lag_seconds observations %v, want 2 (the two deliveries)", n)
	}
}

// dueLeft is how many fired retries (due messages) MINTGATE_WEBHOOKS holds.
func dueLeft(t *testing.T, s *stack) int {
	t.Helper()
	_, js := testenv.JetStream(t, s.NATSURL)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, webhook.Stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(webhook.DuePrefix+">"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range info.State.Subjects {
		n += int(c)
	}
	return n
}

// publishRejected publishes ev into the events stream as the completer
// does after a failed verification.
func publishRejected(t *testing.T, s *stack, ev events.Rejected) {
	t.Helper()
	_, js := testenv.JetStream(t, s.NATSURL)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pub, err := events.Open(ctx, js, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pub.PublishRejected(ctx, ev); err != nil {
		t.Fatal(err)
	}
}

// adminCall is one call of the signer's admin API; it returns the status
// and the body.
func adminCall(t *testing.T, opsURL, method, path string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, opsURL+path, nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := httpc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

const adminToken = "an-admin-token-of-at-least-32-bytes!"

// TestWebhookFailedThenRedelivered: a receiver down past every retry; the
// delivery is then listed as failed by the admin route (with its tries and
// last error, never the secret), redelivered once the receiver is back,
// with the same webhook-id, and leaves the list.
func TestWebhookFailedThenRedelivered(t *testing.T) {
	secret := newSecret(t)
	r := testenv.StartWebhookReceiver(t, testenv.WebhookReceiverOptions{Secret: secret})
	r.Stop(t)
	opsAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	s := newStack(t, stackOptions{Extra: hookEnv(r.URL+"/hooks", secret),
		SignerExtra: map[string]string{"MINTGATE_ADMIN_TOKEN": adminToken, "MINTGATE_OPS_ADDR": opsAddr}})
	ops := "http://" + opsAddr
	id := s.upload(t, "acme")
	hook := "msg_" + id + "_completed"
	var list struct {
		Failed []struct {
			ID, Tenant, Type, URL, LastError string
			Attempts                         int
			FailedAt                         *time.Time
			Event                            json.RawMessage
		}
	}
	eventually(t, 30*time.Second, "the delivery listed as failed", func() bool {
		code, body := adminCall(t, ops, http.MethodGet, "/admin/webhooks/failed")
		if code != http.StatusOK {
			t.Fatalf("GET /admin/webhooks/failed: %d %s", code, body)
		}
		if strings.Contains(string(body), strings.TrimPrefix(secret, "whsec_")) {
			t.Fatalf("the list shows the secret: %s", body)
		}
		return json.Unmarshal(body, &list) == nil && len(list.Failed) == 1
	})
	f := list.Failed[0]
	if f.ID != hook || f.Tenant != "acme" || f.Type != "upload.completed" || f.Attempts != 4 || f.URL != r.URL+"/hooks" ||
		f.LastError == "" || f.FailedAt == nil || !strings.Contains(string(f.Event), id) {
		t.Errorf("failed delivery %+v", f)
	}
	eventually(t, 20*time.Second, "mintgate_webhook_failed is 1", func() bool {
		return metric(t, s.CompleterURL, "mintgate_webhook_failed") == 1
	})

	r.Restart(t)
	if code, body := adminCall(t, ops, http.MethodPost, "/admin/webhooks/failed/"+hook+"/redeliver"); code != http.StatusAccepted {
		t.Fatalf("redeliver: %d %s", code, body)
	}
	if tries := waitDelivered(t, r, hook, 30*time.Second); len(tries) != 1 {
		t.Errorf("after the redelivery the receiver got %d requests, want 1", len(tries))
	}
	if code, body := adminCall(t, ops, http.MethodGet, "/admin/webhooks/failed"); code != http.StatusOK || !strings.Contains(string(body), `"failed":[]`) {
		t.Errorf("after the redelivery: %d %s, want an empty list", code, body)
	}
	if code, _ := adminCall(t, ops, http.MethodPost, "/admin/webhooks/failed/"+hook+"/redeliver"); code != http.StatusNotFound {
		t.Errorf("a second redelivery: %d, want 404", code)
	}
}

// TestWebhookPerTenantEndpoint: a tenant's own endpoint and secret in the
// tenant tiers file; other tenants' events go to MINTGATE_WEBHOOK_URL
// under its secret. The receiver verifies each path with its own secret.
func TestWebhookPerTenantEndpoint(t *testing.T) {
	shared, own := newSecret(t), newSecret(t)
	r := testenv.StartWebhookReceiver(t, testenv.WebhookReceiverOptions{Secret: shared, PathSecrets: map[string]string{"/acme": own}})
	file := filepath.Join(t.TempDir(), "tenant-tiers.json")
	tiers := fmt.Sprintf(`{"acme":{"user":"30:0.5","webhook":{"url":%q,"secret":%q}}}`, r.URL+"/acme", own)
	if err := os.WriteFile(file, []byte(tiers), 0o600); err != nil {
		t.Fatal(err)
	}
	env := hookEnv(r.URL+"/hooks", shared)
	env["MINTGATE_TENANT_TIERS_FILE"] = file
	s := newStack(t, stackOptions{Extra: env})
	acme, globex := s.upload(t, "acme"), s.upload(t, "globex")
	for id, path := range map[string]string{"msg_" + acme + "_completed": "/acme", "msg_" + globex + "_completed": "/hooks"} {
		for _, d := range waitDelivered(t, r, id, 30*time.Second) {
			if d.Path != path {
				t.Errorf("%s went to %s, want %s", id, d.Path, path)
			}
		}
	}
}

// TestWebhooksSurviveCompleterSIGKILL: the completer is SIGKILLed while
// every delivery waits for a retry (the receiver failed each first try);
// after its restart every one is delivered, verified, with its id.
func TestWebhooksSurviveCompleterSIGKILL(t *testing.T) {
	secret := newSecret(t)
	r := testenv.StartWebhookReceiver(t, testenv.WebhookReceiverOptions{Secret: secret, FailFirst: 1})
	env := hookEnv(r.URL+"/hooks", secret)
	env["MINTGATE_WEBHOOK_RETRIES"] = "3s,3s,3s"
	s := newStack(t, stackOptions{Extra: env})
	ids := make([]string, 4)
	for i := range ids {
		ids[i] = "msg_" + s.upload(t, "acme") + "_completed"
	}
	eventually(t, 30*time.Second, "every first try failed", func() bool {
		for _, id := range ids {
			if len(triesOf(t, r, id)) == 0 {
				return false
			}
		}
		return true
	})
	s.Completer.Kill()
	time.Sleep(4 * time.Second) // the retries fall due while no completer runs
	s.Completer.Start()
	eventually(t, 30*time.Second, "the completer ready again", func() bool {
		resp, err := httpc.Get(s.CompleterURL + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	for _, id := range ids {
		waitDelivered(t, r, id, 30*time.Second)
	}
}
