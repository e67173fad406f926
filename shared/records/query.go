package records

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Row is one upload as GET /uploads lists it.
type Row struct {
	URLID          string     `json:"urlId"`
	Key            string     `json:"key"`
	ContentType    string     `json:"contentType"`
	Size           *int64     `json:"size"`
	Status         string     `json:"status"`
	Reason         *string    `json:"reason"`
	ChecksumSHA256 *string    `json:"checksumSHA256"`
	Filename       *string    `json:"filename"`
	IssuedAt       time.Time  `json:"issuedAt"`
	EndedAt        *time.Time `json:"endedAt"`
}

// Page is one page of a caller's uploads, newest first, and the cursor of
// the next ("" on the last).
type Page struct {
	Uploads []Row
	Next    string
}

// ErrBadCursor is a cursor List did not make.
var ErrBadCursor = errors.New("records: cursor not valid")

// Filter is what List lists: one caller's rows, of one status or all.
type Filter struct {
	Tenant, Subject string
	Status          string // "" for all
	Limit           int    // 1..100
	Cursor          string // "" for the newest
}

// List is a page of f's rows, newest first by issue time (ties by urlId),
// by keyset: the cursor is the last row's (issuedAt, urlId), and the next
// page starts below it, through the index of the caller's rows
// (uploads_caller_newest or uploads_caller_status_newest) whatever the
// page's depth.
func (s *Store) List(ctx context.Context, f Filter) (Page, error) {
	at, id := time.Unix(1<<40, 0), "ffffffff-ffff-ffff-ffff-ffffffffffff"
	if f.Cursor != "" {
		var err error
		if at, id, err = decodeCursor(f.Cursor); err != nil {
			return Page{}, err
		}
	}
	q := `SELECT url_id::text, key, content_type, size, status, reason, checksum_sha256, filename, issued_at, ended_at
FROM mintgate.uploads WHERE tenant = $1 AND subject = $2 AND (issued_at, url_id) < ($3, $4::uuid)`
	args := []any{f.Tenant, f.Subject, at, id}
	if f.Status != "" {
		q += ` AND status = $6`
		args = append(args, f.Status)
	}
	q += ` ORDER BY issued_at DESC, url_id DESC LIMIT $5`
	args = append(args[:4], append([]any{f.Limit + 1}, args[4:]...)...)
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return Page{}, unavailable("list uploads", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Row, error) {
		var x Row
		err := r.Scan(&x.URLID, &x.Key, &x.ContentType, &x.Size, &x.Status, &x.Reason, &x.ChecksumSHA256, &x.Filename, &x.IssuedAt, &x.EndedAt)
		return x, err
	})
	if err != nil {
		return Page{}, unavailable("list uploads", err)
	}
	p := Page{Uploads: out}
	if len(out) > f.Limit {
		p.Uploads = out[:f.Limit]
		last := p.Uploads[f.Limit-1]
		p.Next = encodeCursor(last.IssuedAt, last.URLID)
	}
	return p, nil
}

func encodeCursor(at time.Time, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(at.UnixMicro(), 10) + "_" + id))
}

func decodeCursor(c string) (time.Time, string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return time.Time{}, "", ErrBadCursor
	}
	us, id, ok := strings.Cut(string(raw), "_")
	n, err := strconv.ParseInt(us, 10, 64)
	if !ok || err != nil || len(id) != 36 {
		return time.Time{}, "", ErrBadCursor
	}
	return time.UnixMicro(n), id, nil
}

// Usage is what a caller or a tenant has: its uploads, the bytes of the
// completed ones, and the count of each status.
type Usage struct {
	Uploads  int64            `json:"uploads"`
	Bytes    int64            `json:"bytes"`
	ByStatus map[string]int64 `json:"byStatus"`
}

// Usage counts the rows of tenant (and of subject, when not empty), from
// the index uploads_tenant_usage.
func (s *Store) Usage(ctx context.Context, tenant, subject string) (Usage, error) {
	q := `SELECT status, count(*), COALESCE(sum(size) FILTER (WHERE status = 'completed'), 0)::bigint
FROM mintgate.uploads WHERE tenant = $1 AND ($2 = '' OR subject = $2) GROUP BY status`
	rows, err := s.pool.Query(ctx, q, tenant, subject)
	if err != nil {
		return Usage{}, unavailable("usage", err)
	}
	defer rows.Close()
	u := Usage{ByStatus: map[string]int64{}}
	for rows.Next() {
		var (
			st    string
			n, by int64
		)
		if err := rows.Scan(&st, &n, &by); err != nil {
			return Usage{}, unavailable("usage", err)
		}
		u.ByStatus[st], u.Uploads, u.Bytes = n, u.Uploads+n, u.Bytes+by
	}
	return u, unavailable("usage", rows.Err())
}

// Ceiling is one tenant's refusals in a window.
type Ceiling struct {
	Tenant           string  `json:"tenant"`
	Signs            int64   `json:"signs"`
	Refused          int64   `json:"refused"`
	RefusedShare     float64 `json:"refusedShare"`
	MinutesAtCeiling int64   `json:"minutesAtCeiling"`
}

// AtCeiling lists the tenants with at least one minute in the window
// (since now-window) where the tenant bucket refused a sign, most such
// minutes first.
func (s *Store) AtCeiling(ctx context.Context, now time.Time, window time.Duration) ([]Ceiling, error) {
	q := `SELECT tenant, sum(signs)::bigint, sum(refused_caller + refused_tenant + refused_other)::bigint,
    count(*) FILTER (WHERE refused_tenant > 0)
FROM mintgate.tenant_minutes WHERE minute >= $1
GROUP BY tenant HAVING count(*) FILTER (WHERE refused_tenant > 0) > 0
ORDER BY 4 DESC, tenant`
	rows, err := s.pool.Query(ctx, q, now.Add(-window).UTC().Truncate(time.Minute))
	if err != nil {
		return nil, unavailable("at ceiling", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Ceiling, error) {
		var c Ceiling
		err := r.Scan(&c.Tenant, &c.Signs, &c.Refused, &c.MinutesAtCeiling)
		if total := c.Signs + c.Refused; total > 0 {
			c.RefusedShare = float64(c.Refused) / float64(total)
		}
		return c, err
	})
	if err != nil {
		return nil, unavailable("at ceiling", err)
	}
	return out, nil
}

// CheckStatus reports whether s is a status ?status= may name.
func CheckStatus(s string) error {
	for _, x := range Statuses {
		if s == x {
			return nil
		}
	}
	return fmt.Errorf("status %q is none of %s", s, strings.Join(Statuses, ", "))
}

// QueryValue is the first column of the first row of sql, as text: for
// tests and the tally's checks.
func (s *Store) QueryValue(ctx context.Context, sql string, args ...any) (string, error) {
	var v string
	err := s.pool.QueryRow(ctx, "SELECT ("+sql+")::text", args...).Scan(&v)
	return v, unavailable("query", err)
}
