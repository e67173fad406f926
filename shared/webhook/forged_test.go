package webhook_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mintgate/mintgate/shared/events"
	"github.com/mintgate/mintgate/shared/streamstest"
	"github.com/mintgate/mintgate/shared/testenv"
	"github.com/mintgate/mintgate/shared/webhook"
)

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// receiver is an HTTP endpoint on loopback recording each request's
// webhook-id and answering status.
type receiver struct {
	url    string
	status atomic.Int32
	mu     sync.Mutex
	ids    []string
	keys   []string // each body's data.key
}

func startReceiver(t *testing.T) *receiver {
	t.Helper()
	r := &receiver{}
	r.status.Store(http.StatusNoContent)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var body struct {
			Data struct {
				Key string `json:"key"`
			} `json:"data"`
		}
		_ = json.NewDecoder(req.Body).Decode(&body)
		r.mu.Lock()
		r.ids = append(r.ids, req.Header.Get(webhook.HeaderID))
		r.keys = append(r.keys, body.Data.Key)
		r.mu.Unlock()
		w.WriteHeader(int(r.status.Load()))
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	r.url = "http://" + ln.Addr().String() + "/hook"
	return r
}

func (r *receiver) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ids)
}

// deliverer runs a deliverer on js for every tenant to r, with retries,
// until the test ends; it returns its registry.
func deliverer(t *testing.T, js jetstream.JetStream, r *receiver, retries ...time.Duration) *prometheus.Registry {
	t.Helper()
	s, err := webhook.ParseSecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	d := webhook.NewDeliverer(js, webhook.Config{Retries: retries, Timeout: 2 * time.Second, AllowPrivate: true},
		func(string) (webhook.Endpoint, bool) { return webhook.Endpoint{URL: r.url, Secret: s}, true },
		webhook.NewMetrics(reg), slog.New(slog.DiscardHandler))
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	t.Cleanup(func() { stop(); <-done })
	return reg
}

// value is the sum of the series named name on reg whose labels hold
// every pair of want.
func value(t *testing.T, reg *prometheus.Registry, name string, want ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(want); i += 2 {
				found := false
				for _, l := range m.GetLabel() {
					found = found || (l.GetName() == want[i] && l.GetValue() == want[i+1])
				}
				if !found {
					continue series
				}
			}
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(within)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out: %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// publishEvent publishes urlID's completed event of tenant as the
// completer does and returns its sequence in MINTGATE_UPLOADS.
func publishEvent(ctx context.Context, t *testing.T, js jetstream.JetStream, tenant, urlID string) uint64 {
	t.Helper()
	if _, err := events.New(js).Publish(ctx, events.Event{URLID: urlID, Tenant: tenant, Key: "incoming/" + tenant + "/" + urlID, Size: 1, CompletedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, events.Stream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctx, events.Subject(tenant))
	if err != nil {
		t.Fatal(err)
	}
	return m.Sequence
}

// TestForgedDeliveriesOnAnOpenBusAreNeverSent is the third review's
// finding 3 without the authorization's help: on a bus where anyone may
// publish on MINTGATE_WEBHOOKS, five deliveries made by hand on due
// subjects (a made-up event naming a quarantined key, without a
// reference; a genuine event's reference under another upload's id;
// under another tenant; a genuine delivery on another tenant's subject;
// a reference to no event) are each dropped and counted in
// mintgate_webhook_forged_total, and the receiver gets only the
// completer's genuine event. Before issue 36 each was sent, signed with
// the tenant's secret.
func TestForgedDeliveriesOnAnOpenBusAreNeverSent(t *testing.T) {
	srv := testenv.StartNATS(t)
	streamstest.Ensure(t, srv.URL())
	_, js := testenv.JetStream(t, srv.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := startReceiver(t)
	reg := deliverer(t, js, r, time.Second)
	time.Sleep(300 * time.Millisecond) // the durables exist

	const urlID = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
	seq := publishEvent(ctx, t, js, "acme", urlID)
	genuine := webhook.ID(urlID, webhook.TypeCompleted)
	eventually(t, 10*time.Second, "the genuine event delivered", func() bool { return slices.Contains(r.got(), genuine) })

	made := json.RawMessage(`{"urlId":"0b9e6f0e-7f6c-4d3a-9a51-3c1f2a9d8e70","tenant":"acme","key":"quarantine/acme/eicar","size":68}`)
	other := "msg_0b9e6f0e-7f6c-4d3a-9a51-3c1f2a9d8e70_completed"
	forgeries := []struct {
		subject string
		d       webhook.Delivery
	}{
		{webhook.DueSubject("acme", other), webhook.Delivery{ID: other, Tenant: "acme", Type: webhook.TypeCompleted, Event: made}},
		{webhook.DueSubject("acme", other), webhook.Delivery{ID: other, Tenant: "acme", Type: webhook.TypeCompleted, Event: made, EventSeq: seq}},
		{webhook.DueSubject("evil", genuine), webhook.Delivery{ID: genuine, Tenant: "evil", Type: webhook.TypeCompleted, Event: made, EventSeq: seq}},
		{webhook.DueSubject("evil", genuine), webhook.Delivery{ID: genuine, Tenant: "acme", Type: webhook.TypeCompleted, Event: made, EventSeq: seq}},
		{webhook.DueSubject("acme", genuine+"x"), webhook.Delivery{ID: genuine + "x", Tenant: "acme", Type: webhook.TypeCompleted, Event: made, EventSeq: seq + 100}},
	}
	for _, f := range forgeries {
		f.d.Timestamp = time.Now()
		b, err := json.Marshal(f.d)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: f.subject, Data: b}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10*time.Second, "the five forgeries dropped", func() bool {
		return value(t, reg, "mintgate_webhook_forged_total") == float64(len(forgeries))
	})
	if got := r.got(); !slices.Equal(got, []string{genuine}) {
		t.Errorf("the receiver got %q, want only %s", got, genuine)
	}

	// A retry stored before issue 36 (no reference) of the genuine event:
	// its event is found in MINTGATE_UPLOADS and sent as stored there,
	// whatever the retry's message says.
	legacy, err := json.Marshal(webhook.Delivery{ID: genuine, Tenant: "acme", Type: webhook.TypeCompleted, Timestamp: time.Now(), Event: made, Attempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: webhook.DueSubject("acme", genuine), Data: legacy}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the legacy retry sent", func() bool { return len(r.got()) == 2 })
	r.mu.Lock()
	defer r.mu.Unlock()
	if want := []string{genuine, genuine}; !slices.Equal(r.ids, want) || r.keys[1] != "incoming/acme/"+urlID {
		t.Errorf("after the legacy retry: %q with keys %q, want %q, each with the stored event's key", r.ids, r.keys, want)
	}
}

// TestStreamAtItsBoundLosesNoDelivery: MINTGATE_WEBHOOKS at 95 % of its
// bound (64 KiB here) takes no new failed record: a delivery whose only
// try fails is not stored, not counted as failed and not acked; it is
// tried again later, and once there is room (the old records removed) it
// is kept as failed, listed. Nothing is dropped at the bound.
func TestStreamAtItsBoundLosesNoDelivery(t *testing.T) {
	srv := testenv.StartNATS(t)
	streamstest.Ensure(t, srv.URL())
	_, js := testenv.JetStream(t, srv.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const bound = 64 << 10
	info, err := webhook.EnsureStream(ctx, js, 0, bound)
	if err != nil || info.Config.MaxBytes != bound {
		t.Fatalf("the operator step with a bound: %v", err)
	}
	st, err := js.Stream(ctx, webhook.Stream)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		si, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if float64(si.State.Bytes) >= 0.96*bound {
			break
		}
		b, _ := json.Marshal(map[string]any{"id": "old", "pad": string(make([]byte, 400))})
		if _, err := js.Publish(ctx, webhook.FailedSubject("old", "msg_old_"+string(rune('a'+i%26))+string(rune('a'+i/26))+"_completed"), b); err != nil {
			t.Fatal(err)
		}
	}
	r := startReceiver(t)
	r.status.Store(http.StatusServiceUnavailable)
	reg := deliverer(t, js, r) // one try, no retry
	eventually(t, 10*time.Second, "mintgate_webhook_stream_bytes read", func() bool {
		return value(t, reg, "mintgate_webhook_stream_max_bytes") == bound && value(t, reg, "mintgate_webhook_stream_bytes") >= 0.95*bound
	})
	const urlID = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
	publishEvent(ctx, t, js, "acme", urlID)
	id := webhook.ID(urlID, webhook.TypeCompleted)
	eventually(t, 10*time.Second, "the first try", func() bool { return slices.Contains(r.got(), id) })
	time.Sleep(time.Second)
	if n := value(t, reg, "mintgate_webhook_deliveries_total", "outcome", "failed"); n != 0 {
		t.Errorf("%v deliveries counted failed at the bound, want 0 (nothing stored)", n)
	}
	c, err := js.Consumer(ctx, events.Stream, webhook.Durable)
	if err != nil {
		t.Fatal(err)
	}
	if ci, err := c.Info(ctx); err != nil || ci.NumAckPending+int(ci.NumPending) != 1 {
		t.Errorf("the event's first try: %+v (%v), want it unacked", ci, err)
	}
	if err := st.Purge(ctx, jetstream.WithPurgeSubject(webhook.FailedSubject("old", ">"))); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the delivery kept as failed once there is room", func() bool {
		page, err := webhook.NewFailed(js).List(ctx, "", 0)
		return err == nil && len(page.Failed) == 1 && page.Failed[0].ID == id
	})
	eventually(t, 5*time.Second, "counted failed once", func() bool {
		return value(t, reg, "mintgate_webhook_deliveries_total", "outcome", "failed") == 1
	})
}
