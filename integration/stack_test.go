package integration

import (
	"context"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/mintgate/mintgate/shared/streamstest"
	"github.com/mintgate/mintgate/shared/testenv"
)

// server is a dependency a test can take down and bring back.
type server interface {
	Stop()
	Start()
}

// infra is what the services need, from local processes or containers.
type infra struct {
	Redis       server
	RedisAddr   string
	NATS        server
	NATSURL     string
	S3Endpoint  string
	Bucket      string
	SQSEndpoint string
	Queue       testenv.Queue
	Kind        string // "local" or "docker"
}

// stackOptions shape one stack; zero values take the defaults below.
type stackOptions struct {
	URLTTL      time.Duration // MINTGATE_URL_TTL, default 120s
	Grace       time.Duration // MINTGATE_SWEEP_GRACE, default 30s
	DoneTTL     time.Duration // MINTGATE_DONE_TTL, default 15m
	Tiers       string        // MINTGATE_TIERS, default the documented tiers
	AnonTenants string        // MINTGATE_ANON_TENANTS, default "demo"
	Visibility  time.Duration // the queue's visibility timeout, default 2s
	MaxReceives int           // redrive after this many receives, default 2
	Extra       map[string]string
	// SignerExtra and SweeperExtra go to that service alone, after Extra.
	SignerExtra, SweeperExtra map[string]string
	// PresignVia, given S3's endpoint, returns the signer's
	// MINTGATE_S3_ENDPOINT instead: a proxy in front of S3 that a test
	// controls. (Not MINTGATE_S3_INTERNAL_ENDPOINT: here part URLs are
	// presigned with the internal endpoint, which SPEC §9 changes.)
	PresignVia func(s3Endpoint string) string
}

// stack is a running mintgate: infra plus the three services as processes.
type stack struct {
	infra
	Signer, Completer, Sweeper          *testenv.Process
	SignerURL, CompleterURL, SweeperURL string
	JWTSecret                           string
	opts                                stackOptions
}

const jwtSecret = "integration-secret-0123456789abcdef0123456789"

// newStack starts the infrastructure and the three services, and waits
// until every service is ready.
func newStack(t *testing.T, opts stackOptions) *stack {
	t.Helper()
	if opts.URLTTL == 0 {
		opts.URLTTL = 120 * time.Second
	}
	if opts.Grace == 0 {
		opts.Grace = 30 * time.Second
	}
	if opts.DoneTTL == 0 {
		opts.DoneTTL = 15 * time.Minute
	}
	if opts.AnonTenants == "" {
		opts.AnonTenants = "demo"
	}
	if opts.Visibility == 0 {
		opts.Visibility = 2 * time.Second
	}
	if opts.MaxReceives == 0 {
		opts.MaxReceives = 2
	}
	in, ok := dockerInfra(t, opts)
	if !ok {
		in = localInfra(t, opts)
	}
	streamstest.Ensure(t, in.NATSURL) // the operator step, before any service starts
	s := &stack{infra: in, JWTSecret: jwtSecret, opts: opts}

	common := map[string]string{
		"MINTGATE_REDIS_URL":   "redis://" + in.RedisAddr + "/0",
		"MINTGATE_NATS_URL":    in.NATSURL,
		"MINTGATE_URL_TTL":     opts.URLTTL.String(),
		"MINTGATE_SWEEP_GRACE": opts.Grace.String(),
		// Signer and sweeper only; the completer ignores it.
		"MINTGATE_GRANT_SECRET": testenv.GrantSecret,
	}
	if opts.Tiers != "" {
		common["MINTGATE_TIERS"] = opts.Tiers
	}
	for k, v := range testenv.AWSEnv() {
		common[k] = v
	}
	signerEnv := map[string]string{
		"MINTGATE_JWT_HS256_SECRET": jwtSecret,
		"MINTGATE_ANON_TENANTS":     opts.AnonTenants,
		"MINTGATE_IP_HASH_SECRET":   jwtSecret,
		"MINTGATE_DEMO_PAGE":        "on",
	}
	completerEnv := map[string]string{
		"MINTGATE_SQS_QUEUE_URL": in.Queue.URL,
		"MINTGATE_S3_BUCKET":     in.Bucket,
		"MINTGATE_SQS_ENDPOINT":  in.SQSEndpoint,
		"MINTGATE_DONE_TTL":      opts.DoneTTL.String(),
		// The verification gate's content checks are off here: these
		// journeys upload stand-in bytes (a PNG signature and a label), and
		// the gate has its own tests on real servers (completer/gate_e2e_test.go).
		// The size check stays.
		"MINTGATE_VERIFY": "off",
	}
	signerS3 := testenv.S3Env(in.S3Endpoint, in.Bucket)
	if opts.PresignVia != nil {
		signerS3["MINTGATE_S3_ENDPOINT"] = opts.PresignVia(in.S3Endpoint)
	}
	s.Signer, s.SignerURL = startService(t, "./signer", common, signerS3, signerEnv, opts.Extra, opts.SignerExtra)
	s.Completer, s.CompleterURL = startService(t, "./completer", common, testenv.S3Env(in.S3Endpoint, in.Bucket), completerEnv, opts.Extra)
	s.Sweeper, s.SweeperURL = startService(t, "./sweeper", common, testenv.S3Env(in.S3Endpoint, in.Bucket), opts.Extra, opts.SweeperExtra)
	t.Cleanup(func() {
		if t.Failed() {
			for name, p := range map[string]*testenv.Process{"signer": s.Signer, "completer": s.Completer, "sweeper": s.Sweeper} {
				out := p.Output()
				if len(out) > 4000 {
					out = out[len(out)-4000:]
				}
				t.Logf("%s log (tail):\n%s", name, out)
			}
		}
	})
	return s
}

// startService runs the service built from pkg with env on a port of its
// own and waits until it is ready.
func startService(t *testing.T, pkg string, envs ...map[string]string) (*testenv.Process, string) {
	t.Helper()
	svc := testenv.StartService(t, pkg, envs...)
	return svc.Process, svc.URL
}

// localInfra starts every server as a local process on free ports.
func localInfra(t *testing.T, opts stackOptions) infra {
	t.Helper()
	rdb := testenv.StartRedis(t)
	nats := testenv.StartNATS(t)
	sqs := testenv.StartFauxqs(t)
	q := sqs.CreateQueue(t, "mintgate-uploads", testenv.QueueOptions{
		VisibilityTimeout: opts.Visibility, MaxReceiveCount: opts.MaxReceives,
	})
	bridge := testenv.StartBridge(t, q.URL, sqs.Endpoint)
	s3 := testenv.StartVersityGW(t, bridge.URL)
	return infra{
		Redis: rdb, RedisAddr: rdb.Addr, NATS: nats, NATSURL: nats.URL(),
		S3Endpoint: s3.Endpoint, Bucket: s3.Bucket,
		SQSEndpoint: sqs.Endpoint, Queue: q, Kind: "local",
	}
}

// token is an HS256 JWT for a user of a tenant, as the signer is configured.
func (s *stack) token(t *testing.T, tenant, user string) string {
	t.Helper()
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": user, "tenant_id": tenant, "exp": time.Now().Add(time.Hour).Unix(),
	}).SignedString([]byte(s.JWTSecret))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}
