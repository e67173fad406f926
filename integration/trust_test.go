package integration

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/api"
	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/ledger"
	"github.com/mintgate/mintgate/shared/testenv"
)

// The proofs of issue 17's review, black-box against the built services:
// each one got tokens back that were never owed before its fix.

// sealed is the body of the newest schedule in the ledger: the sealed batch
// holding the grant just signed, as anyone who can read the stream sees it.
func (s *stack) sealed(t *testing.T) []byte {
	t.Helper()
	js := s.jetstream(t)
	st, err := js.Stream(ctxT(t), ledger.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetLastMsgForSubject(ctxT(t), ledger.SubjectSchedPrefix+">")
	if err != nil {
		t.Fatalf("the newest schedule: %v", err)
	}
	return m.Data
}

// republish puts body on the subject the sweepers consume, as a leaked
// credential or an open bus could.
func (s *stack) republish(t *testing.T, body []byte) {
	t.Helper()
	if _, err := s.jetstream(t).Publish(ctxT(t), ledger.SubjectDue, body); err != nil {
		t.Fatal(err)
	}
}

func (s *stack) jetstream(t *testing.T) jetstream.JetStream {
	t.Helper()
	_, js := testenv.JetStream(t, s.NATSURL)
	return js
}

func bucketTokens(t *testing.T, rdb *redis.Client, key string) float64 {
	t.Helper()
	v, err := rdb.HGet(ctxT(t), key, "t").Float64()
	if err != nil {
		t.Fatalf("HGET %s t: %v", key, err)
	}
	return v
}

// A sealed batch re-published long before it is due refunds nothing: its
// grant stays pending until its own due time, is refunded once then, and a
// replay after that refund moves nothing either.
func TestEarlyReplayOfASealedBatchRefundsNothing(t *testing.T) {
	s := newStack(t, stackOptions{URLTTL: 6 * time.Second, Grace: 2 * time.Second, Tiers: slowTiers})
	rdb := s.redis(t)
	tok := s.token(t, "acme", "early")
	user := keys.Bucket("acme", keys.UserSubject("early"))
	g := s.mustSign(t, tok, 10)
	body := s.sealed(t)
	s.republish(t, body)

	due := g.ExpiresAt.Add(2 * time.Second)
	for time.Until(due) > 500*time.Millisecond {
		if st := s.status(t, tok, g.URLID); st != "pending" && st != "expired" {
			t.Fatalf("status %q %v before the grant was due", st, time.Until(due))
		}
		if got := bucketTokens(t, rdb, user); got > 2.01 {
			t.Fatalf("bucket holds %.3f tokens %v before due: the early copy was refunded", got, time.Until(due))
		}
		time.Sleep(400 * time.Millisecond)
	}
	s.waitStatus(t, tok, g.URLID, "refunded", 30*time.Second)
	if time.Now().Before(due) {
		t.Fatalf("refunded before its due time %v", due)
	}
	if early := metric(t, s.SweeperURL, "mintgate_sweeper_early_total"); early < 1 {
		t.Errorf("early deliveries counted: %v, want at least 1", early)
	}
	// The schedule's own delivery and the held copy both came: one refund.
	eventually(t, 20*time.Second, "both deliveries handled", func() bool {
		return metric(t, s.SweeperURL, "mintgate_sweeper_grants_swept_total") >= 2
	})
	s.republish(t, body)
	time.Sleep(3 * time.Second)
	if got := bucketTokens(t, rdb, user); got < 2.99 || got > 3.01 {
		t.Errorf("bucket holds %.3f tokens, want 3: exactly one refund", got)
	}
	if n := metric(t, s.SweeperURL, "mintgate_sweeper_refunds_total"); n != 1 {
		t.Errorf("refunds %v, want 1", n)
	}
}

// A batch replayed after its upload completed, once the done marker of the
// old lifetime (MINTGATE_DONE_TTL) would have expired, refunds nothing:
// the marker of a completed grant outlives every copy of it.
func TestReplayAfterCompletionRefundsNothing(t *testing.T) {
	s := newStack(t, stackOptions{URLTTL: 2 * time.Second, Grace: 2 * time.Second, DoneTTL: 10 * time.Second, Tiers: slowTiers})
	rdb := s.redis(t)
	tok := s.token(t, "acme", "replayer")
	user := keys.Bucket("acme", keys.UserSubject("replayer"))
	body := []byte("\x89PNG\r\n\x1a\n-replay")
	g := s.mustSign(t, tok, len(body))
	sealed := s.sealed(t)
	if code := put(t, g, body); code != http.StatusOK {
		t.Fatalf("PUT: %d", code)
	}
	s.waitStatus(t, tok, g.URLID, "completed", 30*time.Second)
	completedAt := time.Now()
	eventually(t, 20*time.Second, "the grant swept", func() bool {
		return metric(t, s.SweeperURL, "mintgate_sweeper_already_done_total") == 1
	})
	time.Sleep(time.Until(completedAt.Add(12 * time.Second)))
	s.republish(t, sealed)
	time.Sleep(3 * time.Second)
	if got := bucketTokens(t, rdb, user); got > 2.01 {
		t.Errorf("bucket holds %.3f tokens after the replay, want 2: a completed upload was refunded", got)
	}
	if n := metric(t, s.SweeperURL, "mintgate_sweeper_refunds_total"); n != 0 {
		t.Errorf("refunds %v, want 0", n)
	}
}

// landLate stores g's object as a PUT that started before g expired and
// finished now would: with S3, which checks a presigned URL's expiry when
// the PUT starts. versitygw checks it once the body has arrived (it reads
// the whole request first), so no slow PUT through the URL succeeds
// there; the object is written with the server's own credentials instead,
// and its ObjectCreated travels the real way: versitygw's webhook, the
// bridge, SQS, the completer.
func (s *stack) landLate(t *testing.T, g api.SignResponse, body []byte) {
	t.Helper()
	c := s3.New(s3.Options{
		Region: testenv.AWSRegion, BaseEndpoint: aws.String(s.S3Endpoint), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(testenv.AWSAccessKey, testenv.AWSSecretKey, ""),
	})
	if _, err := c.PutObject(ctxT(t), &s3.PutObjectInput{
		Bucket: aws.String(s.Bucket), Key: aws.String(g.Key), Body: bytes.NewReader(body),
		ContentType: aws.String(g.Headers.ContentType), IfNoneMatch: aws.String("*"),
	}); err != nil {
		t.Fatalf("the late upload: %v", err)
	}
}

// An upload that lands after its grant was refunded (a PUT started just
// before expiry on a slow link) pays the refund back: the buckets end as
// if it had never been refunded, once, however often the notification
// comes (the repeat is shared/quota's "taken back once" case).
func TestSlowUploadPaysItsRefundBack(t *testing.T) {
	s := newStack(t, stackOptions{URLTTL: 2 * time.Second, Grace: time.Second, Tiers: slowTiers})
	rdb := s.redis(t)
	tok := s.token(t, "acme", "slow")
	user, tenant := keys.Bucket("acme", keys.UserSubject("slow")), keys.TenantBucket("acme")
	body := []byte("\x89PNG\r\n\x1a\n-slow")
	g := s.mustSign(t, tok, len(body))
	wantUser, wantTenant := bucketTokens(t, rdb, user), bucketTokens(t, rdb, tenant)

	s.waitStatus(t, tok, g.URLID, "refunded", 20*time.Second)
	if got := bucketTokens(t, rdb, user); got < wantUser+0.99 {
		t.Fatalf("bucket %.3f after the refund, want %.3f", got, wantUser+1)
	}
	s.landLate(t, g, body)
	s.waitStatus(t, tok, g.URLID, "completed", 30*time.Second)
	eventually(t, 10*time.Second, "the refund taken back", func() bool {
		return metric(t, s.CompleterURL, "mintgate_completer_refunds_taken_back_total") == 1
	})
	time.Sleep(2 * time.Second) // room for a wrong second take-back
	if got := bucketTokens(t, rdb, user); got < wantUser-0.01 || got > wantUser+0.01 {
		t.Errorf("user bucket %.3f after the late upload, want %.3f: as if never refunded", got, wantUser)
	}
	if got := bucketTokens(t, rdb, tenant); got < wantTenant-0.01 || got > wantTenant+0.01 {
		t.Errorf("tenant bucket %.3f, want %.3f", got, wantTenant)
	}
	if n := metric(t, s.CompleterURL, "mintgate_completer_refunds_taken_back_total"); n != 1 {
		t.Errorf("refunds taken back %v, want 1", n)
	}
}

// A sweeper started without the signer's tier file refunds at the shape
// the grant was issued under: never above that tier's capacity, and never
// shortening the bucket key's life (a key that vanishes is a full bucket).
func TestRefundKeepsTheGrantsShape(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tiers.json")
	if err := os.WriteFile(file, []byte(`{"shape":{"user":"2:2/1h"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	s := newStack(t, stackOptions{URLTTL: 2 * time.Second, Grace: time.Second,
		SignerExtra: map[string]string{"MINTGATE_TENANT_TIERS_FILE": file}})
	rdb := s.redis(t)
	tok := s.token(t, "shape", "sam")
	user := keys.Bucket("shape", keys.UserSubject("sam"))
	a, b := s.mustSign(t, tok, 10), s.mustSign(t, tok, 10)
	if code, _, _ := s.sign(t, tok, 10); code != http.StatusTooManyRequests {
		t.Fatalf("third sign on a 2-token tier: %d, want 429", code)
	}
	before := rdb.PTTL(ctxT(t), user).Val()
	for _, g := range []api.SignResponse{a, b} {
		s.waitStatus(t, tok, g.URLID, "refunded", 30*time.Second)
	}
	if got := bucketTokens(t, rdb, user); got > 2.001 {
		t.Errorf("bucket holds %.3f tokens after two refunds, want 2 at most (the tier's capacity)", got)
	}
	if got := rdb.PTTL(ctxT(t), user).Val(); got < before-30*time.Second {
		t.Errorf("refunds cut the bucket key's PTTL from %v to %v", before, got)
	}
}
