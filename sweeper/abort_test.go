package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/google/uuid"

	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/ledger"
	"github.com/mintgate/mintgate/shared/multipart"
	"github.com/mintgate/mintgate/shared/quota"
	"github.com/mintgate/mintgate/shared/testenv"
	"github.com/mintgate/mintgate/shared/tiers"
)

// mpStack is a sweeper stack with a real versitygw, and the multipart
// grants it is given.
type mpStack struct {
	*stack
	gw      *testenv.VersityGW
	s3      *s3.Client
	uploads *multipart.Uploads
	store   *quota.Store
}

func newMPStack(t *testing.T) *mpStack {
	t.Helper()
	s := newStack(t, false)
	gw := testenv.StartVersityGW(t, "")
	return &mpStack{stack: s, gw: gw, s3: gw.Client(), uploads: multipart.New(gw.Client(), gw.Bucket), store: quota.New(s.rdb)}
}

func (m *mpStack) start() *instance {
	m.t.Helper()
	return m.startWith(testenv.S3Env(m.gw.Endpoint, m.gw.Bucket))
}

// grant is a multipart grant of alice with one 1000-byte part uploaded,
// due a second from now (its expiry plus the stack's grace).
func (m *mpStack) grant() (ledger.Grant, types.CompletedPart) {
	m.t.Helper()
	id := uuid.NewString()
	g := newGrant(id, tiers.User, "u:alice", time.Now())
	g.Key = keys.Object(tenant, id)
	uploadID, err := m.uploads.Create(context.Background(), g.Key, "video/mp4", false)
	if err != nil {
		m.t.Fatal(err)
	}
	g.UploadID = uploadID
	p, err := m.uploads.SignPart(context.Background(), g.Key, uploadID, 1, 1000, "", time.Minute)
	if err != nil {
		m.t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPut, p.URL, bytes.NewReader(make([]byte, 1000)))
	res, err := http.DefaultClient.Do(req)
	if err != nil || res.StatusCode != http.StatusOK {
		m.t.Fatalf("PUT part: %v %v", res, err)
	}
	res.Body.Close()
	return g, types.CompletedPart{PartNumber: aws.Int32(1), ETag: aws.String(res.Header.Get("ETag"))}
}

// open reports whether S3 still holds g's upload.
func (m *mpStack) open(g ledger.Grant) bool {
	m.t.Helper()
	_, err := m.s3.ListParts(context.Background(), &s3.ListPartsInput{Bucket: aws.String(m.gw.Bucket), Key: aws.String(g.Key), UploadId: aws.String(g.UploadID)})
	var ae smithy.APIError
	if errors.As(err, &ae) && ae.ErrorCode() == "NoSuchUpload" {
		return false
	}
	if err != nil {
		m.t.Fatal(err)
	}
	return true
}

func (m *mpStack) exists(key string) bool {
	return m.rdb.Exists(context.Background(), key).Val() == 1
}

// An abandoned multipart grant is aborted in S3 after its life, then
// refunded, once: a copy of its batch delivered again moves nothing.
func TestAbandonedMultipartIsAbortedThenRefundedOnce(t *testing.T) {
	m := newMPStack(t)
	user := keys.Bucket(tenant, "u:alice")
	m.setTokens(user, 0)
	g, _ := m.grant()
	in := m.start()
	m.record(g)
	waitFor(t, 15*time.Second, "the refund", func() bool { return m.exists(keys.Refunded(tenant, g.URLID)) })
	if m.open(g) {
		t.Fatal("refunded while S3 still holds the upload")
	}
	if floor(m.tokens(user)) != 1 {
		t.Fatalf("after the sweep alice holds %v tokens, want 1", m.tokens(user))
	}
	m.record(g) // the same grant again, as a replayed batch would bring it
	waitFor(t, 15*time.Second, "the copy swept", func() bool { return in.metric(t, "mintgate_sweeper_already_refunded_total") >= 1 })
	if floor(m.tokens(user)) != 1 {
		t.Fatalf("a copy refunded again: %v tokens", m.tokens(user))
	}
	if n := in.metric(t, `mintgate_sweeper_multipart_aborts_total{outcome="aborted"}`); n != 1 {
		t.Errorf("aborts{aborted} = %v, want 1", n)
	}
}

// An upload S3 completed, whose ObjectCreated the completer has not handled
// yet, is never refunded: the sweeper learns it from S3 and marks it done
// as the completer would (its event still to publish).
func TestCompletedMultipartIsNeverRefunded(t *testing.T) {
	m := newMPStack(t)
	user := keys.Bucket(tenant, "u:alice")
	m.setTokens(user, 0)
	g, part := m.grant()
	_, err := m.s3.CompleteMultipartUpload(context.Background(), &s3.CompleteMultipartUploadInput{
		Bucket: aws.String(m.gw.Bucket), Key: aws.String(g.Key), UploadId: aws.String(g.UploadID),
		MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{part}},
	})
	if err != nil {
		t.Fatal(err)
	}
	in := m.start()
	m.record(g)
	waitFor(t, 15*time.Second, "the sweep", func() bool { return in.metric(t, "mintgate_sweeper_already_done_total") >= 1 })
	if v := m.rdb.Get(context.Background(), keys.Done(tenant, g.URLID)).Val(); v != quota.DoneUnpublished {
		t.Errorf("done marker %q, want %q", v, quota.DoneUnpublished)
	}
	if m.exists(keys.Refunded(tenant, g.URLID)) || floor(m.tokens(user)) != 0 {
		t.Fatalf("a completed upload was refunded: %v tokens", m.tokens(user))
	}
}

// A grant whose complete is in progress (the signer's claim) is held until
// the claim's lease ends, then aborted and refunded; the complete that
// comes after finds the abort's claim.
func TestMultipartHeldWhileACompleteRuns(t *testing.T) {
	m := newMPStack(t)
	user := keys.Bucket(tenant, "u:alice")
	m.setTokens(user, 0)
	g, _ := m.grant()
	cl, err := m.store.ClaimComplete(context.Background(), tenant, g.URLID, 4*time.Second)
	if err != nil || cl.Claim != quota.ClaimOK {
		t.Fatalf("claim: %+v %v", cl, err)
	}
	claimed := time.Now()
	in := m.start()
	m.record(g)
	waitFor(t, 15*time.Second, "the refund", func() bool { return m.exists(keys.Refunded(tenant, g.URLID)) })
	if held := time.Since(claimed); held < 4*time.Second {
		t.Fatalf("refunded %v after a complete claimed it for 4s", held)
	}
	if m.open(g) || floor(m.tokens(user)) != 1 {
		t.Fatalf("after the lease: upload open %v, %v tokens", m.open(g), m.tokens(user))
	}
	if cl, err := m.store.ClaimComplete(context.Background(), tenant, g.URLID, time.Minute); err != nil || cl.Claim != quota.ClaimClosed {
		t.Fatalf("a complete after the abort: %+v %v, want closed", cl, err)
	}
	if n := in.metric(t, "mintgate_sweeper_early_total"); n < 1 {
		t.Errorf("early_total %v: the held grant was not delivered again", n)
	}
}

// A sweeper killed between S3's abort and the refund: the next delivery
// finds the upload gone and its object absent, and refunds, once. (The
// state is made with the abort's own calls: a SIGKILL at that line leaves
// exactly it.)
func TestAbortedButNotRefundedIsRefundedOnce(t *testing.T) {
	m := newMPStack(t)
	user := keys.Bucket(tenant, "u:alice")
	m.setTokens(user, 0)
	g, _ := m.grant()
	ctx := context.Background()
	if cl, err := m.store.ClaimAbort(ctx, tenant, g.URLID); err != nil || cl.Claim != quota.ClaimOK {
		t.Fatalf("claim: %+v %v", cl, err)
	}
	if err := m.uploads.Abort(ctx, g.Key, g.UploadID); err != nil {
		t.Fatal(err)
	}
	in := m.start()
	m.record(g)
	waitFor(t, 20*time.Second, "the refund", func() bool { return m.exists(keys.Refunded(tenant, g.URLID)) })
	if floor(m.tokens(user)) != 1 {
		t.Fatalf("%v tokens, want 1", m.tokens(user))
	}
	if n := in.metric(t, `mintgate_sweeper_multipart_aborts_total{outcome="gone"}`); n != 1 {
		t.Errorf("aborts{gone} = %v, want 1", n)
	}
}
