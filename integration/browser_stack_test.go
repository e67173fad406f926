package integration

import (
	"testing"

	"github.com/mintgate/mintgate/shared/testenv"
)

// startStack starts the whole mintgate stack for TestBrowserUpload. The
// default tiers matter (anonymous 5 per 60 s: the test waits out one
// Retry-After), and MINTGATE_IP_SOURCE stays remote so the browser and the
// test's own signs, both from 127.0.0.1, share one bucket.
// TestBrowserUpload sets the bucket's CORS rule itself (browserAllowOrigin).
func startStack(t *testing.T) browserStack {
	t.Helper()
	s := newStack(t, stackOptions{})
	return browserStack{SignerURL: s.SignerURL, Tenant: "demo", Bucket: s.Bucket, S3Endpoint: s.S3Endpoint,
		S3: browserS3Client(s.S3Endpoint, testenv.AWSAccessKey, testenv.AWSSecretKey)}
}
