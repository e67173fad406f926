package records

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Tally is one signer's counts for one minute, by tenant: what it
// publishes on TallySubject once the minute is over, with ID as the
// message's Nats-Msg-Id.
type Tally struct {
	// ID names the signer instance and the minute ("<instance>/<minute
	// RFC 3339>"): applying a tally of an ID applied before adds nothing.
	ID      string          `json:"id"`
	Signer  string          `json:"signer"`
	Minute  time.Time       `json:"minute"`
	Tenants map[string]Tick `json:"tenants"`
}

// Tick is one tenant's counts in a Tally: signs that got a URL (201), and
// refusals (429) by the bucket that refused (refusedCaller: the caller's
// tier; refusedTenant: the tenant's; refusedOther: any other, such as the
// anonymous callers' shared bucket or a bytes bucket), and the bytes the
// signs granted.
type Tick struct {
	Signs         int64 `json:"signs,omitempty"`
	RefusedCaller int64 `json:"refusedCaller,omitempty"`
	RefusedTenant int64 `json:"refusedTenant,omitempty"`
	RefusedOther  int64 `json:"refusedOther,omitempty"`
	BytesGranted  int64 `json:"bytesGranted,omitempty"`
}

const addMinute = `
INSERT INTO mintgate.tenant_minutes AS m (tenant, minute, signs, refused_caller, refused_tenant, refused_other, bytes_granted)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (tenant, minute) DO UPDATE SET signs = m.signs + EXCLUDED.signs,
    refused_caller = m.refused_caller + EXCLUDED.refused_caller, refused_tenant = m.refused_tenant + EXCLUDED.refused_tenant,
    refused_other = m.refused_other + EXCLUDED.refused_other, bytes_granted = m.bytes_granted + EXCLUDED.bytes_granted`

// AddTally adds t to its tenants' minutes, once: the tally's ID is
// recorded in the same transaction, and a tally whose ID is there already
// adds nothing. A SIGKILL mid-way rolls the whole of it back.
func (s *Store) AddTally(ctx context.Context, t Tally) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO mintgate.tallies_applied (id) VALUES ($1) ON CONFLICT DO NOTHING`, t.ID)
		if err != nil || tag.RowsAffected() == 0 {
			return err // applied before: nothing to add
		}
		b := &pgx.Batch{}
		minute := t.Minute.UTC().Truncate(time.Minute)
		for tenant, k := range t.Tenants {
			b.Queue(addMinute, tenant, minute, k.Signs, k.RefusedCaller, k.RefusedTenant, k.RefusedOther, k.BytesGranted)
		}
		return tx.SendBatch(ctx, b).Close()
	})
	return unavailable("add tally "+t.ID, err)
}
