package quota

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/keys"
)

// Values of the done marker (keys.Done) that carry the verification gate's
// state. The sweeper, a refund and an undo only ask whether the marker
// exists, so an upload being verified or rejected is never refunded; GET
// /uploads/{urlId} and the completer read the value (ReadDone).
const (
	// DoneVerifying is the completer's first write for an arrived object:
	// it is being verified, its verdict not known yet.
	DoneVerifying = "verifying"
	// DoneVerified: the object passed the verification gate; its
	// upload-completed event may not be stored yet.
	DoneVerified = "verified"
	// DoneCompleted: verified and its event stored (or events are off).
	DoneCompleted = "1"

	rejectingPrefix = "rejecting:"
	rejectedPrefix  = "rejected:"
)

// Rejecting is the done marker's value once the gate refused the object
// for reason and before its rejection is carried out (quarantine, event):
// the intent a redelivery resumes from.
func Rejecting(reason string) string { return rejectingPrefix + reason }

// Rejected is the done marker's value once the rejection for reason is
// carried out: the object in quarantine, its event stored.
func Rejected(reason string) string { return rejectedPrefix + reason }

// Verdict is what a done marker's value says of its upload.
type Verdict int

// The verdicts ReadDone tells apart.
const (
	// Unverified: the object arrived, no verdict yet (DoneVerifying, or
	// DoneUnpublished as the signer and the sweeper write it).
	Unverified Verdict = iota
	// Accepted: the object passed (DoneVerified, DoneCompleted, and any
	// value this code does not know: before the gate, a marker's mere
	// existence meant completed).
	Accepted
	// Refusing: the gate refused it; quarantine and event may be pending.
	Refusing
	// Refused: the rejection is carried out.
	Refused
)

// ReadDone reads a done marker's value: its verdict and, for a rejection,
// the reason.
func ReadDone(value string) (v Verdict, reason string) {
	switch {
	case value == DoneVerifying || value == DoneUnpublished:
		return Unverified, ""
	case strings.HasPrefix(value, rejectingPrefix):
		return Refusing, strings.TrimPrefix(value, rejectingPrefix)
	case strings.HasPrefix(value, rejectedPrefix):
		return Refused, strings.TrimPrefix(value, rejectedPrefix)
	}
	return Accepted, ""
}

// settleScript moves a done marker from one value to another only if it
// still holds the first, keeping its TTL: two deliveries of one record that
// reach different verdicts (a signature update between them) cannot both
// win, so an upload is never both completed and rejected.
var settleScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
  return {v, 1}
end
return {v, 0}`)

// Settle sets grant urlID's done marker to to if it holds from, and
// reports the value it held (from when it moved; "" when absent). It never
// creates the marker (Complete does, with the TTL that outlives every
// ledger message of the grant) and never takes a refund back: from the
// moment the marker exists no refund happens.
func (s *Store) Settle(ctx context.Context, tenant, urlID, from, to string) (held string, moved bool, err error) {
	if err := checkGrant(tenant, urlID); err != nil {
		return "", false, err
	}
	vals, err := settleScript.Run(ctx, s.rdb, []string{keys.Done(tenant, urlID)}, from, to).Slice()
	if err != nil {
		return "", false, unavailable("settle", err)
	}
	if len(vals) != 2 {
		return "", false, fmt.Errorf("%w: settle replied %v", ErrUnavailable, vals)
	}
	held, _ = vals[0].(string)
	n, _ := vals[1].(int64)
	return held, n == 1, nil
}

// GrantShape is what a grant was signed for, from its grant record.
type GrantShape struct {
	ContentType   string
	ContentLength int64
	// ChecksumSHA256 is the SHA-256 (base64) the grant's URL was bound
	// to, or "" (none, a multipart grant, or an older record).
	ChecksumSHA256 string
	// Known: the record exists and names both. A record written before
	// they were kept, or gone (its TTL passed, or a degraded sign wrote
	// none), leaves it false.
	Known bool
}

// Shape reads grant urlID's contentType and contentLength.
func (s *Store) Shape(ctx context.Context, tenant, urlID string) (GrantShape, error) {
	if err := checkGrant(tenant, urlID); err != nil {
		return GrantShape{}, err
	}
	vals, err := s.rdb.HMGet(ctx, keys.Grant(tenant, urlID), "contentType", "contentLength", "checksumSHA256").Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return GrantShape{}, unavailable("shape", err)
	}
	ct, _ := vals[0].(string)
	cl, _ := vals[1].(string)
	n, err := strconv.ParseInt(cl, 10, 64)
	if ct == "" || err != nil || n < 0 {
		return GrantShape{}, nil
	}
	sum, _ := vals[2].(string)
	return GrantShape{ContentType: ct, ContentLength: n, ChecksumSHA256: sum, Known: true}, nil
}
