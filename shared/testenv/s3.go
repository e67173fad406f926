package testenv

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// VersityGW is a versitygw S3 gateway (posix backend, path-style, SigV4 with
// AWSAccessKey/AWSSecretKey in AWSRegion) the test started, with one bucket.
// Its data outlives Stop and Start within the test.
type VersityGW struct {
	*Process
	// Endpoint is the SDK's BaseEndpoint for it: http://127.0.0.1:<port>.
	Endpoint string
	// Bucket exists once StartVersityGW returns.
	Bucket string
}

// VersityBucket is the bucket StartVersityGW creates.
const VersityBucket = "mintgate-uploads"

// StartVersityGW starts versitygw on a free port and creates VersityBucket.
// With a webhookURL it posts every bucket event there (see StartBridge),
// and since it exits when that URL does not answer at start, the receiver
// must already listen.
func StartVersityGW(tb testing.TB, webhookURL string) *VersityGW {
	tb.Helper()
	port := FreePort(tb)
	root := tb.TempDir()
	data, meta := filepath.Join(root, "data"), filepath.Join(root, "meta")
	for _, d := range []string{data, meta} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			tb.Fatalf("testenv: %v", err)
		}
	}
	args := []string{"--port", addr(port), "--access", AWSAccessKey, "--secret", AWSSecretKey,
		"--region", AWSRegion, "--health", "/health"}
	if webhookURL != "" {
		args = append(args, "--event-webhook-url", webhookURL)
	}
	args = append(args, "posix", "--sidecar", meta, data)
	v := &VersityGW{Process: newProcess(tb, Binary(tb, "versitygw"), args...),
		Endpoint: "http://" + addr(port), Bucket: VersityBucket}
	v.Start()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := v.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(v.Bucket)}); err != nil {
		tb.Fatalf("testenv: create bucket %s: %v\n%s", v.Bucket, err, v.Output())
	}
	return v
}

// Start starts the gateway and waits until GET /health answers.
func (v *VersityGW) Start() {
	v.tb.Helper()
	v.Process.Start()
	waitHTTP(v.tb, v.Process, v.Endpoint+"/health")
}

// S3Env is the signer's environment for presigning URLs to bucket on the
// test S3 server at endpoint: path-style, region AWSRegion.
func S3Env(endpoint, bucket string) map[string]string {
	return map[string]string{
		"MINTGATE_S3_BUCKET":     bucket,
		"MINTGATE_S3_ENDPOINT":   endpoint,
		"MINTGATE_S3_PATH_STYLE": "true",
		"MINTGATE_S3_REGION":     AWSRegion,
	}
}

// Client is an S3 client for the gateway: path-style, region AWSRegion.
func (v *VersityGW) Client() *s3.Client {
	return s3.New(s3.Options{
		Region:       AWSRegion,
		BaseEndpoint: aws.String(v.Endpoint),
		Credentials:  awsCredentials(),
		UsePathStyle: true,
	})
}

// Bridge is deploy/s3bridge, built from this module and started by the
// test: versitygw's webhook, sending each event to SQS in AWS's format.
type Bridge struct {
	*Process
	Addr string
	// URL is what to give versitygw as --event-webhook-url: the webhook
	// with the bridge's token, which it refuses every post without.
	URL string
	// Token is the bridge's token (-token-file).
	Token string
}

// StartBridge builds and starts the bridge sending to queueURL through the
// SQS endpoint (a Fauxqs's Endpoint), and waits until it answers.
func StartBridge(tb testing.TB, queueURL, endpoint string) *Bridge {
	tb.Helper()
	bin := BuildCommand(tb, "./deploy/s3bridge")
	port := FreePort(tb)
	raw := make([]byte, 16)
	if _, err := rand.Read(raw); err != nil {
		tb.Fatal(err)
	}
	token := hex.EncodeToString(raw)
	tokenFile := filepath.Join(tb.TempDir(), "s3bridge-token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		tb.Fatal(err)
	}
	b := &Bridge{Process: newProcess(tb, bin, "-addr", addr(port), "-token-file", tokenFile, "-queue-url", queueURL, "-endpoint", endpoint),
		Addr: addr(port), URL: "http://" + addr(port) + "/events?token=" + token, Token: token}
	for k, v := range AWSEnv() {
		b.Env = append(b.Env, k+"="+v)
	}
	b.Start()
	return b
}

// Start starts the bridge and waits until GET /healthz answers.
func (b *Bridge) Start() {
	b.tb.Helper()
	b.Process.Start()
	waitHTTP(b.tb, b.Process, "http://"+b.Addr+"/healthz")
}

// builds holds, per package, the binary BuildCommand made in this process.
var builds sync.Map // pkg → func() (string, error)

// BuildCommand builds the module's command in pkg (such as
// "./deploy/s3bridge") once per test process and returns the binary. It
// lands in the tools cache ($MINTGATE_TOOLS or .tools/), under
// build/<checkout>/, replaced atomically, so test processes running side by
// side never see a half-written file. <checkout> is a hash of the module's
// folder: several worktrees share one tools cache, and a service a test
// restarts must be the one built from its own tree, not the binary another
// worktree's test wrote a moment ago.
func BuildCommand(tb testing.TB, pkg string) string {
	tb.Helper()
	build, _ := builds.LoadOrStore(pkg, sync.OnceValues(func() (string, error) { return buildCommand(pkg) }))
	bin, err := build.(func() (string, error))()
	if err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	return bin
}

func buildCommand(pkg string) (string, error) {
	root, err := Root()
	if err != nil {
		return "", err
	}
	tools := os.Getenv("MINTGATE_TOOLS")
	if tools == "" {
		tools = filepath.Join(root, ".tools")
	}
	sum := sha256.Sum256([]byte(root))
	dir := filepath.Join(tools, "build", hex.EncodeToString(sum[:6]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("go not in PATH: %w", err)
	}
	bin := filepath.Join(dir, filepath.Base(pkg))
	tmp := fmt.Sprintf("%s.%d.tmp", bin, os.Getpid())
	cmd := exec.Command(goBin, "build", "-o", tmp, pkg)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", err
	}
	return bin, nil
}

// String names the gateway in test logs.
func (v *VersityGW) String() string { return "versitygw " + v.Endpoint + " bucket " + v.Bucket }

// String names the bridge in test logs.
func (b *Bridge) String() string { return "s3bridge " + b.Addr }

// String names the server in test logs.
func (f *Fauxqs) String() string { return "fauxqs " + f.Endpoint }

// UnusedS3Env is the S3 environment of a service under test that never
// reaches S3 (a sweeper meeting no multipart grant): the bucket, a region,
// static credentials and an endpoint nothing listens on.
func UnusedS3Env() map[string]string {
	env := S3Env("http://127.0.0.1:1", VersityBucket)
	maps.Copy(env, AWSEnv())
	return env
}
