package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/events"
	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/ledger"
	"github.com/mintgate/mintgate/shared/streamstest"
	"github.com/mintgate/mintgate/shared/testenv"
	"github.com/mintgate/mintgate/shared/webhook"
)

// Bucket shapes that make the accounting exact: a capacity no client
// reaches and a refill so slow (capacity per 2,000,000 h, the longest fill
// time a time.Duration holds) that a bucket gains well under a tenth of a
// token in a run, so its final tokens are capacity − spends + refunds.
//
// The tiers of bytes have the same shape, but no fill time a bucket may
// have (bucket.Limit.Validate: under about 292 years) makes the refill of
// a capacity no client reaches negligible: 16 GiB per 2,000,000 h is 2.4
// bytes a second. So the test writes every bucket of bytes before the load
// at half its capacity, stamped then (seedByteBuckets): never full, it
// refills for exactly the time from that stamp to its last one, and the
// check adds that refill to what it expects (byteExcess).
const (
	userCapacity   = 20_000
	tenantCapacity = 1_000_000
	tierTable      = "anonymous=5:5/60s,user=20000:20000/2000000h,tenant=1000000:1000000/2000000h," +
		"user_bytes=16GiB:16GiB/2000000h,tenant_bytes=64GiB:64GiB/2000000h"
)

// fillTime is the tiers' refill window: each refills its capacity in it.
const fillTime = 2_000_000 * time.Hour

// byteShape is a tier of bytes of tierTable: its capacity and its refill
// per second, computed as the services compute them from the table
// (capacity / window in seconds), to the last bit.
type byteShape struct{ capacity, rate float64 }

func shapeOf(capacity float64) byteShape {
	return byteShape{capacity, capacity / fillTime.Seconds()}
}

// The tiers of bytes of tierTable.
var (
	userBytesTier   = shapeOf(16 << 30)
	tenantBytesTier = shapeOf(64 << 30)
)

// byteSeed is what the test writes into a bucket of bytes of shape l
// before the load: half its capacity, so that no refill reaches it (the
// refill stops at capacity, and the tally could no longer tell it).
func byteSeed(l byteShape) float64 { return math.Floor(l.capacity / 2) }

// stack is one topology's running servers and services.
type stack struct {
	topo      topology
	p         plan
	redis     *testenv.Redis
	nats      []*testenv.NATS // one server, or the cluster's nodes
	natsURL   string
	signers   []*testenv.Service
	sweepers  []*testenv.Service
	completer *testenv.Service
	s3        *testenv.VersityGW
	rdb       *redis.Client       // the test's own, to read what the services stored
	js        jetstream.JetStream // the test's own, to create the ledger stream and watch it drain
	jwtSecret []byte
	crashes   []string // services found exited that no fault had killed
	// bytesSeeded is the stamp (unix ms) of every bucket of bytes as
	// seedByteBuckets wrote it, before the load.
	bytesSeeded int64
	rescued     int // rescue passes logged by sweepers since killed
	// tiersFile is MINTGATE_TENANT_TIERS_FILE of the signers and sweepers:
	// changeTiers rewrites it mid-run.
	tiersFile string
	// webhooks is the receiver the completer delivers the events to
	// (webhooks_test.go).
	webhooks *testenv.WebhookReceiver
}

// The tenant tier file: tenant t0's users get their own tier, whose refill
// the soak changes mid-run (changeTiers). Both refills are as negligible as
// tierTable's, so the tally stays exact, while every grant of t0 issued
// before the change is refunded or taken back after it, at another shape
// than the bucket's: no refund may bring its own tier's refill along.
const (
	tiersBefore = `{"t0":{"user":"20000:20000/2000000h"}}`
	tiersAfter  = `{"t0":{"user":"20000:20000/1000000h"}}`
)

// changeTiers renames a new tier file over the old one, as a ConfigMap
// update does; signers and sweepers re-read it within a second.
func (st *stack) changeTiers(t *testing.T) {
	tmp := st.tiersFile + ".new"
	if err := os.WriteFile(tmp, []byte(tiersAfter), 0o600); err != nil {
		t.Errorf("tier file: %v", err)
		return
	}
	if err := os.Rename(tmp, st.tiersFile); err != nil {
		t.Errorf("tier file: %v", err)
	}
}

// startStack starts every server and service of the topology and waits
// until each service is ready.
func startStack(t *testing.T, p plan, topo topology, seed uint64) *stack {
	t.Helper()
	st := &stack{topo: topo, p: p, jwtSecret: []byte(secret(t))}
	// Append-only with an fsync per write: a SIGKILL loses no write Redis
	// acknowledged, so every token the soak cannot account for is the
	// services' doing.
	st.redis = testenv.StartRedis(t, "--appendonly", "yes", "--appendfsync", "always")
	if topo.replicas == 1 {
		n := testenv.StartNATS(t)
		st.nats, st.natsURL = []*testenv.NATS{n}, n.URL()
	} else {
		c := testenv.StartNATSCluster(t, topo.replicas)
		st.nats, st.natsURL = c.Nodes, c.URL()
	}
	nc, err := nats.Connect(st.natsURL, nats.MaxReconnects(-1))
	if err != nil {
		t.Fatalf("nats: %v", err)
	}
	t.Cleanup(nc.Close)
	if st.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	// The services never create the stream: create it, with the
	// topology's replicas, as the operator step would, before any starts.
	st.createStream(t)

	sqs := testenv.StartFauxqs(t)
	q := sqs.CreateQueue(t, "mintgate-uploads", testenv.QueueOptions{VisibilityTimeout: p.visibility})
	bridge := testenv.StartBridge(t, q.URL, sqs.Endpoint)
	s3 := testenv.StartVersityGW(t, bridge.URL)
	st.s3 = s3

	st.tiersFile = filepath.Join(t.TempDir(), "tiers.json")
	if err := os.WriteFile(st.tiersFile, []byte(tiersBefore), 0o600); err != nil {
		t.Fatal(err)
	}
	common := map[string]string{
		"MINTGATE_TENANT_TIERS_FILE": st.tiersFile,
		"MINTGATE_REDIS_URL":         st.redis.URL(),
		"MINTGATE_NATS_URL":          st.natsURL,
		"MINTGATE_URL_TTL":           p.ttl.String(),
		"MINTGATE_SWEEP_GRACE":       p.grace.String(),
		"MINTGATE_TIERS":             tierTable,
		"MINTGATE_GRANT_SECRET":      secret(t),
	}
	for k, v := range testenv.AWSEnv() {
		common[k] = v
	}
	signerEnv := map[string]string{
		"MINTGATE_JWT_HS256_SECRET":     string(st.jwtSecret),
		"MINTGATE_MULTIPART_TTL":        p.mpTTL.String(),
		"MINTGATE_MULTIPART_PART_BYTES": fmt.Sprint(mpPartBytes),
		// Every client comes from 127.0.0.1: a per-address read limit
		// would refuse the multipart grants' parts and completes.
		"MINTGATE_READ_LIMIT": "off",
	}
	completerEnv := map[string]string{
		"MINTGATE_SQS_QUEUE_URL": q.URL,
		"MINTGATE_S3_BUCKET":     s3.Bucket,
		"MINTGATE_SQS_ENDPOINT":  sqs.Endpoint,
		"MINTGATE_DONE_TTL":      p.doneTTL.String(),
		// The verification gate is on, with its defaults and no clamd:
		// the load uploads real PNGs, and some HTML it must reject
		// (bodies_test.go).
	}
	var webhookEnv map[string]string
	st.webhooks, webhookEnv = startWebhooks(t, seed)
	for range 2 {
		st.signers = append(st.signers, testenv.StartService(t, "./signer", common, testenv.S3Env(s3.Endpoint, s3.Bucket), signerEnv))
		st.sweepers = append(st.sweepers, testenv.StartService(t, "./sweeper", common, testenv.S3Env(s3.Endpoint, s3.Bucket)))
	}
	st.completer = testenv.StartService(t, "./completer", common, testenv.S3Env(s3.Endpoint, s3.Bucket), completerEnv, webhookEnv)
	t.Cleanup(func() {
		if t.Failed() {
			for _, s := range st.services() {
				t.Logf("%s log (tail):\n%s", s.name, tail(s.Output(), 3000))
			}
		}
	})

	st.rdb = redis.NewClient(&redis.Options{Addr: st.redis.Addr, ReadTimeout: 5 * time.Second})
	t.Cleanup(func() { st.rdb.Close() })
	st.seedByteBuckets(t)
	return st
}

// seedByteBuckets writes every user's and tenant's bucket of bytes at
// byteSeed, stamped now (st.bytesSeeded), as the bucket script writes a
// bucket: no client has signed yet.
func (st *stack) seedByteBuckets(t *testing.T) {
	t.Helper()
	st.bytesSeeded = time.Now().UnixMilli()
	write := func(key string, l byteShape) {
		err := st.rdb.HSet(context.Background(), key, "t", fmt.Sprintf("%.6f", byteSeed(l)), "ts", st.bytesSeeded).Err()
		if err != nil {
			t.Fatalf("seed %s: %v", key, err)
		}
	}
	for _, u := range userIDs(st.p) {
		write(keys.ByteBucket(u[0], keys.UserSubject(u[1])), userBytesTier)
	}
	for i := range st.p.tenants {
		write(keys.TenantByteBucket(tenantID(i)), tenantBytesTier)
	}
}

// secret is 32 random bytes, hex: a JWT or grant secret of 64 bytes.
func secret(t *testing.T) string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// createStream is the operator step: the ledger stream with the
// topology's replicas, then the upload events' and the webhooks' streams, each retried while a
// new cluster still elects its leaders.
func (st *stack) createStream(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, step := range []struct {
		name   string
		ensure func(ctx context.Context) error
	}{
		{ledger.DefaultStream, func(ctx context.Context) error {
			_, err := ledger.EnsureStream(ctx, st.js, ledger.Config{Replicas: st.topo.replicas})
			return err
		}},
		{events.Stream, func(ctx context.Context) error {
			_, err := events.EnsureStream(ctx, st.js, streamstest.DoneTTL, st.topo.replicas)
			return err
		}},
		{webhook.Stream, func(ctx context.Context) error {
			_, err := webhook.EnsureStream(ctx, st.js, st.topo.replicas, webhook.DefaultMaxBytes)
			return err
		}},
	} {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := step.ensure(ctx)
			cancel()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("create stream %s with %d replicas: %v", step.name, st.topo.replicas, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// namedService is a service with the name the fault log uses.
type namedService struct {
	*testenv.Service
	name string
}

func (st *stack) services() []namedService {
	var out []namedService
	for i, s := range st.signers {
		out = append(out, namedService{s, fmt.Sprintf("signer%d", i)})
	}
	for i, s := range st.sweepers {
		out = append(out, namedService{s, fmt.Sprintf("sweeper%d", i)})
	}
	return append(out, namedService{st.completer, "completer"})
}

// ensureUp restarts any service that exited without a fault killing it
// (a crash, recorded) and waits until every service is ready again.
func (st *stack) ensureUp(t *testing.T) time.Duration {
	t.Helper()
	began := time.Now()
	for _, s := range st.services() {
		if s.Exited() {
			st.crashes = append(st.crashes, s.name)
			t.Logf("%s exited by itself; its log (tail):\n%s", s.name, tail(s.Output(), 3000))
			s.Kill() // forgets the exited process, so Start runs a new one
			s.Start()
		}
	}
	for _, s := range st.services() {
		if !s.WaitReady(30 * time.Second) {
			t.Logf("%s is not ready 30 s after a fault", s.name)
		}
	}
	return time.Since(began)
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
