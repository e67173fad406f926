package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// WebhookReceiverDir is the webhook receiver's package, relative to the
// repository's root; deploy/local/web.sh installs its node_modules.
const WebhookReceiverDir = "deploy/webhook-receiver"

// WebhookReceiverOptions shape a webhook receiver.
type WebhookReceiverOptions struct {
	// Secret verifies a delivery to any path without a secret of its own
	// (whsec_ + base64). Empty: only PathSecrets' paths are endpoints.
	Secret string
	// PathSecrets are endpoints of their own (a tenant's): path ("/acme")
	// to its secret.
	PathSecrets map[string]string
	// FailFirst answers 503 to the first FailFirst tries of each webhook-id.
	FailFirst int
	// FailShare answers 503 to this share (0..1) of the tries, chosen by a
	// hash of Seed, the webhook-id and the try's number: the same Seed fails
	// the same tries whatever their order.
	FailShare float64
	Seed      int64
	// Delay holds every answer this long (a slow endpoint).
	Delay time.Duration
}

// WebhookReceiver is deploy/webhook-receiver (Node), the test started on a
// free loopback port: it verifies every POST with the standardwebhooks npm
// library, not mintgate's code, answers 204 (or 503 as its options say;
// 401 to a bad signature) and lists what it received. Its list survives a
// Restart. It is stopped by PID when the test ends.
type WebhookReceiver struct {
	*Process
	// URL is its base URL, http://127.0.0.1:<port>; a delivery's path is
	// the endpoint (URL + "/acme" for PathSecrets["/acme"]).
	URL string
}

// WebhookDelivery is one request the receiver got.
type WebhookDelivery struct {
	// At is when it arrived.
	At time.Time `json:"at"`
	// Path is the request's path; ID, Timestamp the webhook-id and
	// webhook-timestamp headers; Type and Data the payload's "type" and
	// "data" (read from the body even when its signature did not hold).
	Path      string `json:"path"`
	ID        string `json:"id"`
	Timestamp string `json:"timestamp"`
	Type      string `json:"type"`
	// Verified: the standardwebhooks library accepted its signature and
	// timestamp under the path's secret.
	Verified bool `json:"verified"`
	// Status is the receiver's answer: 204, 503 (failed on purpose), 401
	// (not verified), 404 (a path without a secret).
	Status int `json:"status"`
	// Try is the how-manieth request of this webhook-id it was (1, 2, ...).
	Try  int             `json:"try"`
	Data json.RawMessage `json:"data"`
	// Error is the library's reason when it was not verified.
	Error string `json:"error,omitempty"`
}

// StartWebhookReceiver starts the receiver on a free loopback port and
// waits until it answers; its URL is the first line it prints.
func StartWebhookReceiver(t testing.TB, o WebhookReceiverOptions) *WebhookReceiver {
	t.Helper()
	root, err := Root()
	if err != nil {
		t.Fatalf("testenv: webhook receiver: %v", err)
	}
	dir := filepath.Join(root, WebhookReceiverDir)
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "standardwebhooks")); err != nil {
		t.Fatalf("testenv: webhook receiver: %v; run deploy/local/web.sh (make test does)", err)
	}
	record := filepath.Join(t.TempDir(), "deliveries.jsonl")
	args := append([]string{filepath.Join(dir, "receiver.mjs"), "--addr", "127.0.0.1:0", "--record", record},
		o.args()...)
	r := &WebhookReceiver{Process: newProcess(t, Binary(t, "node"), args...)}
	r.Start()
	r.URL = r.firstLine(t)
	port := r.URL[strings.LastIndex(r.URL, ":")+1:]
	// A restart listens on the same port.
	r.Args[2] = "127.0.0.1:" + port
	r.waitReady(t)
	return r
}

// args are the receiver's flags for o.
func (o WebhookReceiverOptions) args() []string {
	var a []string
	if o.Secret != "" {
		a = append(a, "--secret", o.Secret)
	}
	paths := make([]string, 0, len(o.PathSecrets))
	for p := range o.PathSecrets {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		a = append(a, "--path-secret", p+"="+o.PathSecrets[p])
	}
	if o.FailFirst > 0 {
		a = append(a, "--fail-first", strconv.Itoa(o.FailFirst))
	}
	if o.FailShare > 0 {
		a = append(a, "--fail-share", strconv.FormatFloat(o.FailShare, 'f', -1, 64),
			"--seed", strconv.FormatInt(o.Seed, 10))
	}
	if o.Delay > 0 {
		a = append(a, "--delay-ms", strconv.FormatInt(o.Delay.Milliseconds(), 10))
	}
	return a
}

// firstLine waits for the URL the receiver prints first.
func (r *WebhookReceiver) firstLine(t testing.TB) string {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if line, _, ok := strings.Cut(r.Output(), "\n"); ok && strings.HasPrefix(line, "http://") {
			return line
		}
		if r.Exited() {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("testenv: the webhook receiver printed no URL:\n%s", r.Output())
	return ""
}

func (r *WebhookReceiver) waitReady(t testing.TB) {
	t.Helper()
	if err := r.WaitHTTP(context.Background(), 15*time.Second, r.URL+"/healthz"); err != nil {
		t.Fatalf("testenv: webhook receiver %s: %v\n%s", r.URL, err, r.Output())
	}
}

// Deliveries is every request the receiver got, oldest first (those
// before a Restart included).
func (r *WebhookReceiver) Deliveries(t testing.TB) []WebhookDelivery {
	t.Helper()
	ds, err := r.deliveries()
	if err != nil {
		t.Fatalf("testenv: webhook receiver %s: %v", r.URL, err)
	}
	return ds
}

func (r *WebhookReceiver) deliveries() ([]WebhookDelivery, error) {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(r.URL + "/deliveries")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /deliveries: %s", resp.Status)
	}
	var ds []WebhookDelivery
	if err := json.NewDecoder(resp.Body).Decode(&ds); err != nil {
		return nil, fmt.Errorf("GET /deliveries: %w", err)
	}
	return ds, nil
}

// Stop ends the receiver by PID: from now on a delivery's connection is
// refused.
func (r *WebhookReceiver) Stop(t testing.TB) {
	t.Helper()
	r.Process.Process.Stop()
}

// Restart starts it again on the same port, with the same options, its
// list and its counts of tries kept, and waits until it answers.
func (r *WebhookReceiver) Restart(t testing.TB) {
	t.Helper()
	r.Process.Process.Stop()
	if err := r.Process.Process.Start(); err != nil {
		t.Fatalf("testenv: webhook receiver: %v", err)
	}
	r.waitReady(t)
}

// String names the receiver in test logs.
func (r *WebhookReceiver) String() string { return "webhook receiver " + r.URL }
