// Command s3bridge delivers the local S3 server's bucket events to SQS the
// way AWS does. versitygw posts its events to a webhook (--event-webhook-url)
// in its own dialect; s3bridge is that webhook: it rewrites each event into
// AWS's S3 event notification format (fromVersity) and sends it to the
// queue, so the completer only ever reads what AWS sends.
//
//	s3bridge -addr 127.0.0.1:8090 -token-file FILE -queue-url URL [-endpoint http://127.0.0.1:4566]
//
// Only a post carrying the token held in FILE, as ?token=<token> in the URL
// (versitygw is given it in --event-webhook-url), is an event: anything else
// is refused with 401 and counted in the log. Without it, any page a
// developer's browser opens could post a forged upload event to the
// loopback port (a form post needs no CORS) and mark an upload done.
//
// The queue URL and endpoint default to MINTGATE_SQS_QUEUE_URL and
// MINTGATE_SQS_ENDPOINT; region and credentials come from the SDK's chain
// (AWS_REGION, AWS_ACCESS_KEY_ID, …). versitygw posts a test event when it
// starts and exits if the webhook is unreachable: start s3bridge first.
// It is local-stack tooling only; in AWS, S3 notifies SQS itself.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/mintgate/mintgate/shared/config"
	"github.com/mintgate/mintgate/shared/dial"
	"github.com/mintgate/mintgate/shared/ops"
	"github.com/mintgate/mintgate/shared/service"
)

func main() { service.Main("s3bridge", run) }

// run serves the webhook until ctx ends.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	fs := flag.NewFlagSet("s3bridge", flag.ContinueOnError)
	fs.SetOutput(stdout)
	addr := fs.String("addr", "127.0.0.1:8090", "listen address of the webhook (POST any path) and GET /healthz")
	queueURL := fs.String("queue-url", getenv("MINTGATE_SQS_QUEUE_URL"), "SQS queue URL (MINTGATE_SQS_QUEUE_URL)")
	endpoint := fs.String("endpoint", getenv("MINTGATE_SQS_ENDPOINT"), "SQS endpoint, empty for AWS (MINTGATE_SQS_ENDPOINT)")
	tokenFile := fs.String("token-file", "", "file holding the token every webhook post must carry as ?token= (required)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *queueURL == "" {
		return errors.New("-queue-url or MINTGATE_SQS_QUEUE_URL: required")
	}
	token, err := readToken(*tokenFile)
	if err != nil {
		return err
	}
	log := service.Logger(stdout, "s3bridge")

	env := config.New(getenv)
	awsEnv := env.AWS()
	if err := env.Err(); err != nil {
		return err
	}
	cfg, err := dial.AWS(ctx, awsEnv)
	if err != nil {
		return err
	}
	client := sqs.NewFromConfig(cfg, func(o *sqs.Options) {
		if *endpoint != "" {
			o.BaseEndpoint = aws.String(*endpoint)
		}
	})
	h := newHandler(log, client, *queueURL, token)
	return ops.Serve(ctx, log, *addr, h.routes())
}

// minToken is the shortest token the bridge takes: 128 bits.
const minToken = 16

// readToken reads the webhook's token from path, surrounding space trimmed.
func readToken(path string) (string, error) {
	if path == "" {
		return "", errors.New("-token-file: required: the bridge takes events only from whoever holds its token")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("-token-file: %w", err)
	}
	token := strings.TrimSpace(string(b))
	if len(token) < minToken {
		return "", fmt.Errorf("-token-file: the token must be at least %d bytes", minToken)
	}
	return token, nil
}

// sendTimeout bounds how long one event is retried before it is given up.
// versitygw stops waiting after 3 s and never retries, so delivery goes on
// after it hung up: a lost event here is an upload the completer never sees.
const sendTimeout = 30 * time.Second
