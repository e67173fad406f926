package quota_test

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/quota"
	"github.com/mintgate/mintgate/shared/testenv"
)

// big never runs dry, so every Spend takes the whole path.
var big = bucket.Limit{Capacity: 1e12, Rate: 1e9}

// BenchmarkSpend is one sign decision (idempotency check, two buckets,
// in-flight mark) against a redis-server on loopback, a fresh key each time.
// Run: go test -run '^$' -bench . ./shared/quota/
func BenchmarkSpend(b *testing.B) {
	q := quota.New(startRedis(b))
	bs := []bucket.Bucket{{Key: keys.Bucket("b", "u:a"), Limit: big}, {Key: keys.TenantBucket("b"), Limit: big}}
	i := 0
	for b.Loop() {
		i++
		a := quota.Ask{Tenant: "b", Idem: keys.Idempotency("b", "u:a", strconv.Itoa(i)), Fingerprint: "fp", Nonce: "n", Buckets: bs}
		if d, err := q.Spend(ctx, time.Now(), a, inFlight); err != nil || d.Outcome != quota.Allowed {
			b.Fatalf("spend: %+v %v", d, err)
		}
	}
}

// BenchmarkRefund is the sweeper's work for 64 due grants over 4 tenants
// (8 callers each): one batched Refund, against 64 single-grant Refund
// calls, on a redis-server and on a three-master cluster. Every grant is
// fresh, so each is really refunded. ns/grant compares the two.
func BenchmarkRefund(b *testing.B) {
	const grants, tenants = 64, 4
	due := func(round int) []quota.Due {
		ds := make([]quota.Due, grants)
		for j := range ds {
			tn := fmt.Sprintf("bench%d", j%tenants)
			sub := keys.UserSubject(strconv.Itoa(j % 8))
			ds[j] = quota.Due{Tenant: tn, URLID: fmt.Sprintf("%d-%d", round, j), Buckets: []bucket.Bucket{
				{Key: keys.Bucket(tn, sub), Limit: userLimit}, {Key: keys.TenantBucket(tn), Limit: tenantLimit},
			}}
		}
		return ds
	}
	refund := func(b *testing.B, q *quota.Store, ds []quota.Due) {
		out, err := q.Refund(ctx, time.Now(), ds)
		if err != nil || out[0] != quota.Refunded {
			b.Fatalf("refund: %v %v", out, err)
		}
	}
	clients := []struct {
		name  string
		start func(testing.TB) redis.UniversalClient
	}{{"redis", startRedis}, {"cluster", startCluster}}
	for _, c := range clients {
		b.Run(c.name, func(b *testing.B) {
			q := quota.New(c.start(b))
			round := 0
			b.Run("batch", func(b *testing.B) {
				for b.Loop() {
					round++
					refund(b, q, due(round))
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*grants), "ns/grant")
			})
			b.Run("single", func(b *testing.B) {
				for b.Loop() {
					round++
					for _, d := range due(round) {
						refund(b, q, []quota.Due{d})
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*grants), "ns/grant")
			})
		})
	}
}

// BenchmarkScriptCost is where a Spend's time inside Redis goes: Redis's
// own time per script call (INFO commandstats, usec_per_call: what its one
// thread spends, whatever the client and the sockets cost) for an empty
// script and one command, both with a Spend's KEYS and ARGV; a Spend's ten
// commands with none of its logic; the Spend itself; and go-redis/redis_rate's
// Allow. Run: go test -run '^$' -bench ScriptCost ./shared/quota/
func BenchmarkScriptCost(b *testing.B) {
	rdb := startRedis(b).(*redis.Client)
	q := quota.New(rdb)
	bs := []bucket.Bucket{{Key: keys.Bucket("b", "u:a"), Limit: big}, {Key: keys.TenantBucket("b"), Limit: big}}
	ask := func(i int) quota.Ask {
		return quota.Ask{Tenant: "b", Idem: keys.Idempotency("b", "u:a", strconv.Itoa(i)), Fingerprint: "fp", Nonce: "n" + strconv.Itoa(i), Buckets: bs}
	}
	// A Spend's arguments: three keys, and fingerprint, nonce, in-flight
	// TTL, deadline, now, cost and each bucket's capacity, rate and TTL.
	script := func(src string) func(i int) error {
		s := redis.NewScript(src)
		return func(i int) error {
			a := ask(i)
			return s.Run(ctx, rdb, []string{a.Idem, bs[0].Key, bs[1].Key}, a.Fingerprint, a.Nonce, 30000, 0,
				time.Now().UnixMilli(), 1, 1e12, 1e9, 100000, 1e12, 1e9, 100000).Err()
		}
	}
	lim := redis_rate.NewLimiter(rdb)
	cases := []struct {
		name string
		call func(i int) error
	}{
		{"empty script", script("return 1")},
		{"one command", script("redis.call('PEXPIRE', KEYS[1], ARGV[3]) return 1")},
		{"a Spend's ten commands, no logic", script(spendCommands)},
		{"Spend", func(i int) error {
			d, err := q.Spend(ctx, time.Now(), ask(i), inFlight)
			if err == nil && d.Outcome != quota.Allowed {
				err = fmt.Errorf("spend: %+v", d)
			}
			return err
		}},
		{"Finish before issue 22: one script", finishScript(rdb)},
		{"Finish: MULTI/EXEC of plain commands", func(i int) error {
			return q.Finish(ctx, ask(i), quota.Finished{URLID: "g" + strconv.Itoa(i), Subject: "u:a", Body: finishBody,
				ExpiresAt: time.Now().Add(time.Minute), RecordTTL: time.Minute, GrantTTL: time.Hour})
		}},
		{"redis_rate Allow", func(int) error {
			// A million a second, not a billion: a 1 ns step is below
			// redis_rate's float precision, and its script would only read.
			_, err := lim.Allow(ctx, "rate:b", redis_rate.PerSecond(1_000_000))
			return err
		}},
	}
	i := 0
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			i++
			if err := c.call(i); err != nil { // loads the script
				b.Fatal(err)
			}
			if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			cpu0 := redisCPU(b, rdb)
			for b.Loop() {
				i++
				if err := c.call(i); err != nil {
					b.Fatal(err)
				}
			}
			info, err := rdb.Info(ctx, "commandstats").Result()
			if err != nil {
				b.Fatal(err)
			}
			if calls, spent := testenv.ScriptStats(info); calls > 0 {
				b.ReportMetric(float64(spent.Microseconds())/float64(calls), "redis-µs/call")
			}
			b.ReportMetric(float64((redisCPU(b, rdb)-cpu0).Microseconds())/float64(b.N), "redis-cpu-µs/op")
		})
	}
}

// redisCPU is the CPU Redis's process used so far (INFO cpu: user and
// system), sockets included.
func redisCPU(b *testing.B, rdb *redis.Client) time.Duration {
	info, err := rdb.Info(ctx, "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for line := range strings.SplitSeq(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_user" || k == "used_cpu_sys" {
			f, _ := strconv.ParseFloat(v, 64)
			sum += f
		}
	}
	return time.Duration(sum * float64(time.Second))
}

// finishBody is a 201 body's size.
var finishBody = bytes.Repeat([]byte("x"), 700)

// finishScript is the completing write as it was before issue 22, one
// script (finish_fn.lua): a state check, then the same HSETs and PEXPIREs
// Finish now sends as plain commands in one MULTI/EXEC.
func finishScript(rdb *redis.Client) func(i int) error {
	s := redis.NewScript(`
if redis.call('HGET', KEYS[1], 'state') ~= 'cancelled' then
  redis.call('HSET', KEYS[1], 'state', 'done', 'fp', ARGV[1], 'nonce', ARGV[2], 'body', ARGV[3])
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
end
redis.call('HSET', KEYS[2], 'expiresAt', ARGV[5], 'subject', ARGV[6])
if ARGV[8] ~= '' then redis.call('HSET', KEYS[2], 'multipart', ARGV[8]) end
redis.call('PEXPIRE', KEYS[2], ARGV[7])
return 1`)
	return func(i int) error {
		idem := keys.Idempotency("b", "u:a", strconv.Itoa(i))
		return s.Run(ctx, rdb, []string{idem, keys.Grant("b", "g"+strconv.Itoa(i))}, "fp", "n"+strconv.Itoa(i), finishBody, 60000,
			time.Now().Add(time.Minute).UnixMilli(), "u:a", 3600000, "").Err()
	}
}

// spendCommands is what a Spend asks of Redis, without the logic around:
// read the idempotency record and both buckets, write both buckets and
// their TTLs, replace the record and set its TTL.
const spendCommands = `
redis.call('HMGET', KEYS[1], 'state', 'fp', 'body', 'nonce')
redis.call('HMGET', KEYS[2], 't', 'ts')
redis.call('HMGET', KEYS[3], 't', 'ts')
redis.call('HSET', KEYS[2], 't', '1.000000', 'ts', ARGV[5])
redis.call('PEXPIRE', KEYS[2], ARGV[9])
redis.call('HSET', KEYS[3], 't', '1.000000', 'ts', ARGV[5])
redis.call('PEXPIRE', KEYS[3], ARGV[12])
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'state', 'pending', 'fp', ARGV[1], 'nonce', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1`
