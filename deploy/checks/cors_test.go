package checks_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every place that writes the bucket's CORS rule — the local stack
// (deploy/local/s3sqs.sh), compose's LocalStack (deploy/localstack) and
// terraform — allows the request headers a browser's PUT sends: the
// signed content-type and if-none-match, and x-amz-checksum-sha256, which
// the client sends by default (issue 30). A rule without one fails every
// browser upload at its preflight.
func TestCORSRulesAllowTheSignedHeaders(t *testing.T) {
	want := []string{"content-type", "if-none-match", "x-amz-checksum-sha256"}
	for file, re := range map[string]*regexp.Regexp{
		"deploy/local/s3sqs.sh":         regexp.MustCompile(`<AllowedHeader>([^<]+)</AllowedHeader>`),
		"deploy/localstack/init-aws.sh": regexp.MustCompile(`"AllowedHeaders":\s*\[([^\]]*)\]`),
		"deploy/terraform/s3.tf":        regexp.MustCompile(`allowed_headers\s*=\s*\[([^\]]*)\]`),
	} {
		b, err := os.ReadFile(filepath.Join(root(t), file))
		if err != nil {
			t.Fatal(err)
		}
		allowed := map[string]bool{}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			for _, h := range strings.Split(m[1], ",") {
				allowed[strings.ToLower(strings.Trim(strings.TrimSpace(h), `"`))] = true
			}
		}
		for _, h := range want {
			if !allowed[h] {
				t.Errorf("%s: the CORS rule does not allow the request header %s (allows %v)", file, h, allowed)
			}
		}
	}
}
