package records_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mintgate/mintgate/shared/ledger"
	"github.com/mintgate/mintgate/shared/records"
)

// TestScalePlans fills the tables with MINTGATE_RECORDS_SCALE rows
// (generate_series; 10000000 for docs/performance.md) and prints each
// route's plan (EXPLAIN ANALYZE): every one an index scan. It also
// measures the write path per upload (a grant's upsert and its
// completion, in batches as the feed writes them): time and WAL bytes.
// Skipped unless the variable is set: at 10M rows it takes minutes.
func TestScalePlans(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("MINTGATE_RECORDS_SCALE"))
	if n <= 0 {
		t.Skip("set MINTGATE_RECORDS_SCALE=<rows> to run")
	}
	pg, st := startDB(t)
	start := time.Now()
	// Loaded without its indexes, which are then built as the migration
	// defines them (pg_get_indexdef): a bulk load, not 10M random inserts.
	defs := pg.SQL(t, `SELECT string_agg(pg_get_indexdef(indexrelid), '; ') FROM pg_index WHERE indrelid = 'mintgate.uploads'::regclass AND NOT indisprimary`)
	pg.SQL(t, `SELECT 1; `+dropIndexes)
	// 1000 tenants of 10 callers each, and the caller u:heavy of tenant
	// big, which holds a twentieth of all rows.
	pg.SQL(t, fmt.Sprintf(`INSERT INTO mintgate.uploads (url_id, tenant, subject, key, content_type, content_length, status, size, issued_at, expires_at, ended_at)
SELECT gen_random_uuid(), CASE WHEN i %% 20 = 0 THEN 'big' ELSE 't' || (i %% 1000) END, CASE WHEN i %% 20 = 0 THEN 'u:heavy' ELSE 'u:' || (i %% 10) END, 'incoming/t/' || i, 'image/png', 1000 + i %% 5000,
  (ARRAY['completed','completed','completed','refunded','rejected','issued'])[1 + i %% 6], 1000 + i %% 5000,
  now() - make_interval(secs => i / 100.0), now() - make_interval(secs => i / 100.0) + interval '2 minutes', now() - make_interval(secs => i / 100.0) + interval '5 seconds'
FROM generate_series(1, %d) AS i`, n))
	pg.SQL(t, fmt.Sprintf(`INSERT INTO mintgate.tenant_minutes (tenant, minute, signs, refused_caller, refused_tenant)
SELECT 't' || (i %% 1000), date_trunc('minute', now()) - make_interval(mins => i / 1000), 60, i %% 7, CASE WHEN i %% 13 = 0 THEN 3 ELSE 0 END
FROM generate_series(1, %d) AS i ON CONFLICT DO NOTHING`, n/5))
	pg.SQL(t, "ALTER TABLE mintgate.uploads ADD PRIMARY KEY (url_id); "+defs)
	pg.SQL(t, "VACUUM ANALYZE mintgate.uploads")
	pg.SQL(t, "VACUUM ANALYZE mintgate.tenant_minutes")
	t.Logf("%d upload rows and %d tenant minutes loaded in %v; sizes: %s", n, n/5, time.Since(start).Round(time.Second),
		pg.SQL(t, `SELECT string_agg(relname || ' ' || pg_size_pretty(pg_total_relation_size(oid)), ', ') FROM pg_class WHERE relnamespace = 'mintgate'::regnamespace AND relkind IN ('r','i')`))
	cursor := pg.SQL(t, `SELECT issued_at::text || ''',''' || url_id FROM mintgate.uploads WHERE tenant = 'big' AND subject = 'u:heavy' ORDER BY issued_at DESC, url_id DESC OFFSET 5000 LIMIT 1`)
	for _, q := range []struct{ name, sql string }{
		{"GET /uploads (first page)", `SELECT url_id, key, content_type, size, status, reason, checksum_sha256, filename, issued_at, ended_at FROM mintgate.uploads
WHERE tenant = 'big' AND subject = 'u:heavy' AND (issued_at, url_id) < ('infinity', 'ffffffff-ffff-ffff-ffff-ffffffffffff') ORDER BY issued_at DESC, url_id DESC LIMIT 101`},
		{"GET /uploads (a page 5000 rows deep)", `SELECT url_id, key, content_type, size, status, reason, checksum_sha256, filename, issued_at, ended_at FROM mintgate.uploads
WHERE tenant = 'big' AND subject = 'u:heavy' AND (issued_at, url_id) < ('` + cursor + `') ORDER BY issued_at DESC, url_id DESC LIMIT 101`},
		{"GET /uploads?status=rejected", `SELECT url_id, key, content_type, size, status, reason, checksum_sha256, filename, issued_at, ended_at FROM mintgate.uploads
WHERE tenant = 'big' AND subject = 'u:heavy' AND (issued_at, url_id) < ('infinity', 'ffffffff-ffff-ffff-ffff-ffffffffffff') AND status = 'rejected' ORDER BY issued_at DESC, url_id DESC LIMIT 101`},
		{"GET /uploads/usage", `SELECT status, count(*), COALESCE(sum(size) FILTER (WHERE status = 'completed'), 0)::bigint
FROM mintgate.uploads WHERE tenant = 't2' AND ('u:2' = '' OR subject = 'u:2') GROUP BY status`},
		{"GET /admin/tenants/{tenant}/usage", `SELECT status, count(*), COALESCE(sum(size) FILTER (WHERE status = 'completed'), 0)::bigint
FROM mintgate.uploads WHERE tenant = 't2' AND ('' = '' OR subject = '') GROUP BY status`},
		{"GET /admin/tenants/at-ceiling?window=1h", `SELECT tenant, sum(signs)::bigint, sum(refused_caller + refused_tenant + refused_other)::bigint, count(*) FILTER (WHERE refused_tenant > 0)
FROM mintgate.tenant_minutes WHERE minute >= date_trunc('minute', now() - interval '1 hour')
GROUP BY tenant HAVING count(*) FILTER (WHERE refused_tenant > 0) > 0 ORDER BY 4 DESC, tenant`},
	} {
		t.Logf("%s:\n%s", q.name, pg.SQL(t, "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) "+q.sql))
	}
	measureWrites(t, pg.SQL, st)
}

// dropIndexes removes the uploads' indexes before the bulk load.
const dropIndexes = `ALTER TABLE mintgate.uploads DROP CONSTRAINT uploads_pkey;
DROP INDEX mintgate.uploads_caller_newest, mintgate.uploads_caller_status_newest, mintgate.uploads_tenant_usage`

// measureWrites times the feed's writes of many uploads, each a grant and
// its completion, in the feed's batches, with the WAL they wrote.
func measureWrites(t *testing.T, sql func(testing.TB, string) string, st *records.Store) {
	ctx := context.Background()
	const uploads, batch = 20000, 256
	walBefore := sql(t, "SELECT pg_current_wal_lsn()")
	start := time.Now()
	for i := 0; i < uploads; i += batch {
		gs := make([]ledger.Grant, 0, batch)
		ts := make([]records.Transition, 0, batch)
		for range batch {
			id := uuid.NewString()
			now := time.Now()
			gs = append(gs, ledger.Grant{URLID: id, Tenant: "w", Subject: "u:w", Key: "incoming/w/" + id, ContentType: "image/png", ContentLength: 1000, IssuedAt: now, ExpiresAt: now.Add(2 * time.Minute)})
			ts = append(ts, records.Transition{URLID: id, Tenant: "w", Key: "incoming/w/" + id, Status: records.Completed, Size: 1000, At: now})
		}
		if err := st.PutGrants(ctx, gs); err != nil {
			t.Fatal(err)
		}
		if err := st.Move(ctx, ts); err != nil {
			t.Fatal(err)
		}
	}
	took := time.Since(start)
	wal := sql(t, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '"+walBefore+"')::bigint")
	walBytes, _ := strconv.ParseFloat(wal, 64)
	t.Logf("write path: %d uploads (grant + completion) in %v: %.1f µs and %.0f WAL bytes per upload, %.0f uploads/s on one feed",
		uploads, took.Round(time.Millisecond), float64(took.Microseconds())/uploads, walBytes/uploads, uploads/took.Seconds())
}
