package quota

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/layout"
)

// Spend: spend_fn.lua's spend(), composed after the bucket core and
// nonces.lua, once in spend.lua; spend_many.go runs it per Spend of a
// batch.
var (
	//go:embed nonces.lua
	noncesSrc string
	//go:embed spend_fn.lua
	spendFn string
	//go:embed spend.lua
	spendEntry string
)

// Live is a Spend's bound on its caller's live grants: grants that are
// neither completed, refunded (or aborted) nor past their life. The
// caller's live set (keys.LiveGrants) holds each allowed Spend's nonce
// (its urlId) until Until, its grant's life; a grant whose done or
// refunded marker exists leaves it at the caller's next Spend. A Spend
// that finds Max live grants takes nothing and answers LiveFull.
type Live struct {
	Key   string    // keys.LiveGrants(tenant, subject)
	Max   int       // at least 1
	Until time.Time // this Spend's grant's end of life (its expiresAt)
}

// Outcome is what Spend decided.
type Outcome int

// The outcomes of Spend. The zero Outcome is none of them.
const (
	Allowed    Outcome = iota + 1 // a token was spent from every bucket and the key marked in flight
	Denied                        // a bucket is short: nothing was spent (429)
	Replay                        // the key completed with the same request: Body is its 201 body
	Reused                        // the key belongs to a different request (422)
	InProgress                    // the key's first request is still in flight (409)
	Cancelled                     // this very request (its nonce) was cancelled before the Spend ran: nothing was spent or marked
	Late                          // the Spend ran after Ask.Until by Redis's clock: nothing was read, spent or marked
	LiveFull                      // the caller holds Ask.Live.Max live grants: nothing was spent (429, Decision.Result.RetryAfter)
)

// String names the outcome.
func (o Outcome) String() string {
	switch o {
	case Allowed:
		return "allowed"
	case Denied:
		return "denied"
	case Replay:
		return "replay"
	case Reused:
		return "reused"
	case InProgress:
		return "in progress"
	case Cancelled:
		return "cancelled"
	case Late:
		return "late"
	case LiveFull:
		return "live grants full"
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// Decision is Spend's answer.
type Decision struct {
	Outcome Outcome
	Result  bucket.Result // Allowed and Denied: the buckets' answer, for the RateLimit headers
	Body    []byte        // Replay: the stored 201 body
}

func decided(r bucket.Result) Decision {
	if r.Allowed {
		return Decision{Outcome: Allowed, Result: r}
	}
	return Decision{Outcome: Denied, Result: r}
}

func replayed(body string) Decision { return Decision{Outcome: Replay, Body: []byte(body)} }

// Spending is one Spend of a batch: Store.Spend's arguments.
type Spending struct {
	Now      time.Time // the caller's clock, for this Spend's buckets
	Ask      Ask
	InFlight time.Duration
}

// Spend's KEYS and ARGV: one SPEND_KEYS and one SPEND record (spend.lua
// puts each at 1; spend_many.lua puts one of each per Spend).
var (
	spendKeys = layout.Record("SPEND_KEYS",
		layout.Value("idem", func(s Spending) string { return s.Ask.Idem }),
		layout.Nest("live", liveKeys, func(s Spending) Spending { return s }),
		layout.Nest("buckets", bucket.CoreKeys, func(s Spending) bucket.Charge { return charge(s.Now, 1, s.Ask.Buckets) }),
	)
	spendArgs = layout.Record("SPEND",
		layout.Value("fp", func(s Spending) any { return s.Ask.Fingerprint }),
		layout.Value("nonce", func(s Spending) any { return s.Ask.Nonce }),
		layout.Value("in_flight", func(s Spending) any { return s.InFlight.Milliseconds() }), // ms
		// The last Redis time (unix ms) at which this Spend may run, 0 for no limit.
		layout.Value("last", func(s Spending) any { return untilMillis(s.Ask.Until) }),
		layout.Nest("live", liveArgs, func(s Spending) *Live { return s.Ask.Live }),
		layout.Nest("core", bucket.Core, func(s Spending) bucket.Charge { return charge(s.Now, 1, s.Ask.Buckets) }),
	)

	// liveKeys is the live-grants bound's key, the caller's live set. A
	// Spend without the bound names its idempotency record there instead:
	// KEYS holds no nil, and a key outside the tenant's hash tag would
	// fail with CROSSSLOT on Redis Cluster. The script touches it only
	// under a bound (LIVE.max > 0).
	liveKeys = layout.Record("LIVE_KEYS",
		layout.Value("set", func(s Spending) string {
			if s.Ask.Live == nil {
				return s.Ask.Idem
			}
			return s.Ask.Live.Key
		}),
	)
	// liveArgs is the bound itself, and where the markers of a live
	// grant are: spend_fn.lua prunes the set of every urlId whose done or
	// refunded marker exists. Which urlIds the set holds is known only
	// inside the script, so their markers cannot be listed in KEYS
	// beforehand; the script builds each as prefix .. urlId instead. Both
	// prefixes carry the tenant's hash tag, as every key of the call does
	// (CheckSpend), so the keys built from them are of the call's one slot.
	liveArgs = layout.Record("LIVE",
		layout.Value("max", func(l *Live) any { // 0: no bound
			if l == nil {
				return 0
			}
			return l.Max
		}),
		layout.Value("ends", func(l *Live) any { // ms: this Spend's grant's end of life
			if l == nil {
				return 0
			}
			return l.Until.UnixMilli()
		}),
		layout.Value("done_prefix", func(l *Live) any { return markerPrefix(l, keys.Done) }),
		layout.Value("refunded_prefix", func(l *Live) any { return markerPrefix(l, keys.Refunded) }),
	)
)

// markerPrefix is the key of marker of the grant urlID less the urlID,
// in the tenant of l's set; "" for no bound.
func markerPrefix(l *Live, marker func(tenant, urlID string) string) string {
	if l == nil {
		return ""
	}
	tenant, _ := keys.TagOf(l.Key)
	return marker(tenant, "")
}

func untilMillis(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// spendScript is spend.lua, composed once: a name it reads that its
// layouts lack stops the program here, at its start.
var spendScript = bucket.NewScript(noncesSrc+"\n"+spendFn+"\n"+spendEntry, spendKeys, spendArgs)

// Spend checks the idempotency record and, for a new request, takes one
// token from every bucket or from none, marking the key in flight for
// inFlight when it did: one round trip. A cancelled record (a tombstone) is
// no record for any other request; for the request it names, the answer is
// Cancelled and nothing is touched. A Spend that runs after a.Until (by
// Redis's clock) touches nothing and answers Late.
func (s *Store) Spend(ctx context.Context, now time.Time, a Ask, inFlight time.Duration) (Decision, error) {
	if err := CheckSpend(a, inFlight); err != nil {
		return Decision{}, err
	}
	sp := Spending{Now: now, Ask: a, InFlight: inFlight}
	n := len(a.Buckets)
	vals, err := spendScript.Run(ctx, s.rdb, spendKeys.Fill(n, sp), spendArgs.Fill(n, sp)...).Slice()
	if err != nil {
		return Decision{}, unavailable("spend", err)
	}
	return parseSpend(vals)
}

// parseSpend reads spend.lua's reply.
func parseSpend(vals []any) (Decision, error) {
	if len(vals) == 0 {
		return Decision{}, fmt.Errorf("%w: spend replied nothing", ErrUnavailable)
	}
	if w, ok := vals[0].(string); ok {
		switch {
		case w == "reused":
			return Decision{Outcome: Reused}, nil
		case w == "pending":
			return Decision{Outcome: InProgress}, nil
		case w == "cancelled":
			return Decision{Outcome: Cancelled}, nil
		case w == "late":
			return Decision{Outcome: Late}, nil
		case w == "live" && len(vals) == 2:
			secs, _ := vals[1].(int64)
			return Decision{Outcome: LiveFull, Result: bucket.Result{RetryAfter: time.Duration(max(secs, 1)) * time.Second, Blocked: -1}}, nil
		case w == "replay" && len(vals) == 2:
			body, _ := vals[1].(string)
			return replayed(body), nil
		}
		return Decision{}, fmt.Errorf("%w: spend replied %q", ErrUnavailable, w)
	}
	res, err := bucket.ParseResult(vals)
	if err != nil {
		return Decision{}, unavailable("spend", err)
	}
	return decided(res), nil
}

// CheckSpend is Spend's and Coalescer.Spend's refusal of a call, nil for a
// valid one.
func CheckSpend(a Ask, inFlight time.Duration) error {
	if err := checkTTL("in-flight", inFlight); err != nil {
		return err
	}
	if l := a.Live; l != nil {
		if l.Max < 1 || l.Until.IsZero() {
			return fmt.Errorf("quota: live grants: max %d until %v: want at least 1 and a time", l.Max, l.Until)
		}
		if err := inTenant(a.Tenant, l.Key); err != nil {
			return err
		}
	}
	return checkAsk(a, true)
}
