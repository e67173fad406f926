package main

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/ledger"
	"github.com/mintgate/mintgate/shared/streamstest"
	"github.com/mintgate/mintgate/shared/testenv"
)

// Tiers whose refill is negligible during a test, so a bucket's tokens
// count the refunds exactly; anonymous keeps its real capacity of 5.
const testTiers = "anonymous=5:5/60s,user=1000:0.001,tenant=100000:0.001"

const tenant = "acme"

// stack is the real servers a sweeper test runs against, and the signer's
// side of the ledger to record grants with.
type stack struct {
	t       *testing.T
	redis   *testenv.Redis
	nats    *testenv.NATS // nil on a cluster (newClusterStack)
	natsURL string
	rdb     *redis.Client
	ledger  *ledger.Client
	grace   time.Duration
	opts    []option // given to every sweeper the stack starts
}

// newStack starts redis and nats-server. A durable Redis keeps its data
// across Stop and Start (append-only file, fsync always), so outage tests
// can count refunds from before and after.
func newStack(t *testing.T, durableRedis bool) *stack {
	t.Helper()
	return newStackWith(t, durableRedis, testenv.NATSOptions{})
}

// newStackWith is newStack with a nats-server shaped by opts.
func newStackWith(t *testing.T, durableRedis bool, opts testenv.NATSOptions) *stack {
	t.Helper()
	var extra []string
	if durableRedis {
		extra = []string{"--appendonly", "yes", "--appendfsync", "always"}
	}
	s := &stack{t: t, redis: testenv.StartRedis(t, extra...), nats: testenv.StartNATSWith(t, opts), grace: time.Second}
	s.natsURL = s.nats.URL()
	return s.dial(0)
}

// ledgerGap is the MinGap of the ledgers stacks dial (the load report's -gap).
var ledgerGap time.Duration

// dial connects s to Redis and opens the ledger with replicas (0: the
// stream's, else 1).
func (s *stack) dial(replicas int) *stack {
	t := s.t
	s.rdb = redis.NewClient(&redis.Options{Addr: s.redis.Addr, MaxRetries: -1})
	t.Cleanup(func() { s.rdb.Close() })
	streamstest.EnsureLedger(t, s.natsURL, ledger.Config{Replicas: replicas}) // the operator step
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := ledger.Dial(ctx, s.natsURL, ledger.Config{Grace: s.grace, Secret: []byte(testenv.GrantSecret), Replicas: replicas, MinGap: ledgerGap})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	s.ledger = l
	return s
}

func (s *stack) env(extra map[string]string) func(string) string {
	vars := map[string]string{
		"MINTGATE_REDIS_URL":     s.redis.URL(),
		"MINTGATE_NATS_URL":      s.natsURL,
		"MINTGATE_HTTP_ADDR":     fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(s.t)),
		"MINTGATE_TIERS":         testTiers,
		"MINTGATE_SWEEP_GRACE":   s.grace.String(),
		"MINTGATE_REDIS_TIMEOUT": "150ms",
		"MINTGATE_GRANT_SECRET":  testenv.GrantSecret,
	}
	maps.Copy(vars, testenv.UnusedS3Env())
	for k, v := range extra {
		vars[k] = v
	}
	return func(k string) string { return vars[k] }
}

// instance is one sweeper started in-process by run.
type instance struct {
	addr   string
	cancel context.CancelFunc
	done   chan error
	logs   *testenv.Buffer
}

// start runs a sweeper and waits until it answers /healthz.
func (s *stack) start() *instance {
	s.t.Helper()
	return s.startWith(nil)
}

// startWith is start with the variables of extra on top of the stack's.
func (s *stack) startWith(extra map[string]string) *instance {
	s.t.Helper()
	getenv := s.env(extra)
	ctx, cancel := context.WithCancel(context.Background())
	in := &instance{addr: getenv("MINTGATE_HTTP_ADDR"), cancel: cancel, done: make(chan error, 1), logs: &testenv.Buffer{}}
	go func() { in.done <- runWith(ctx, []string{"sweeper"}, getenv, in.logs, s.opts...) }()
	s.t.Cleanup(func() {
		in.stop()
		if s.t.Failed() {
			s.t.Logf("sweeper %s logs:\n%s", in.addr, in.logs)
		}
	})
	waitFor(s.t, 15*time.Second, "sweeper /healthz", func() bool {
		select {
		case err := <-in.done:
			s.t.Fatalf("sweeper exited at start: %v\n%s", err, in.logs)
		default:
		}
		resp, err := http.Get("http://" + in.addr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return in
}

// stop cancels the sweeper and waits for run to return.
func (in *instance) stop() error {
	in.cancel()
	select {
	case err, ok := <-in.done:
		if ok {
			close(in.done)
		}
		return err
	case <-time.After(30 * time.Second):
		return fmt.Errorf("sweeper %s did not stop", in.addr)
	}
}

// metric reads one sample (name or name{labels}) from /metrics; the test
// fails when there is no such series.
func (in *instance) metric(t *testing.T, name string) float64 {
	t.Helper()
	return testenv.Metric(t, "http://"+in.addr+"/metrics", name)
}

func (in *instance) status(path string) int {
	resp, err := http.Get("http://" + in.addr + path)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func newGrant(id, tier, subject string, expires time.Time) ledger.Grant {
	return ledger.Grant{
		URLID: id, Tenant: tenant, Tier: tier, Subject: subject,
		Key: "incoming/" + tenant + "/" + id, IssuedAt: expires.Add(-2 * time.Second), ExpiresAt: expires,
	}
}

func (s *stack) record(g ledger.Grant) {
	s.t.Helper()
	if err := s.ledger.Record(context.Background(), g); err != nil {
		s.t.Fatalf("Record %s: %v", g.URLID, err)
	}
}

// setTokens writes a bucket as the bucket script would, at now.
func (s *stack) setTokens(key string, tokens float64) {
	s.t.Helper()
	ctx := context.Background()
	if err := s.rdb.HSet(ctx, key, "t", fmt.Sprintf("%.6f", tokens), "ts", time.Now().UnixMilli()).Err(); err != nil {
		s.t.Fatal(err)
	}
	s.rdb.Expire(ctx, key, time.Hour)
}

func (s *stack) tokens(key string) float64 {
	s.t.Helper()
	v, err := s.rdb.HGet(context.Background(), key, "t").Float64()
	if err != nil {
		s.t.Fatalf("HGET %s t: %v", key, err)
	}
	return v
}

// refunded counts the refunded markers of the tenant.
func (s *stack) refunded() int {
	s.t.Helper()
	n := 0
	iter := s.rdb.Scan(context.Background(), 0, keys.Refunded(tenant, "*"), 1000).Iterator()
	for iter.Next(context.Background()) {
		n++
	}
	if err := iter.Err(); err != nil {
		return -1
	}
	return n
}

func (s *stack) consumerInfo() *jetstream.ConsumerInfo {
	s.t.Helper()
	nc, err := nats.Connect(s.natsURL)
	if err != nil {
		return nil
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := js.Consumer(ctx, ledger.DefaultStream, durable)
	if err != nil {
		return nil
	}
	info, err := c.Info(ctx)
	if err != nil {
		return nil
	}
	return info
}

// idle reports whether the durable consumer has nothing pending or unacked.
func (s *stack) idle() bool {
	info := s.consumerInfo()
	return info != nil && info.NumPending == 0 && info.NumAckPending == 0 && info.Delivered.Stream > 0
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// floor is the whole tokens of a bucket: refill during a test adds a few
// thousandths at most, a double refund a whole token.
func floor(f float64) int { return int(f) }
