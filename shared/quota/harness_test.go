package quota_test

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/quota"
	"github.com/mintgate/mintgate/shared/quota/quotatest"
	"github.com/mintgate/mintgate/shared/testenv"
)

// quotas is what a Store and a Twin both offer: the tests drive either
// through it, which also proves their methods are the same.
type quotas interface {
	Spend(ctx context.Context, now time.Time, a quota.Ask, inFlight time.Duration) (quota.Decision, error)
	SpendBatch(ctx context.Context, ss []quota.Spending) ([]quota.Spent, error)
	Undo(ctx context.Context, now time.Time, a quota.Ask, urlID string) (bool, error)
	Finish(ctx context.Context, a quota.Ask, f quota.Finished) error
	FinishBatch(ctx context.Context, fs []quota.Finishing) ([]error, error)
	FinishOwn(ctx context.Context, a quota.Ask, f quota.Finished) (bool, error)
	Cancel(ctx context.Context, now time.Time, a quota.Ask) (bool, error)
	Refund(ctx context.Context, now time.Time, ds []quota.Due) ([]quota.RefundOutcome, error)
	Status(ctx context.Context, tenant, urlID string) (quota.Status, error)
	Complete(ctx context.Context, now time.Time, c quota.Completion) (quota.Completed, error)
	Peek(ctx context.Context, now time.Time, tenant string, bs []bucket.Bucket) ([]bucket.Result, error)
}

var (
	_ quotas = (*quota.Store)(nil)
	_ quotas = (*quotatest.Twin)(nil)
)

// backend is one implementation under test, with a view of what it stores.
type backend struct {
	name string
	quotas
	set   func(t testing.TB, key, value string, ttl time.Duration) // SET PX, as the completer sets a done marker
	get   func(t testing.TB, ks ...string) []stored
	flush func(t testing.TB) // SCRIPT FLUSH on every node; nothing on a Twin
}

// stored is one key's state: a string's value or a hash's fields, and its
// time to live.
type stored struct {
	ok   bool
	str  string
	hash map[string]string
	ttl  time.Duration
}

// same reports whether two views of a key agree, TTLs within slack.
func (s stored) same(o stored, slack time.Duration) bool {
	d := s.ttl - o.ttl
	return s.ok == o.ok && s.str == o.str && maps.Equal(s.hash, o.hash) && d <= slack && d >= -slack
}

// isHash tells hashes (buckets, idempotency and grant records) from strings
// (markers) by the key scheme of shared/keys.
func isHash(key string) bool {
	return strings.HasPrefix(key, "rl:") || strings.HasPrefix(key, "sign:idem:") || strings.HasPrefix(key, "sign:grant:")
}

func redisBackend(name string, rdb redis.UniversalClient) backend {
	return backend{
		name:   name,
		quotas: quota.New(rdb),
		set: func(t testing.TB, key, value string, ttl time.Duration) {
			t.Helper()
			if err := rdb.Set(context.Background(), key, value, ttl).Err(); err != nil {
				t.Fatalf("set %s: %v", key, err)
			}
		},
		get: func(t testing.TB, ks ...string) []stored {
			t.Helper()
			ctx := context.Background()
			pipe := rdb.Pipeline()
			type read struct {
				ttl  *redis.DurationCmd
				str  *redis.StringCmd
				hash *redis.MapStringStringCmd
			}
			reads := make([]read, len(ks))
			for i, k := range ks {
				reads[i].ttl = pipe.PTTL(ctx, k)
				if isHash(k) {
					reads[i].hash = pipe.HGetAll(ctx, k)
				} else {
					reads[i].str = pipe.Get(ctx, k)
				}
			}
			if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
				t.Fatalf("read state: %v", err)
			}
			out := make([]stored, len(ks))
			for i, r := range reads {
				if r.ttl.Val() == -2 { // no such key
					continue
				}
				out[i] = stored{ok: true, ttl: r.ttl.Val()}
				if r.hash != nil {
					out[i].hash = r.hash.Val()
				} else {
					out[i].str = r.str.Val()
				}
			}
			return out
		},
		flush: func(t testing.TB) {
			t.Helper()
			if err := rdb.ScriptFlush(context.Background()).Err(); err != nil {
				t.Fatalf("script flush: %v", err)
			}
		},
	}
}

func twinBackend() backend {
	tw := quotatest.NewTwin(nil)
	return backend{
		name:   "twin",
		quotas: tw,
		set:    func(_ testing.TB, key, value string, ttl time.Duration) { tw.Set(key, value, ttl) },
		get: func(_ testing.TB, ks ...string) []stored {
			out := make([]stored, len(ks))
			for i, k := range ks {
				str, hash, ttl, ok := tw.Entry(k)
				out[i] = stored{ok: ok, str: str, hash: hash, ttl: ttl}
			}
			return out
		},
		flush: func(testing.TB) {},
	}
}

// servers starts a redis-server and, unless -short, a three-master cluster,
// and returns a client of each by name.
func servers(t *testing.T) map[string]redis.UniversalClient {
	out := map[string]redis.UniversalClient{"redis": startRedis(t)}
	if !testing.Short() {
		out["cluster"] = startCluster(t)
	}
	return out
}

func startRedis(tb testing.TB) redis.UniversalClient {
	rdb := redis.NewClient(&redis.Options{Addr: testenv.StartRedis(tb).Addr})
	tb.Cleanup(func() { rdb.Close() })
	return rdb
}

func startCluster(tb testing.TB) redis.UniversalClient {
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.StartRedisCluster(tb)})
	tb.Cleanup(func() { cl.Close() })
	return cl
}

// Tier shapes of the default tiers and anonymous_all.
var (
	userLimit    = bucket.Limit{Capacity: 30, Rate: 0.5}
	tenantLimit  = bucket.Limit{Capacity: 600, Rate: 10}
	anonLimit    = bucket.Limit{Capacity: 5, Rate: 5.0 / 60}
	anonAllLimit = bucket.Limit{Capacity: 150, Rate: 2.5}
)

const inFlight = 30 * time.Second
