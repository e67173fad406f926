package quota

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/keys"
)

// Traceparent reads the sign's W3C traceparent from the grant record of
// urlID (Finished.Traceparent): "" when the signer did not trace, or the
// record is gone.
func (s *Store) Traceparent(ctx context.Context, tenant, urlID string) (string, error) {
	if err := checkGrant(tenant, urlID); err != nil {
		return "", err
	}
	v, err := s.rdb.HGet(ctx, keys.Grant(tenant, urlID), "traceparent").Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", unavailable("traceparent", err)
	}
	return v, nil
}
