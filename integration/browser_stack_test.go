package integration

import (
	"cmp"
	"os"
	"testing"

	"github.com/mintgate/mintgate/shared/testenv"
)

// startStack starts the whole mintgate stack for TestBrowserUpload. The
// default tiers matter (anonymous 5 per 60 s: the test waits out one
// Retry-After), and MINTGATE_IP_SOURCE stays remote so the browser and the
// test's own signs, both from 127.0.0.1, share one bucket.
// TestBrowserUpload sets the bucket's CORS rule itself (browserAllowOrigin).
//
// With MINTGATE_UP_STACK=1 it starts nothing and uses the stack `make up`
// runs (its ports from MINTGATE_PORT_SIGNER and MINTGATE_PORT_S3, as
// up.sh reads them): the check that make up's demo page works, e.g.
//
//	MINTGATE_UP_STACK=1 go test ./integration -run TestBrowserUpload -v
func startStack(t *testing.T) browserStack {
	t.Helper()
	if os.Getenv("MINTGATE_UP_STACK") == "1" {
		// deploy/local/up.sh's defaults: its S3 credentials are fixed
		// loopback-only values, its bucket "uploads".
		signer := "http://127.0.0.1:" + cmp.Or(os.Getenv("MINTGATE_PORT_SIGNER"), "8080")
		s3 := "http://127.0.0.1:" + cmp.Or(os.Getenv("MINTGATE_PORT_S3"), "17070")
		return browserStack{SignerURL: signer, Tenant: "demo", Bucket: "uploads", S3Endpoint: s3,
			S3: browserS3Client(s3, "mintgate-local", "mintgate-local-secret")}
	}
	s := newStack(t, stackOptions{})
	return browserStack{SignerURL: s.SignerURL, Tenant: "demo", Bucket: s.Bucket, S3Endpoint: s.S3Endpoint,
		S3: browserS3Client(s.S3Endpoint, testenv.AWSAccessKey, testenv.AWSSecretKey)}
}
