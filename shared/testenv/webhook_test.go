package testenv_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mintgate/mintgate/shared/testenv"
)

// signWebhook is the Standard Webhooks signature, written from the
// specification: "v1," + base64 HMAC-SHA256 of "<id>.<timestamp>.<body>"
// under the base64-decoded bytes of the secret after "whsec_".
func signWebhook(t *testing.T, secret, id string, ts int64, body []byte) string {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		t.Fatal(err)
	}
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "%s.%d.%s", id, ts, body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// post sends body to url with the webhook headers and returns the status.
func post(t *testing.T, url, id string, ts int64, sig string, body []byte) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("webhook-signature", sig)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

const (
	secretA = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	secretB = "whsec_QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo="
)

func TestWebhookReceiverVerifiesWithTheLibrary(t *testing.T) {
	r := testenv.StartWebhookReceiver(t, testenv.WebhookReceiverOptions{
		Secret: secretA, PathSecrets: map[string]string{"/acme": secretB}, FailFirst: 1,
	})
	now := time.Now().Unix()
	body := []byte(`{"type":"upload.completed","timestamp":"2026-12-02T10:00:00Z","data":{"urlId":"u1","tenant":"demo"}}`)
	good := signWebhook(t, secretA, "msg_1", now, body)
	steps := []struct {
		name, path, id string
		ts             int64
		sig            string
		body           []byte
		want           int
	}{
		{"first try failed on purpose", "/", "msg_1", now, good, body, 503},
		{"second try delivered", "/", "msg_1", now, good, body, 204},
		{"tampered body", "/", "msg_1", now, good, append(bytes.Clone(body[:len(body)-2]), `x}}`...), 401},
		{"wrong secret", "/", "msg_2", now, signWebhook(t, secretB, "msg_2", now, body), body, 401},
		{"old timestamp", "/", "msg_3", now - 600, signWebhook(t, secretA, "msg_3", now-600, body), body, 401},
		{"one of several signatures", "/", "msg_4", now,
			"v1,bm90IGl0 " + signWebhook(t, secretA, "msg_4", now, body), body, 503},
		{"tenant path, its own secret", "/acme", "msg_5", now, signWebhook(t, secretB, "msg_5", now, body), body, 503},
		{"tenant path, the default secret", "/acme", "msg_5", now, signWebhook(t, secretA, "msg_5", now, body), body, 401},
	}
	for _, s := range steps {
		if got := post(t, r.URL+s.path, s.id, s.ts, s.sig, s.body); got != s.want {
			t.Errorf("%s: status %d, want %d", s.name, got, s.want)
		}
	}
	ds := r.Deliveries(t)
	if len(ds) != len(steps) {
		t.Fatalf("%d deliveries recorded, want %d: %+v", len(ds), len(steps), ds)
	}
	d := ds[1]
	if !d.Verified || d.Status != 204 || d.ID != "msg_1" || d.Type != "upload.completed" || d.Path != "/" ||
		d.Timestamp != strconv.FormatInt(now, 10) || !strings.Contains(string(d.Data), `"urlId":"u1"`) || d.Try != 2 {
		t.Errorf("second delivery recorded as %+v", d)
	}
	for i, want := range []bool{true, true, false, false, false, true, true, false} {
		if ds[i].Verified != want {
			t.Errorf("%s: verified %v, want %v (%s)", steps[i].name, ds[i].Verified, want, ds[i].Error)
		}
	}

	// A restart keeps the port, the list and the counts of tries: msg_1's
	// third try is not failed again.
	r.Stop(t)
	if _, err := http.Get(r.URL + "/deliveries"); err == nil {
		t.Fatal("a stopped receiver answered")
	}
	r.Restart(t)
	if got := post(t, r.URL+"/", "msg_1", now, good, body); got != 204 {
		t.Errorf("after a restart: status %d, want 204", got)
	}
	if ds := r.Deliveries(t); len(ds) != len(steps)+1 || ds[len(ds)-1].Try != 4 {
		t.Errorf("after a restart: %d deliveries, last %+v", len(ds), ds[len(ds)-1])
	}
}

func TestWebhookReceiverFailShareIsDeterministic(t *testing.T) {
	o := testenv.WebhookReceiverOptions{Secret: secretA, FailShare: 0.5, Seed: 7}
	statuses := func() string {
		r := testenv.StartWebhookReceiver(t, o)
		var b strings.Builder
		now := time.Now().Unix()
		body := []byte(`{"type":"upload.rejected","timestamp":"2026-12-02T10:00:00Z","data":{}}`)
		for i := range 40 {
			id := fmt.Sprintf("msg_%d", i%10)
			fmt.Fprintf(&b, "%d ", post(t, r.URL, id, now, signWebhook(t, secretA, id, now, body), body))
		}
		return b.String()
	}
	first, second := statuses(), statuses()
	if first != second {
		t.Errorf("the same seed failed different tries:\n%s\n%s", first, second)
	}
	if n := strings.Count(first, "503"); n < 8 || n > 32 {
		t.Errorf("%d of 40 tries failed at a share of 0.5: %s", n, first)
	}
}
