package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mintgate/mintgate/shared/events"
	"github.com/mintgate/mintgate/shared/records"
	"github.com/mintgate/mintgate/shared/streamstest"
	"github.com/mintgate/mintgate/shared/testenv"
)

// recordsStack is a sweeper stack with the uploads stream and a migrated
// PostgreSQL, and a publisher of the completer's events.
type recordsStack struct {
	*stack
	pg  *testenv.Postgres
	db  *records.Store // the operator's view of the rows
	pub *events.Publisher
}

func newRecordsStack(t *testing.T) *recordsStack {
	t.Helper()
	s := newStack(t, false)
	streamstest.Ensure(t, s.natsURL)
	pg := testenv.StartPostgres(t)
	ctx := context.Background()
	if _, err := records.Migrate(ctx, pg.URL(""), slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	db, err := records.Open(ctx, pg.URL(""))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	nc, err := nats.Connect(s.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	return &recordsStack{stack: s, pg: pg, db: db, pub: events.New(js)}
}

func (r *recordsStack) startSweeper() *instance {
	return r.startWith(map[string]string{"MINTGATE_POSTGRES_URL": r.pg.UserURL("mintgate_service")})
}

// waitRow waits up to 5 s (the bar of SPEC §10) for id's row to read want.
func (r *recordsStack) waitRow(id, want string) {
	r.t.Helper()
	var got string
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		got, _ = r.db.QueryValue(context.Background(), "SELECT status FROM mintgate.uploads WHERE url_id = $1", id)
		if got == want {
			return
		}
		time.Sleep(25 * time.Millisecond)
	}
	r.t.Fatalf("row %s reads %q after 5 s, want %q", id, got, want)
}

// TestRecordsFollowEveryEnd: a grant is an issued row within 5 s; a
// completed, a rejected (with its reason), an aborted and an expired
// (refunded) upload reach those states within 5 s of their event; a late
// completion after the refund is recorded as completed; one row each.
func TestRecordsFollowEveryEnd(t *testing.T) {
	r := newRecordsStack(t)
	r.startSweeper()
	ctx := context.Background()
	far := time.Now().Add(time.Hour)
	ids := map[string]string{}
	for _, end := range []string{"completed", "rejected", "aborted", "refunded"} {
		id := uuid.NewString()
		ids[end] = id
		expires := far
		if end == "refunded" {
			expires = time.Now().Add(2 * time.Second)
		}
		g := newGrant(id, "user", "u:alice", expires)
		g.Filename, g.ContentType, g.ContentLength = "cat.png", "image/png", 5
		r.record(g)
		r.waitRow(id, records.Issued)
	}
	key := func(id string) string { return "incoming/" + tenant + "/" + id }
	if _, err := r.pub.Publish(ctx, events.Event{URLID: ids["completed"], Tenant: tenant, Key: key(ids["completed"]), Size: 5, CompletedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	r.waitRow(ids["completed"], records.Completed)
	if _, err := r.pub.PublishRejected(ctx, events.Rejected{URLID: ids["rejected"], Tenant: tenant, Key: key(ids["rejected"]), Size: 5, Reason: "malware", RejectedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	r.waitRow(ids["rejected"], records.Rejected)
	if _, err := r.pub.PublishAborted(ctx, events.Ended{URLID: ids["aborted"], Tenant: tenant, Key: key(ids["aborted"]), At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	r.waitRow(ids["aborted"], records.Aborted)
	// Due 2 s + grace 1 s from now: refunded by the sweeper, then its row.
	time.Sleep(3 * time.Second)
	r.waitRow(ids["refunded"], records.Refunded)
	if _, err := r.pub.Publish(ctx, events.Event{URLID: ids["refunded"], Tenant: tenant, Key: key(ids["refunded"]), Size: 5, CompletedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	r.waitRow(ids["refunded"], records.Completed)

	if n, _ := r.db.QueryValue(ctx, "SELECT count(*) FROM mintgate.uploads"); n != "4" {
		t.Fatalf("%s rows, want one per urlId (4)", n)
	}
	if reason, _ := r.db.QueryValue(ctx, "SELECT reason FROM mintgate.uploads WHERE url_id = $1", ids["rejected"]); reason != "malware" {
		t.Fatalf("rejected row's reason %q", reason)
	}
	if name, _ := r.db.QueryValue(ctx, "SELECT filename FROM mintgate.uploads WHERE url_id = $1", ids["completed"]); name != "cat.png" {
		t.Fatalf("filename %q, want the grant's", name)
	}
}

// TestRecordsCatchUpAfterAPostgresOutage: PostgreSQL stopped mid-run
// loses no row and holds up no refund; /readyz names postgres meanwhile,
// and every row is written once it is back.
func TestRecordsCatchUpAfterAPostgresOutage(t *testing.T) {
	r := newRecordsStack(t)
	in := r.startSweeper()
	first := uuid.NewString()
	r.record(newGrant(first, "user", "u:alice", time.Now().Add(time.Hour)))
	r.waitRow(first, records.Issued)

	r.pg.Stop()
	var during []string
	for range 20 {
		id := uuid.NewString()
		during = append(during, id)
		r.record(newGrant(id, "user", "u:alice", time.Now().Add(time.Second)))
	}
	// The refunds do not wait for PostgreSQL.
	waitFor(t, 15*time.Second, "the refunds during the outage", func() bool { return r.refunded() == len(during) })
	waitFor(t, 15*time.Second, "/readyz naming postgres", func() bool {
		resp, err := http.Get("http://" + in.addr + "/readyz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(string(b), "postgres")
	})
	r.pg.Start()
	for _, id := range during {
		deadline := time.Now().Add(30 * time.Second)
		for {
			got, _ := r.db.QueryValue(context.Background(), "SELECT status FROM mintgate.uploads WHERE url_id = $1", id)
			if got == records.Refunded {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("row %s reads %q 30 s after PostgreSQL came back, want refunded", id, got)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitFor(t, 15*time.Second, "/readyz ready again", func() bool { return in.status("/readyz") == http.StatusOK })
}
