package quota

import (
	"context"
	"errors"
	"time"
)

// Keep makes a's idempotency record done with body for ttl, the answer a
// same-key replay then gets for free: Finish without a grant record, for a
// request that issues no grant to keep (a download grant). It moves no
// tokens: plain commands in one MULTI/EXEC. Like Finish it replaces what
// the record held; it follows this request's allowed Spend.
func (s *Store) Keep(ctx context.Context, a Ask, body []byte, ttl time.Duration) error {
	if err := checkAsk(a, false); err != nil {
		return err
	}
	if err := checkTTL("record", ttl); err != nil {
		return err
	}
	if len(body) == 0 {
		return errors.New("quota: keep: no body")
	}
	pipe := s.rdb.TxPipeline()
	pipe.HSet(ctx, a.Idem, "state", "done", "fp", a.Fingerprint, "nonce", a.Nonce, "body", body)
	pipe.PExpire(ctx, a.Idem, ttl)
	if _, err := pipe.Exec(ctx); err != nil {
		return unavailable("keep", err)
	}
	return nil
}
