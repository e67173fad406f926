package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/s3event"
)

// marker is the one Redis call the completer makes.
type marker interface {
	Set(ctx context.Context, key string, value any, ttl time.Duration) *redis.StatusCmd
}

// completer is the business of SPEC §3: an upload that happened gets its
// done marker, so the sweeper does not refund its token.
type completer struct {
	rdb     marker
	bucket  string // MINTGATE_S3_BUCKET: the only bucket whose records count
	doneTTL time.Duration
	m       *metrics
	log     *slog.Logger
}

// handle sets the done marker for every ObjectCreated record of n from S3
// (eventSource aws:s3) for our bucket under incoming/<tenant>/<uuid>, and
// ignores (counting why) the test event and every other record: a done
// marker stops a refund, so a record of another bucket notifying the same
// queue, or one written by anyone else who can send to it, must not set it. It is safe to run twice on the same notification: SET
// of the same value changes nothing. An error means Redis failed; the
// caller must not delete the message.
func (c *completer) handle(ctx context.Context, n s3event.Notification) error {
	if n.IsTest() {
		c.m.ignored.WithLabelValues(ignoredTestEvent).Inc()
		return nil
	}
	for _, r := range n.Records {
		if reason := c.foreign(r); reason != "" {
			c.m.ignored.WithLabelValues(reason).Inc()
			c.log.Debug("record ignored", "reason", reason, "eventSource", r.EventSource, "bucket", r.S3.Bucket.Name)
			continue
		}
		if !r.IsObjectCreated() {
			c.m.ignored.WithLabelValues(ignoredNotCreated).Inc()
			continue
		}
		key, err := r.ObjectKey()
		if err != nil {
			return err // Parse accepts no such record
		}
		tenant, urlID, reason := upload(key)
		if reason != "" {
			c.m.ignored.WithLabelValues(reason).Inc()
			c.log.Debug("record ignored", "reason", reason, "bucket", r.S3.Bucket.Name, "key", key)
			continue
		}
		start := time.Now()
		err = c.rdb.Set(ctx, keys.Done(tenant, urlID), "1", c.doneTTL).Err()
		c.m.redisSeconds.Observe(time.Since(start).Seconds())
		if err != nil {
			return fmt.Errorf("mark %s done: %w", key, err)
		}
		c.m.done.Inc()
	}
	return nil
}

// foreign says why r is not a record of our bucket from S3, or is "".
func (c *completer) foreign(r s3event.Record) string {
	switch {
	case r.EventSource != "aws:s3":
		return ignoredSource
	case r.S3.Bucket.Name != c.bucket:
		return ignoredBucket
	}
	return ""
}

// upload splits a decoded object key incoming/<tenant>/<urlId> as the
// signer makes it; for any other key, reason says why it is not one.
func upload(key string) (tenant, urlID, reason string) {
	rest, ok := strings.CutPrefix(key, "incoming/")
	if !ok {
		return "", "", ignoredOutside
	}
	tenant, urlID, ok = strings.Cut(rest, "/")
	if !ok || !keys.ValidTenant(tenant) {
		return "", "", ignoredTenant
	}
	if !canonicalUUID(urlID) {
		return "", "", ignoredURLID
	}
	return tenant, urlID, ""
}

// canonicalUUID accepts only the form the signer issues (uuid.NewString:
// 36 characters, lower-case hex), so the marker's key is the grant's.
func canonicalUUID(s string) bool {
	u, err := uuid.Parse(s)
	return err == nil && u.String() == s
}
