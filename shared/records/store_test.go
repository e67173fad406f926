package records_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mintgate/mintgate/shared/ledger"
	"github.com/mintgate/mintgate/shared/records"
	"github.com/mintgate/mintgate/shared/testenv"
)

// startDB is a migrated cluster and a Store of the services' role.
func startDB(t *testing.T) (*testenv.Postgres, *records.Store) {
	t.Helper()
	pg := testenv.StartPostgres(t)
	ctx := context.Background()
	v, err := records.Migrate(ctx, pg.URL(""), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if v != records.SchemaVersion() {
		t.Fatalf("schema version %d, want %d", v, records.SchemaVersion())
	}
	st, err := records.Open(ctx, pg.UserURL("mintgate_service"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return pg, st
}

func TestMigrateTwiceAndTheRoleCannotChangeTheSchema(t *testing.T) {
	pg, st := startDB(t)
	ctx := context.Background()
	if _, err := records.Migrate(ctx, pg.URL(""), slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatalf("a second run: %v", err)
	}
	if err := st.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	for _, ddl := range []string{
		"CREATE TABLE mintgate.x (a int)", "ALTER TABLE mintgate.uploads ADD COLUMN x int",
		"DROP TABLE mintgate.uploads", "TRUNCATE mintgate.uploads", "CREATE TABLE public.x (a int)",
	} {
		out, err := pgExec(pg, "mintgate_service", ddl)
		if err == nil || !strings.Contains(out, "permission denied") && !strings.Contains(out, "must be owner") {
			t.Errorf("%s as the services' role: %v %s, want permission denied", ddl, err, out)
		}
	}
}

func TestGrantsSQLIsDeploysCopy(t *testing.T) {
	root, err := testenv.Root()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "deploy", "postgres", "grants.sql"))
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != records.GrantsSQL {
		t.Fatal("deploy/postgres/grants.sql and shared/records/grants.sql differ: copy the one you changed")
	}
}

func grant(tenant, subject string, at time.Time) ledger.Grant {
	id := uuid.NewString()
	return ledger.Grant{URLID: id, Tenant: tenant, Subject: subject, Key: "incoming/" + tenant + "/" + id,
		ContentType: "image/png", ContentLength: 100, Filename: "a.png", IssuedAt: at, ExpiresAt: at.Add(2 * time.Minute)}
}

func TestStatusOnlyMovesForward(t *testing.T) {
	_, st := startDB(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	g := grant("acme", "u:alice", now)
	move := func(status string, size int64) {
		t.Helper()
		if err := st.Move(ctx, []records.Transition{{URLID: g.URLID, Tenant: g.Tenant, Key: g.Key, Status: status, Size: size, At: now}}); err != nil {
			t.Fatal(err)
		}
	}
	status := func() records.Row {
		t.Helper()
		p, err := st.List(ctx, records.Filter{Tenant: "acme", Subject: "u:alice", Limit: 10})
		if err != nil || len(p.Uploads) != 1 {
			t.Fatalf("list: %v %+v", err, p)
		}
		return p.Uploads[0]
	}
	// The refund's event before the grant itself: the row waits for it.
	move(records.Refunded, 0)
	if err := st.PutGrants(ctx, []ledger.Grant{g, g}); err != nil {
		t.Fatal(err)
	}
	if r := status(); r.Status != records.Refunded || *r.Filename != "a.png" || r.ContentType != "image/png" {
		t.Fatalf("after grant: %+v", r)
	}
	move(records.Aborted, 0) // same rank: nothing
	move(records.Completed, 100)
	move(records.Refunded, 0)
	if err := st.PutGrants(ctx, []ledger.Grant{g}); err != nil {
		t.Fatal(err)
	}
	if r := status(); r.Status != records.Completed || *r.Size != 100 {
		t.Fatalf("a late completion after a refund: %+v, want completed with its size", r)
	}
	u, err := st.Usage(ctx, "acme", "u:alice")
	if err != nil || u.Bytes != 100 || u.Uploads != 1 || u.ByStatus[records.Completed] != 1 {
		t.Fatalf("usage %+v %v", u, err)
	}
	// One refund counted in its minute, the completion none.
	if got := pgQuery(t, st, "SELECT refunds FROM mintgate.tenant_minutes WHERE tenant = 'acme'"); got != "1" {
		t.Fatalf("refunds counted %s, want 1", got)
	}
}

func TestListPagesNewestFirstAndOnlyTheCallers(t *testing.T) {
	_, st := startDB(t)
	ctx := context.Background()
	base := time.Now().UTC().Truncate(time.Second)
	var mine []string
	var gs []ledger.Grant
	for i := range 25 {
		g := grant("acme", "u:alice", base.Add(time.Duration(i%7)*time.Second)) // ties on issuedAt
		gs = append(gs, g, grant("acme", "u:bob", base), grant("other", "u:alice", base))
		mine = append(mine, g.URLID)
	}
	if err := st.PutGrants(ctx, gs); err != nil {
		t.Fatal(err)
	}
	var seen []records.Row
	cursor := ""
	for pages := 0; ; pages++ {
		p, err := st.List(ctx, records.Filter{Tenant: "acme", Subject: "u:alice", Limit: 10, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, p.Uploads...)
		if cursor = p.Next; cursor == "" {
			break
		}
	}
	if len(seen) != len(mine) {
		t.Fatalf("listed %d rows, want %d", len(seen), len(mine))
	}
	ids := map[string]bool{}
	for i, r := range seen {
		ids[r.URLID] = true
		if i > 0 && (r.IssuedAt.After(seen[i-1].IssuedAt) || r.IssuedAt.Equal(seen[i-1].IssuedAt) && r.URLID > seen[i-1].URLID) {
			t.Fatalf("row %d out of order", i)
		}
	}
	for _, id := range mine {
		if !ids[id] {
			t.Fatalf("%s missing, or another caller's listed", id)
		}
	}
	if _, err := st.List(ctx, records.Filter{Tenant: "acme", Subject: "u:alice", Limit: 10, Cursor: "nope"}); err != records.ErrBadCursor {
		t.Fatalf("a bad cursor: %v", err)
	}
}

func TestTallyAddsOnceAndAtCeiling(t *testing.T) {
	_, st := startDB(t)
	ctx := context.Background()
	minute := time.Now().UTC().Truncate(time.Minute)
	tally := records.Tally{ID: "s1/" + minute.Format(time.RFC3339), Minute: minute, Tenants: map[string]records.Tick{
		"acme": {Signs: 3, RefusedTenant: 2}, "calm": {Signs: 5},
	}}
	for range 3 {
		if err := st.AddTally(ctx, tally); err != nil {
			t.Fatal(err)
		}
	}
	tally.ID = "s2/" + minute.Format(time.RFC3339)
	if err := st.AddTally(ctx, tally); err != nil {
		t.Fatal(err)
	}
	cs, err := st.AtCeiling(ctx, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprint([]records.Ceiling{{Tenant: "acme", Signs: 6, Refused: 4, RefusedShare: 0.4, MinutesAtCeiling: 1}})
	if fmt.Sprint(cs) != want {
		t.Fatalf("at ceiling %v, want %v", cs, want)
	}
}
