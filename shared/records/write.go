package records

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mintgate/mintgate/shared/ledger"
)

// upsertGrants inserts the grants' rows as issued, or fills in what an
// earlier event's row lacked; a row's status is never touched (issued is
// the first). One statement for the whole slice.
var upsertGrants = `
INSERT INTO mintgate.uploads AS u (url_id, tenant, subject, key, content_type, content_length, multipart,
    checksum_sha256, filename, status, issued_at, expires_at)
SELECT g.url_id, g.tenant, g.subject, g.key, g.content_type, NULLIF(g.content_length, 0), g.multipart,
    NULLIF(g.checksum, ''), NULLIF(g.filename, ''), 'issued', g.issued_at, g.expires_at
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::bool[],
    $8::text[], $9::text[], $10::timestamptz[], $11::timestamptz[])
    AS g(url_id, tenant, subject, key, content_type, content_length, multipart, checksum, filename, issued_at, expires_at)
ON CONFLICT (url_id) DO UPDATE SET
    subject = EXCLUDED.subject, key = EXCLUDED.key, content_type = EXCLUDED.content_type,
    content_length = EXCLUDED.content_length, multipart = EXCLUDED.multipart,
    checksum_sha256 = COALESCE(u.checksum_sha256, EXCLUDED.checksum_sha256),
    filename = EXCLUDED.filename, issued_at = EXCLUDED.issued_at, expires_at = EXCLUDED.expires_at
WHERE u.issued_at IS NULL`

// PutGrants records gs as issued rows (a row that exists keeps its
// status): a replay changes nothing.
func (s *Store) PutGrants(ctx context.Context, gs []ledger.Grant) error {
	seen := make(map[string]bool, len(gs))
	var (
		ids, tenants, subjects, keys, types, checksums, names []string
		lengths                                               []int64
		multi                                                 []bool
		issued, expires                                       []time.Time
	)
	for _, g := range gs {
		if seen[g.URLID] {
			continue // one row may be touched once per statement
		}
		seen[g.URLID] = true
		ids, tenants, subjects, keys = append(ids, g.URLID), append(tenants, g.Tenant), append(subjects, g.Subject), append(keys, g.Key)
		types, checksums, names = append(types, g.ContentType), append(checksums, g.ChecksumSHA256), append(names, g.Filename)
		lengths, multi = append(lengths, g.ContentLength), append(multi, g.UploadID != "")
		issued, expires = append(issued, g.IssuedAt), append(expires, g.ExpiresAt)
	}
	if len(ids) == 0 {
		return nil
	}
	_, err := s.pool.Exec(ctx, upsertGrants, ids, tenants, subjects, keys, types, lengths, multi, checksums, names, issued, expires)
	return unavailable("record grants", err)
}

// Transition is one upload's move to a later status, from an event.
type Transition struct {
	URLID, Tenant, Key string
	Status             string // Completed, Rejected, Refunded or Aborted
	Reason             string // a rejection's
	Size               int64  // the object's, when known (completed, rejected)
	Checksum           string // the SHA-256 bound (base64), when known
	At                 time.Time
}

// moveRow applies one Transition: the row takes the status only if it
// ranks higher than its own (a replay, or an older state arriving late,
// changes nothing); a row not there yet (its grant not read yet) is
// created with what the event knows. A refund or rejection that moved a
// row is counted once in its tenant's minute.
var moveRow = fmt.Sprintf(`
WITH moved AS (
    INSERT INTO mintgate.uploads AS u (url_id, tenant, key, status, reason, size, checksum_sha256, ended_at)
    VALUES ($1, $2, $3, $4, NULLIF($5, ''), NULLIF($6::bigint, -1), NULLIF($7, ''), $8)
    ON CONFLICT (url_id) DO UPDATE SET status = EXCLUDED.status, reason = EXCLUDED.reason,
        size = COALESCE(EXCLUDED.size, u.size), ended_at = EXCLUDED.ended_at,
        checksum_sha256 = COALESCE(u.checksum_sha256, EXCLUDED.checksum_sha256)
    WHERE %s > %s
    RETURNING tenant, status
)
INSERT INTO mintgate.tenant_minutes AS m (tenant, minute, refunds, rejections)
SELECT tenant, date_trunc('minute', $8::timestamptz), (status = 'refunded')::int, (status = 'rejected')::int
FROM moved WHERE status IN ('refunded', 'rejected')
ON CONFLICT (tenant, minute) DO UPDATE SET refunds = m.refunds + EXCLUDED.refunds, rejections = m.rejections + EXCLUDED.rejections`,
	fmt.Sprintf(rank, "EXCLUDED.status"), fmt.Sprintf(rank, "u.status"))

// Move applies ts in one round trip; each is idempotent.
func (s *Store) Move(ctx context.Context, ts []Transition) error {
	b := &pgx.Batch{}
	for _, t := range ts {
		size := t.Size
		if t.Status == Refunded || t.Status == Aborted {
			size = -1 // unknown: keep the row's
		}
		b.Queue(moveRow, t.URLID, t.Tenant, t.Key, t.Status, t.Reason, size, t.Checksum, t.At.UTC())
	}
	return unavailable("move rows", s.batch(ctx, b))
}
