package quota

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/keys"
)

// Status is what Redis knows of one grant.
type Status struct {
	Done      bool      // its upload landed: the completer's done marker
	DoneValue string    // the done marker's value (ReadDone says what it means)
	Refunded  bool      // its token was given back, by Undo or Refund
	ExpiresAt time.Time // from the grant record, in UTC
	Subject   string    // from the grant record
	Multipart string    // from the grant record: Finished.Multipart
	// ChecksumSHA256 is from the grant record: Finished.ChecksumSHA256.
	ChecksumSHA256 string
	// ContentType and ContentLength are what the grant was signed for,
	// Filename the name its uploader gave: from the grant record, empty
	// (0) in a record that lacks them.
	ContentType   string
	ContentLength int64
	Filename      string
	Found         bool // the grant record exists
}

func status(done, refunded bool, expiresAt, subject, multipart string) Status {
	s := Status{Done: done, Refunded: refunded, Subject: subject, Multipart: multipart}
	if ms, err := strconv.ParseInt(expiresAt, 10, 64); err == nil {
		s.ExpiresAt, s.Found = time.UnixMilli(ms).UTC(), true
	}
	return s
}

// Status reads the done marker, the refunded marker and the grant record of
// one grant in one round trip (they share the tenant's hash tag).
func (s *Store) Status(ctx context.Context, tenant, urlID string) (Status, error) {
	if err := CheckStatus(tenant, urlID); err != nil {
		return Status{}, err
	}
	pipe := s.rdb.Pipeline()
	done := pipe.Get(ctx, keys.Done(tenant, urlID))
	refunded := pipe.Exists(ctx, keys.Refunded(tenant, urlID))
	rec := pipe.HMGet(ctx, keys.Grant(tenant, urlID), "expiresAt", "subject", "multipart", "checksumSHA256", "contentType", "contentLength", "filename")
	// A done marker that is absent is GET's redis.Nil, which Exec reports
	// as its first error: each command's own error decides.
	_, _ = pipe.Exec(ctx)
	for _, err := range []error{done.Err(), refunded.Err(), rec.Err()} {
		if err != nil && !errors.Is(err, redis.Nil) {
			return Status{}, unavailable("status", err)
		}
	}
	expiresAt, _ := rec.Val()[0].(string)
	subject, _ := rec.Val()[1].(string)
	mp, _ := rec.Val()[2].(string)
	st := status(done.Err() == nil, refunded.Val() > 0, expiresAt, subject, mp)
	st.DoneValue = done.Val()
	st.ChecksumSHA256, _ = rec.Val()[3].(string)
	st.ContentType, _ = rec.Val()[4].(string)
	if n, ok := rec.Val()[5].(string); ok {
		st.ContentLength, _ = strconv.ParseInt(n, 10, 64)
	}
	st.Filename, _ = rec.Val()[6].(string)
	return st, nil
}

// CheckStatus is Status's refusal of a call, nil for a valid one.
func CheckStatus(tenant, urlID string) error { return checkGrant(tenant, urlID) }
