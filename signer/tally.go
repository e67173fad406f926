package main

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/mintgate/mintgate/shared/records"
	"github.com/mintgate/mintgate/signer/internal/ratelimit"
)

// tallier counts this signer's signs (201) and refusals (429, by the
// bucket that refused) per tenant and minute, in memory, and publishes
// each minute once it is over as a records.Tally on
// mintgate.tallies.<instance> with Nats-Msg-Id "<instance>/<minute>": the
// records' feed adds it to mintgate.tenant_minutes once, however often it
// is published. A sign only takes a lock and adds to a map: it never
// waits for NATS or PostgreSQL.
//
// A SIGKILL of the signer loses the minutes not published yet (at most
// the current one and the one before: an undercount of what was in
// flight, docs/production.md); a kill after a publish and before it is
// forgotten publishes it again on no restart (a new instance has a new
// id), so nothing is counted twice.
type tallier struct {
	instance string
	now      func() time.Time
	log      *slog.Logger

	mu      sync.Mutex
	minutes map[time.Time]map[string]*records.Tick

	pub func(ctx context.Context, t records.Tally) error
}

// newTallier is a tallier whose pub the caller sets; its instance id is
// the host's name and a random part, one subject token.
func newTallier(now func() time.Time, log *slog.Logger) *tallier {
	host, _ := os.Hostname()
	host = strings.Map(func(r rune) rune {
		if r == '.' || r == '*' || r == '>' || r <= ' ' || r == 0x7f {
			return '-'
		}
		return r
	}, host)
	if len(host) > 40 {
		host = host[:40]
	}
	id := strings.Trim(host+"-"+uuid.NewString()[:8], "-")
	t := &tallier{instance: id, now: now, log: log, minutes: map[time.Time]map[string]*records.Tick{}}
	return t
}

// tick is tenant's counts of the current minute, to add to under mu.
func (t *tallier) tick(tenant string) *records.Tick {
	m := t.now().UTC().Truncate(time.Minute)
	byTenant := t.minutes[m]
	if byTenant == nil {
		byTenant = map[string]*records.Tick{}
		t.minutes[m] = byTenant
	}
	k := byTenant[tenant]
	if k == nil {
		k = &records.Tick{}
		byTenant[tenant] = k
	}
	return k
}

// signed counts a 201 of tenant that granted bytes.
func (t *tallier) signed(tenant string, bytes int64) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	k := t.tick(tenant)
	k.Signs++
	k.BytesGranted += bytes
}

// refused counts a 429 of tenant by the scope that refused it.
func (t *tallier) refused(tenant, scope string) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	k := t.tick(tenant)
	switch scope {
	case ratelimit.ScopeCaller:
		k.RefusedCaller++
	case ratelimit.ScopeTenant:
		k.RefusedTenant++
	default:
		k.RefusedOther++
	}
}

// tallyEvery is how often finished minutes are published (and failed
// publishes retried).
const tallyEvery = 5 * time.Second

// run publishes the finished minutes every tallyEvery until ctx ends,
// then every minute it holds, the current one too (this instance counts
// no more).
func (t *tallier) run(ctx context.Context) {
	tk := time.NewTicker(tallyEvery)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			last, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			t.flush(last, true)
			cancel()
			return
		case <-tk.C:
			t.flush(ctx, false)
		}
	}
}

// flush publishes the minutes before the current one (all of them when
// all), forgetting each once its publish was acked; one that fails stays
// for the next flush.
func (t *tallier) flush(ctx context.Context, all bool) {
	current := t.now().UTC().Truncate(time.Minute)
	t.mu.Lock()
	var due []records.Tally
	for m, byTenant := range t.minutes {
		if !all && !m.Before(current) {
			continue
		}
		x := records.Tally{ID: t.instance + "/" + m.Format(time.RFC3339), Signer: t.instance, Minute: m, Tenants: map[string]records.Tick{}}
		for tenant, k := range byTenant {
			x.Tenants[tenant] = *k
		}
		due = append(due, x)
	}
	t.mu.Unlock()
	for _, x := range due {
		if err := t.pub(ctx, x); err != nil {
			t.log.Warn("tally not published; kept for the next try", "minute", x.Minute, "err", err)
			continue
		}
		t.mu.Lock()
		delete(t.minutes, x.Minute)
		t.mu.Unlock()
	}
}
