package main

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mintgate/mintgate/shared/events"
	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/streamstest"
	"github.com/mintgate/mintgate/shared/testenv"
)

const (
	eventsPublished = "mintgate_completer_events_published_total"
	eventsDuplicate = "mintgate_completer_events_duplicate_total"
	publishErrs     = `mintgate_completer_errors_total{op="publish"}`
)

// eventStream is a test's view of MINTGATE_UPLOADS on a real nats-server.
type eventStream struct {
	nats *testenv.NATS
	js   jetstream.JetStream
}

func startEventStream(t *testing.T) *eventStream {
	t.Helper()
	srv := testenv.StartNATS(t)
	streamstest.Ensure(t, srv.URL()) // the operator step
	_, js := testenv.JetStream(t, srv.URL())
	return &eventStream{nats: srv, js: js}
}

// events is every event in the stream, in order.
func (e *eventStream) events(t *testing.T) []events.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := e.js.Stream(ctx, events.Stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var evs []events.Event
	for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("message %d: %v", seq, err)
		}
		var ev events.Event
		if err := json.Unmarshal(m.Data, &ev); err != nil {
			t.Fatalf("message %d: %v: %s", seq, err, m.Data)
		}
		if got := m.Header.Get(jetstream.MsgIDHeader); got != ev.URLID {
			t.Errorf("message %d: Nats-Msg-Id %q, urlId %q", seq, got, ev.URLID)
		}
		if m.Subject != events.Subject(ev.Tenant) {
			t.Errorf("message %d on %s, tenant %s", seq, m.Subject, ev.Tenant)
		}
		evs = append(evs, ev)
	}
	return evs
}

// of is the events of urlID.
func of(evs []events.Event, urlID string) []events.Event {
	var out []events.Event
	for _, ev := range evs {
		if ev.URLID == urlID {
			out = append(out, ev)
		}
	}
	return out
}

// TestEventsOncePerUpload: the same S3 record delivered three times is one
// event; a completer that died after marking pending (before or after its
// publish reached the stream) leaves a redelivery that ends with exactly
// one event too.
func TestEventsOncePerUpload(t *testing.T) {
	es := startEventStream(t)
	s := startStack(t, map[string]string{"MINTGATE_NATS_URL": es.nats.URL()})
	ctx := context.Background()

	id := s.sendThrice(t)
	want := events.Event{URLID: id, Tenant: "acme", Key: "incoming/acme/" + id, Size: 1024,
		ETag: "d41d8cd98f00b204e9800998ecf8427e", CompletedAt: time.Unix(0, 0).UTC()}
	if evs := es.events(t); len(evs) != 1 || evs[0] != want {
		t.Fatalf("events %+v, want one %+v", evs, want)
	}
	// Deliveries handled at once by two receivers may both find the
	// marker pending and both publish: the stream keeps one.
	if s.metric(t, eventsPublished) != 1 {
		t.Errorf("published %v", s.metric(t, eventsPublished))
	}
	dups := s.metric(t, eventsDuplicate)

	// Killed after step 1 (marker pending, nothing published).
	afterMark := uuid.NewString()
	s.rdb.Set(ctx, keys.Done("acme", afterMark), markerUnpublished, 15*time.Minute)
	// Killed after step 2 (marker pending, the event stored).
	afterPublish := uuid.NewString()
	s.rdb.Set(ctx, keys.Done("acme", afterPublish), markerUnpublished, 15*time.Minute)
	pub, err := events.Open(ctx, es.js, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pub.Publish(ctx, events.Event{URLID: afterPublish, Tenant: "acme", Key: "incoming/acme/" + afterPublish}); err != nil {
		t.Fatal(err)
	}
	// Marked done by a completer with events off before they were on.
	before := uuid.NewString()
	s.rdb.Set(ctx, keys.Done("acme", before), markerDone, 15*time.Minute)

	for _, id := range []string{afterMark, afterPublish, before} {
		s.send(t, fixture(t, "direct-put.json", id))
	}
	eventually(t, "all deleted", func() bool { return s.metric(t, deleted) == 6 && s.inQueue(t, s.q.URL) == 0 })
	evs := es.events(t)
	for id, n := range map[string]int{afterMark: 1, afterPublish: 1, before: 0} {
		if got := len(of(evs, id)); got != n {
			t.Errorf("%d events of %s, want %d", got, id, n)
		}
		s.waitDone(t, id, 15*time.Minute)
	}
	if s.metric(t, eventsPublished) != 2 || s.metric(t, eventsDuplicate) != dups+1 {
		t.Errorf("published %v, duplicate %v, want 2 and %v", s.metric(t, eventsPublished), s.metric(t, eventsDuplicate), dups+1)
	}
}

// TestEventsHeldWhileNATSDown: with NATS down, an upload's message is held,
// not deleted, its marker already set (pending) so the sweeper does not
// refund it; once NATS is back its one event is published and the message
// deleted.
func TestEventsHeldWhileNATSDown(t *testing.T) {
	es := startEventStream(t)
	s := startStack(t, map[string]string{"MINTGATE_NATS_URL": es.nats.URL()})
	es.nats.Stop()

	id := uuid.NewString()
	s.send(t, fixture(t, "direct-put.json", id))
	eventually(t, "a failed publish", func() bool { return s.metric(t, publishErrs) >= 1 })
	eventually(t, "/readyz reports nats", func() bool { return s.readyz() == http.StatusServiceUnavailable })
	if v := s.rdb.Get(context.Background(), keys.Done("acme", id)).Val(); v != markerUnpublished {
		t.Errorf("marker %q while NATS is down, want %q", v, markerUnpublished)
	}
	if got := s.metric(t, deleted); got != 0 {
		t.Fatalf("%v messages deleted while NATS was down", got)
	}

	es.nats.Start()
	eventually(t, "message deleted", func() bool { return s.metric(t, deleted) == 1 && s.inQueue(t, s.q.URL) == 0 })
	s.waitDone(t, id, 15*time.Minute)
	if evs := es.events(t); len(of(evs, id)) != 1 || len(evs) != 1 {
		t.Errorf("events %+v, want one of %s", evs, id)
	}
	if n := s.inQueue(t, s.q.DLQURL); n != 0 {
		t.Errorf("%d messages went to the DLQ during the outage", n)
	}
}

// TestMissingStreamHoldsEvents: a completer started before the operator
// step says so, is unready and holds its messages (marker pending, nothing
// deleted), never creating the stream; once the operator has made it the
// held upload's one event is published.
func TestMissingStreamHoldsEvents(t *testing.T) {
	srv := testenv.StartNATS(t) // no operator step
	s := startStack(t, map[string]string{"MINTGATE_NATS_URL": srv.URL()})
	id := uuid.NewString()
	s.send(t, fixture(t, "direct-put.json", id))
	eventually(t, "/readyz reports nats", func() bool { return s.readyz() == http.StatusServiceUnavailable })
	time.Sleep(time.Second)
	if got := s.metric(t, deleted); got != 0 {
		t.Fatalf("%v messages deleted without the stream", got)
	}
	_, js := testenv.JetStream(t, srv.URL())
	if _, err := js.Stream(context.Background(), events.Stream); err == nil {
		t.Fatal("the completer created the stream")
	}

	streamstest.Ensure(t, srv.URL())
	es := &eventStream{nats: srv, js: js}
	eventually(t, "message deleted", func() bool { return s.metric(t, deleted) == 1 && s.inQueue(t, s.q.URL) == 0 })
	if evs := es.events(t); len(of(evs, id)) != 1 || len(evs) != 1 {
		t.Errorf("events %+v, want one of %s", evs, id)
	}
}
