package quota

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/layout"
)

// record is a refund record: what a refund gave back, kept as the refunded
// marker's value so that an upload landing after it can take exactly that
// back (Complete). Whoever refunds (Refund, Undo) writes it in the same
// script that credits the buckets.
type record struct {
	At      int64          `json:"at"` // ms, the refund's clock
	Buckets []recordBucket `json:"buckets"`
	// Credited is what the refund actually gave each bucket, in order,
	// written by the refunding script itself (record.lua): less than the
	// grant's units where the bucket filled, none where it was full or its
	// key had expired. Absent in records written before it.
	Credited []float64 `json:"credited,omitempty"`
}

type recordBucket struct {
	Key      string  `json:"key"`
	Capacity float64 `json:"capacity"`
	Refill   float64 `json:"refill"`
	TTL      int64   `json:"ttlMs"`
	Units    float64 `json:"units,omitempty"` // a bucket of bytes: what the refund gave back per unit (bucket.Bucket.Units)
}

// RefundRecord is the refund record of a refund of bs at now, before the
// refunding script appends what it credited (CreditedRecord).
func RefundRecord(now time.Time, bs []bucket.Bucket) string {
	r := record{At: now.UnixMilli(), Buckets: make([]recordBucket, len(bs))}
	for i, b := range bs {
		r.Buckets[i] = recordBucket{Key: b.Key, Capacity: b.Limit.Capacity, Refill: b.Limit.Rate, TTL: b.Limit.TTL.Milliseconds(), Units: b.Units}
	}
	out, _ := json.Marshal(r) // strings and finite numbers always encode
	return string(out)
}

// CreditedRecord is what record.lua stores: refund record rec with the
// tokens the refund gave each of its buckets appended, six fractional
// digits each, as the buckets keep them. The Go twins write it the same.
func CreditedRecord(rec string, credited []float64) string {
	var b strings.Builder
	b.WriteString(rec[:len(rec)-1])
	b.WriteString(`,"credited":[`)
	for i, c := range credited {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatFloat(c, 'f', 6, 64))
	}
	b.WriteString("]}")
	return b.String()
}

// RefundCredits reads what a refund record says its refund gave each
// bucket, in order; nil for a record from before they were kept (whose
// take-back charges one unit of cost each).
func RefundCredits(s string) []float64 {
	var r record
	if json.Unmarshal([]byte(s), &r) != nil {
		return nil
	}
	return r.Credited
}

// ParseRefundRecord reads a refund record back into the buckets it credited,
// refusing any outside tenant's hash tag.
func ParseRefundRecord(tenant, s string) ([]bucket.Bucket, error) {
	var r record
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		return nil, fmt.Errorf("quota: refund record %q: %w", s, err)
	}
	bs := make([]bucket.Bucket, len(r.Buckets))
	for i, b := range r.Buckets {
		bs[i] = bucket.Bucket{Key: b.Key, Limit: bucket.Limit{Capacity: b.Capacity, Rate: b.Refill, TTL: time.Duration(b.TTL) * time.Millisecond}, Units: b.Units}
	}
	if len(bs) == 0 {
		return bs, nil // a marker-only refund (Due without buckets)
	}
	if err := checkBuckets(tenant, bs); err != nil {
		return nil, fmt.Errorf("quota: refund record %q: %w", s, err)
	}
	return bs, nil
}

// Completion is one ObjectCreated as Complete applies it.
type Completion struct {
	Tenant string
	URLID  string
	Value  string        // the done marker's value
	TTL    time.Duration // the done marker's TTL; MarkerTTL at the least
	// First sets the marker only if it is absent (SET NX) and reports its
	// previous value; otherwise it is overwritten.
	First bool
}

// Completed is what Complete found and did.
type Completed struct {
	Previous string // the done marker's value before, "" when it was absent
	Existed  bool   // the done marker existed before
	// TookBack: the grant had been refunded before its upload landed, and
	// that refund was taken back now (its buckets charged, below 0 if need
	// be). At most one Complete of a grant ever reports it.
	TookBack bool
}

// completeTries bounds the runs of complete.lua in one Complete: a refund
// can land between the first run's read and nothing after the done marker
// exists, so a second run always settles it.
const completeTries = 3

// Complete sets grant c's done marker (TTL the longer of c.TTL and
// MarkerTTL, so that it outlives every ledger message that could still
// carry the grant) and, if the grant was refunded before its upload
// landed, takes that refund back: the same buckets, the same shapes, one
// token each, in the same atomic step. Safe to repeat: the refunded marker
// records the take-back, and a grant with a done marker is never refunded.
//
// A completer SIGKILLed anywhere in it leaves one of three states, each
// settled by the redelivery of the notification: nothing written; the done
// marker set and a refund record not yet taken (a kill between the first
// run, which found the record, and the second, which takes it): the next
// Complete takes it; or done and taken, which no later Complete changes.
func (s *Store) Complete(ctx context.Context, now time.Time, c Completion) (Completed, error) {
	if err := CheckComplete(c); err != nil {
		return Completed{}, err
	}
	var (
		got   Completed
		rec   string
		first = true
	)
	for range completeTries {
		bs, err := recordBuckets(c.Tenant, rec)
		if err != nil {
			return Completed{}, err
		}
		in := completing{now: now, c: c, rec: rec, bs: bs}
		vals, err := completeScript.Run(ctx, s.rdb, completeKeys.Fill(len(bs), in), completeArgs.Fill(len(bs), in)...).Slice()
		if err != nil {
			return Completed{}, unavailable("complete", err)
		}
		prev, did, again, err := parseComplete(vals)
		if err != nil {
			return Completed{}, err
		}
		if first {
			got.Previous, got.Existed, first = prev.s, prev.ok, false
		}
		switch did {
		case "taken":
			got.TookBack = true
			return got, nil
		case "none":
			return got, nil
		}
		rec = again
	}
	return Completed{}, fmt.Errorf("%w: complete: the refund record kept changing", ErrUnavailable)
}

// completeTTL is the done marker's TTL for a configured ttl.
func completeTTL(ttl time.Duration) time.Duration { return max(ttl, MarkerTTL) }

// recordBuckets are the buckets of refund record rec ("" for none).
func recordBuckets(tenant, rec string) ([]bucket.Bucket, error) {
	if rec == "" {
		return nil, nil
	}
	return ParseRefundRecord(tenant, rec)
}

type maybe struct {
	s  string
	ok bool
}

// parseComplete reads complete.lua's reply.
func parseComplete(vals []any) (prev maybe, did, again string, err error) {
	if len(vals) < 2 {
		return maybe{}, "", "", fmt.Errorf("%w: complete replied %v", ErrUnavailable, vals)
	}
	if p, ok := vals[0].(string); ok {
		prev = maybe{s: p, ok: true}
	}
	did, _ = vals[1].(string)
	switch did {
	case "none", "taken":
		return prev, did, "", nil
	case "again":
		if len(vals) == 3 {
			if rec, ok := vals[2].(string); ok {
				return prev, did, rec, nil
			}
		}
	}
	return maybe{}, "", "", fmt.Errorf("%w: complete replied %v", ErrUnavailable, vals)
}

func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// TakenRecord is the refunded marker's value once the refund recorded at
// (ms) was taken back at now: what complete.lua writes, and TakenBack reads.
func TakenRecord(at int64, now time.Time) string {
	return `{"at":` + strconv.FormatInt(at, 10) + `,"taken":` + strconv.FormatInt(now.UnixMilli(), 10) + `}`
}

// RefundedAt reads the time of the refund from a refunded marker's value,
// whether its refund record is whole, taken back, or from before records
// (the bare time in ms).
func RefundedAt(value string) (time.Time, bool) {
	if ms, err := strconv.ParseInt(value, 10, 64); err == nil {
		return time.UnixMilli(ms), true
	}
	var r struct {
		At *int64 `json:"at"`
	}
	if err := json.Unmarshal([]byte(value), &r); err != nil || r.At == nil {
		return time.Time{}, false
	}
	return time.UnixMilli(*r.At), true
}

// TakenBack reports whether a refunded marker's value says its refund was
// taken back by an upload that landed after it.
func TakenBack(value string) bool {
	var r struct {
		Taken *int64 `json:"taken"`
	}
	return json.Unmarshal([]byte(value), &r) == nil && r.Taken != nil
}

// Complete's script, composed after the bucket core.
//
//go:embed complete.lua
var completeEntry string

// completing is one run of complete.lua: the Completion, the refund record
// the caller read ("" for none) and its buckets.
type completing struct {
	now time.Time
	c   Completion
	rec string
	bs  []bucket.Bucket
}

// Complete (complete.lua).
var (
	completeKeys = layout.Args("COMPLETE_KEYS",
		layout.Value("done", func(c completing) string { return keys.Done(c.c.Tenant, c.c.URLID) }),
		layout.Value("refunded", func(c completing) string { return keys.Refunded(c.c.Tenant, c.c.URLID) }),
		layout.Nest("buckets", bucket.CoreKeys, func(c completing) bucket.Charge { return charge(c.now, 1, c.bs) }),
	)
	completeArgs = layout.Args("COMPLETE",
		layout.Value("value", func(c completing) any { return c.c.Value }), // the done marker's
		layout.Value("ttl", func(c completing) any { return completeTTL(c.c.TTL).Milliseconds() }),
		// '1' to set the marker only when absent (SET NX), '0' to overwrite.
		layout.Value("nx", func(c completing) any { return boolArg(c.c.First) }),
		layout.Value("record", func(c completing) any { return c.rec }),
		layout.Nest("core", bucket.Core, func(c completing) bucket.Charge { return charge(c.now, 1, c.bs) }),
	)
)

// completeScript is complete.lua, composed once (see spendScript).
var completeScript = bucket.NewScript(completeEntry, completeKeys, completeArgs)

// CheckComplete is Complete's refusal of a call, nil for a valid one.
func CheckComplete(c Completion) error {
	if err := checkGrant(c.Tenant, c.URLID); err != nil {
		return err
	}
	if c.Value == "" {
		return fmt.Errorf("quota: done marker of %s: empty value", c.URLID)
	}
	return checkTTL("done marker", completeTTL(c.TTL))
}
