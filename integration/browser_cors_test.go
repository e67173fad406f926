package integration

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/mintgate/mintgate/shared/testenv"
)

// browserAllowOrigin sets the bucket CORS rule a page on the origins needs
// to upload with a presigned URL from the signer: PUT only, with the
// signed headers a script sets: content-type, if-none-match and, for a
// checksum-bound URL, x-amz-checksum-sha256 (Content-Length is set by the
// browser and never preflighted; Host is not a header a script can set). ETag is
// exposed so a page can read it. It replaces the bucket's CORS
// configuration. Real S3 needs the same rule on the production bucket.
//
// versitygw v1.8.0 stores the rule (PutBucketCors), answers the OPTIONS
// preflight from it, and adds Access-Control-Allow-Origin to the PUT's
// answer, errors included, so a page can read a 403 or 412.
func browserAllowOrigin(ctx context.Context, client *s3.Client, bucket string, origins ...string) error {
	_, err := client.PutBucketCors(ctx, &s3.PutBucketCorsInput{
		Bucket: aws.String(bucket),
		CORSConfiguration: &types.CORSConfiguration{CORSRules: []types.CORSRule{{
			AllowedOrigins: origins,
			AllowedMethods: []string{http.MethodPut},
			AllowedHeaders: []string{"content-type", "if-none-match", "x-amz-checksum-sha256"},
			ExposeHeaders:  []string{"ETag"},
			MaxAgeSeconds:  aws.Int32(600),
		}}},
	})
	return err
}

// browserS3Client is a path-style client of a local S3 server.
func browserS3Client(endpoint, accessKey, secretKey string) *s3.Client {
	return s3.New(s3.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(accessKey, secretKey, ""),
	})
}

// browserVersityGW is a versitygw (posix backend) the test started, with
// one bucket.
type browserVersityGW struct {
	Endpoint string
	Bucket   string
	Client   *s3.Client
}

// browserStartVersityGW starts versitygw on a free port with an empty
// bucket. (testenv.StartVersityGW, being written, will replace it.)
func browserStartVersityGW(t *testing.T) *browserVersityGW {
	t.Helper()
	const key, secret, bucket = "mintgate-test", "mintgate-test-secret", "uploads"
	dir := t.TempDir()
	for _, d := range []string{"meta", "data"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	port := testenv.FreePort(t)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	p := testenv.StartProcess(t, testenv.Binary(t, "versitygw"), nil,
		"--port", addr, "--access", key, "--secret", secret, "--region", "us-east-1",
		"posix", "--sidecar", filepath.Join(dir, "meta"), filepath.Join(dir, "data"))
	for i := 0; ; i++ {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			c.Close()
			break
		}
		if i == 300 {
			t.Fatalf("versitygw did not listen on %s:\n%s", addr, p.Output())
		}
		time.Sleep(20 * time.Millisecond)
	}
	gw := &browserVersityGW{Endpoint: "http://" + addr, Bucket: bucket}
	gw.Client = browserS3Client(gw.Endpoint, key, secret)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := gw.Client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		t.Fatalf("create bucket: %v\n%s", err, p.Output())
	}
	return gw
}

// TestBrowserCORSVersityGW checks, without a browser, that versitygw
// answers a browser's preflight and PUT the way the demo page needs once
// browserAllowOrigin has run — and refuses other origins and headers.
func TestBrowserCORSVersityGW(t *testing.T) {
	gw := browserStartVersityGW(t)
	const origin = "http://127.0.0.1:8080"
	objectURL := gw.Endpoint + "/" + gw.Bucket + "/incoming/demo/0b6c8a56-55b4-4c6e-9a55-5f7f2b0c9d11"
	preflight := func(origin, headers string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodOptions, objectURL, nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "PUT")
		req.Header.Set("Access-Control-Request-Headers", headers)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}

	if res := preflight(origin, "content-type,if-none-match"); res.StatusCode != http.StatusForbidden {
		t.Fatalf("preflight before any CORS rule: %d, want 403", res.StatusCode)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := browserAllowOrigin(ctx, gw.Client, gw.Bucket, origin); err != nil {
		t.Fatalf("put bucket CORS: %v", err)
	}

	// The client sends x-amz-checksum-sha256 by default (issue 30).
	res := preflight(origin, "content-type,if-none-match,x-amz-checksum-sha256")
	if res.StatusCode != http.StatusOK || res.Header.Get("Access-Control-Allow-Origin") != origin ||
		!strings.Contains(res.Header.Get("Access-Control-Allow-Methods"), "PUT") ||
		res.Header.Get("Access-Control-Allow-Headers") != "content-type, if-none-match, x-amz-checksum-sha256" {
		t.Fatalf("preflight from %s: %d %v", origin, res.StatusCode, res.Header)
	}
	if res := preflight("http://127.0.0.1:9999", "content-type,if-none-match"); res.StatusCode != http.StatusForbidden {
		t.Errorf("preflight from another origin: %d, want 403", res.StatusCode)
	}
	if res := preflight(origin, "content-type,if-none-match,x-amz-acl"); res.StatusCode != http.StatusForbidden {
		t.Errorf("preflight with a header outside the rule: %d, want 403", res.StatusCode)
	}

	// The PUT itself must carry Access-Control-Allow-Origin, or the page
	// cannot read its answer; an unsigned one is refused, with the header.
	req, _ := http.NewRequest(http.MethodPut, objectURL, strings.NewReader("x"))
	req.Header.Set("Origin", origin)
	put, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	put.Body.Close()
	if put.StatusCode != http.StatusForbidden || put.Header.Get("Access-Control-Allow-Origin") != origin {
		t.Errorf("unsigned PUT: %d, Access-Control-Allow-Origin %q; want 403 with %q",
			put.StatusCode, put.Header.Get("Access-Control-Allow-Origin"), origin)
	}
}
