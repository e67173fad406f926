package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/mintgate/mintgate/api"
	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/ledger"
	"github.com/mintgate/mintgate/shared/testenv"
	"github.com/mintgate/mintgate/signer/internal/apierr"
	"github.com/mintgate/mintgate/signer/internal/ratelimit"
	"github.com/mintgate/mintgate/signer/internal/request"
)

const (
	mib = 1 << 20
	// mpTiers: a caller's bucket holds 3 and never refills during a test
	// (the signer's clock stands still), so tokens count exactly.
	mpTiers = "anonymous=5:5/60s,user=3:0.001,tenant=100:0.001"
)

// mpSigner is a signer on a real versitygw with 5 MiB parts and single
// PUTs of at most 10 MiB, so that 12 MiB must go in parts.
type mpSigner struct {
	*signer
	s3     *testenv.VersityGW
	client *s3.Client
}

func startMultipart(t *testing.T, extra map[string]string, opts ...option) *mpSigner {
	t.Helper()
	return startMultipartOn(t, testenv.StartVersityGW(t, ""), extra, opts...)
}

// startMultipartOn is startMultipart on the gateway v.
func startMultipartOn(t *testing.T, v *testenv.VersityGW, extra map[string]string, opts ...option) *mpSigner {
	t.Helper()
	env := newStack(t).env(t)
	maps.Copy(env, testenv.S3Env(v.Endpoint, v.Bucket))
	env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"] = testenv.AWSAccessKey, testenv.AWSSecretKey
	env["MINTGATE_MAX_OBJECT_BYTES"] = strconv.Itoa(10 * mib)
	env["MINTGATE_MULTIPART_PART_BYTES"] = strconv.Itoa(5 * mib)
	env["MINTGATE_TIERS"] = mpTiers
	// The clock stands still: a read limit would never refill (its own
	// tests cover it).
	env["MINTGATE_READ_LIMIT"] = "off"
	maps.Copy(env, extra)
	return &mpSigner{signer: start(t, env, opts...), s3: v, client: v.Client()}
}

func bearer(tok string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + tok, "Content-Type": "application/json"}
}

// create posts POST /uploads/multipart for size bytes of video.
func (s *mpSigner) create(tok, key string, size int64) reply {
	s.t.Helper()
	h := bearer(tok)
	h[request.HeaderIdempotencyKey] = key
	return s.do(http.MethodPost, "/uploads/multipart", h, fmt.Sprintf(`{"contentType":"image/png","contentLength":%d}`, size))
}

func (s *mpSigner) parts(tok, urlID string, ns ...int) reply {
	s.t.Helper()
	b, _ := json.Marshal(api.PartsRequest{PartNumbers: ns})
	return s.do(http.MethodPost, "/uploads/"+urlID+"/parts", bearer(tok), string(b))
}

func (s *mpSigner) complete(tok, urlID string, parts []api.CompletedPart) reply {
	s.t.Helper()
	b, _ := json.Marshal(api.CompleteRequest{Parts: parts})
	return s.do(http.MethodPost, "/uploads/"+urlID+"/complete", bearer(tok), string(b))
}

func (s *mpSigner) abort(tok, urlID string) reply {
	s.t.Helper()
	return s.do(http.MethodDelete, "/uploads/"+urlID, bearer(tok), "")
}

func (s *mpSigner) status(tok, urlID string) string {
	s.t.Helper()
	r := s.do(http.MethodGet, "/uploads/"+urlID, bearer(tok), "")
	if r.status != http.StatusOK {
		s.t.Fatalf("status of %s: %d %s", urlID, r.status, r.raw)
	}
	return r.str("status")
}

// put PUTs size bytes to a signed part and returns the part as a complete
// names it.
func (s *mpSigner) put(p api.SignedPart, size int64) api.CompletedPart {
	s.t.Helper()
	req, _ := http.NewRequest(p.Method, p.URL, bytes.NewReader(make([]byte, size)))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		s.t.Fatalf("PUT part %d: %d %s", p.PartNumber, res.StatusCode, body)
	}
	return api.CompletedPart{PartNumber: p.PartNumber, ETag: res.Header.Get("ETag")}
}

// signed decodes a 200 of POST /parts.
func signed(t *testing.T, r reply) []api.SignedPart {
	t.Helper()
	if r.status != http.StatusOK {
		t.Fatalf("parts: %d %s", r.status, r.raw)
	}
	var out api.PartsResponse
	if err := json.Unmarshal(r.raw, &out); err != nil {
		t.Fatal(err)
	}
	return out.Parts
}

// count is a bucket's tokens, to a thousandth.
func (s *mpSigner) count(key string) float64 {
	s.t.Helper()
	v, err := strconv.ParseFloat(s.tokens(key), 64)
	if err != nil {
		s.t.Fatalf("tokens of %s: %v", key, err)
	}
	return math.Round(v*1000) / 1000
}

// head is the object's size, or -1 when it does not exist.
func (s *mpSigner) head(key string) int64 {
	s.t.Helper()
	out, err := s.client.HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: aws.String(s.s3.Bucket), Key: aws.String(key)})
	if err != nil {
		return -1
	}
	return aws.ToInt64(out.ContentLength)
}

// uploads is how many multipart uploads S3 holds open under key.
func (s *mpSigner) uploads(key string) int {
	s.t.Helper()
	out, err := s.client.ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{Bucket: aws.String(s.s3.Bucket), Prefix: aws.String(key)})
	if err != nil {
		s.t.Fatal(err)
	}
	return len(out.Uploads)
}

// The journey of the issue: 12 MiB in 5 MiB parts above a 10 MiB single-PUT
// limit — create, sign, PUT, list, a short complete refused with nothing
// created, the full one, its retry, and what is closed after.
func TestMultipartJourney(t *testing.T) {
	s := startMultipart(t, nil)
	alice := s.token("acme", "alice")
	caller := keys.Bucket("acme", keys.UserSubject("alice"))

	if r := s.sign(alice, newKey(), `{"contentType":"image/png","contentLength":12582912}`); r.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("a single PUT of 12 MiB: %d, want 413", r.status)
	}
	key := newKey()
	r := s.create(alice, key, 12*mib)
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.raw)
	}
	var g api.MultipartResponse
	if err := json.Unmarshal(r.raw, &g); err != nil {
		t.Fatal(err)
	}
	if g.PartSize != 5*mib || g.PartCount != 3 || g.UploadID == "" || g.Key != keys.Object("acme", g.URLID) ||
		g.ExpiresIn != 3600 || !g.ExpiresAt.Equal(s.clock.Now().UTC().Truncate(time.Second).Add(time.Hour)) {
		t.Fatalf("create: %s", r.raw)
	}
	if got := s.count(caller); got != 2 {
		t.Fatalf("after the create the caller holds %v tokens, want 2", got)
	}
	if again := s.create(alice, key, 12*mib); again.status != http.StatusOK || !bytes.Equal(again.raw, r.raw) || again.header.Get(request.HeaderReplayed) != "true" {
		t.Fatalf("replay: %d %s", again.status, again.raw)
	}
	if got := s.count(caller); got != 2 {
		t.Fatalf("the replay charged: %v tokens", got)
	}
	if sign := s.sign(alice, key, pngBody); sign.status != http.StatusUnprocessableEntity {
		t.Fatalf("a sign on the create's key: %d, want 422", sign.status)
	}

	ps := signed(t, s.parts(alice, g.URLID, 1, 2, 3))
	wantLen := []string{"5242880", "5242880", "2097152"}
	for i, p := range ps {
		if p.PartNumber != i+1 || p.Method != http.MethodPut || p.Headers.ContentLength != wantLen[i] || !strings.Contains(p.URL, "partNumber="+strconv.Itoa(i+1)) {
			t.Fatalf("part %d: %+v", i+1, p)
		}
	}
	var done []api.CompletedPart
	for i, p := range ps {
		n, _ := strconv.ParseInt(wantLen[i], 10, 64)
		done = append(done, s.put(p, n))
	}
	if got := s.count(caller); got != 2 {
		t.Fatalf("signing parts charged: %v tokens", got)
	}
	list := s.do(http.MethodGet, "/uploads/"+g.URLID+"/parts", bearer(alice), "")
	var pl api.PartList
	if err := json.Unmarshal(list.raw, &pl); err != nil || list.status != http.StatusOK || len(pl.Parts) != 3 || pl.Parts[2].Size != 2*mib || pl.Parts[0].ETag != done[0].ETag {
		t.Fatalf("list: %d %s", list.status, list.raw)
	}

	// 10 of 12 MiB: refused, nothing created, the upload still open.
	mustStatus(t, s.complete(alice, g.URLID, done[:2]), http.StatusUnprocessableEntity, apierr.CodeSizeMismatch)
	if n := s.head(g.Key); n != -1 {
		t.Fatalf("after the 422 the object exists (%d bytes)", n)
	}
	mustStatus(t, s.complete(alice, g.URLID, []api.CompletedPart{done[0], {PartNumber: 2, ETag: `"0"`}, done[2]}), http.StatusBadRequest, apierr.CodeInvalidRequest)

	for range 2 { // the retry after success answers the same
		c := s.complete(alice, g.URLID, done)
		if c.status != http.StatusOK || c.str("urlId") != g.URLID || c.str("key") != g.Key || c.body["size"] != float64(12*mib) {
			t.Fatalf("complete: %d %s", c.status, c.raw)
		}
	}
	if n := s.head(g.Key); n != 12*mib {
		t.Fatalf("the object holds %d bytes, want 12 MiB", n)
	}
	// Complete in S3, no verdict yet: no completer runs here to verify
	// the object (SPEC §9), and the grant is closed all the same.
	if st := s.status(alice, g.URLID); st != statusVerifying {
		t.Fatalf("status %q, want verifying", st)
	}
	mustStatus(t, s.parts(alice, g.URLID, 1), http.StatusGone, apierr.CodeGrantClosed)
	mustStatus(t, s.abort(alice, g.URLID), http.StatusConflict, apierr.CodeNotAbortable)
	if got := s.count(caller); got != 2 {
		t.Fatalf("a completed upload's token came back: %v tokens", got)
	}
}

// Only the caller who created a grant may sign, list, complete or abort
// it: to anyone else it is the 404 of an unknown urlId. A single PUT's
// grant has no parts, and is never aborted.
func TestMultipartGrantsAreTheCallersOwn(t *testing.T) {
	s := startMultipart(t, nil)
	alice, bob := s.token("acme", "alice"), s.token("acme", "bob")
	r := s.create(alice, newKey(), 12*mib)
	id := r.str("urlId")
	mustStatus(t, s.parts(bob, id, 1), http.StatusNotFound, apierr.CodeNotFound)
	mustStatus(t, s.do(http.MethodGet, "/uploads/"+id+"/parts", bearer(bob), ""), http.StatusNotFound, apierr.CodeNotFound)
	mustStatus(t, s.complete(bob, id, []api.CompletedPart{{PartNumber: 1, ETag: `"x"`}}), http.StatusNotFound, apierr.CodeNotFound)
	mustStatus(t, s.abort(bob, id), http.StatusNotFound, apierr.CodeNotFound)
	mustStatus(t, s.parts(alice, id, 4), http.StatusBadRequest, apierr.CodeInvalidRequest)
	mustStatus(t, s.parts(alice, id, 1, 1), http.StatusBadRequest, apierr.CodeInvalidRequest)
	mustStatus(t, s.parts(alice, id), http.StatusBadRequest, apierr.CodeInvalidRequest)
	mustStatus(t, s.create(alice, newKey(), 6<<30), http.StatusRequestEntityTooLarge, apierr.CodeTooLarge)

	single := s.sign(alice, newKey(), pngBody)
	mustStatus(t, s.abort(alice, single.str("urlId")), http.StatusConflict, apierr.CodeNotAbortable)
	mustStatus(t, s.parts(alice, single.str("urlId"), 1), http.StatusNotFound, apierr.CodeNotFound)
}

// A part's URL signs its exact length: a longer body is refused (a part
// small enough that the gateway's early 403 is read whole).
func TestPartBodyLongerThanSignedIsRefused(t *testing.T) {
	s := startMultipart(t, nil)
	alice := s.token("acme", "alice")
	g := s.create(alice, newKey(), 1000)
	p := signed(t, s.parts(alice, g.str("urlId"), 1))[0]
	if p.Headers.ContentLength != "1000" {
		t.Fatalf("part of a 1000-byte upload: %+v", p)
	}
	req, _ := http.NewRequest(http.MethodPut, p.URL, bytes.NewReader(make([]byte, 1001)))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden {
		t.Fatalf("PUT of 1001 bytes on a part signed for 1000: %d, want 403", res.StatusCode)
	}
}

// DELETE aborts the upload in S3, once, and its token stays spent (a
// create is a create: TestAbortNeverMultipliesCreates); the grant reads
// aborted, and takes no parts and no complete after.
func TestAbortEndsTheGrantOnce(t *testing.T) {
	s := startMultipart(t, nil)
	alice := s.token("acme", "alice")
	caller := keys.Bucket("acme", keys.UserSubject("alice"))
	g := s.create(alice, newKey(), 12*mib)
	id, key := g.str("urlId"), g.str("key")
	part := s.put(signed(t, s.parts(alice, id, 3))[0], 2*mib)
	if s.count(caller) != 2 || s.uploads(key) != 1 {
		t.Fatalf("after the create: %v tokens, %d uploads", s.count(caller), s.uploads(key))
	}
	for range 2 {
		if r := s.abort(alice, id); r.status != http.StatusNoContent {
			t.Fatalf("DELETE: %d %s", r.status, r.raw)
		}
		if got := s.count(caller); got != 2 {
			t.Fatalf("after DELETE the caller holds %v tokens, want 2 (the create's token is not given back)", got)
		}
	}
	if n := s.uploads(key); n != 0 {
		t.Fatalf("S3 still holds %d uploads of the aborted grant", n)
	}
	if st := s.status(alice, id); st != statusAborted {
		t.Fatalf("status %q, want aborted", st)
	}
	mustStatus(t, s.parts(alice, id, 1), http.StatusGone, apierr.CodeGrantClosed)
	mustStatus(t, s.complete(alice, id, []api.CompletedPart{part}), http.StatusGone, apierr.CodeGrantClosed)
}

// A signer killed between S3's complete and its own answer left the
// object made and no done marker: the client's retry answers the same
// 200 and the grant reads completed. (The state is made with S3's own
// client: a SIGKILL at that line leaves exactly it.)
func TestCompleteRetryAfterTheSignerDiedAtS3sAnswer(t *testing.T) {
	s := startMultipart(t, nil)
	alice := s.token("acme", "alice")
	g := s.create(alice, newKey(), 1000)
	id, key, uploadID := g.str("urlId"), g.str("key"), g.str("uploadId")
	part := s.put(signed(t, s.parts(alice, id, 1))[0], 1000)
	_, err := s.client.CompleteMultipartUpload(context.Background(), &s3.CompleteMultipartUploadInput{
		Bucket: aws.String(s.s3.Bucket), Key: aws.String(key), UploadId: aws.String(uploadID),
		MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{{PartNumber: aws.Int32(1), ETag: aws.String(part.ETag)}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if st := s.status(alice, id); st != statusPending {
		t.Fatalf("status before the retry %q", st)
	}
	c := s.complete(alice, id, []api.CompletedPart{part})
	if c.status != http.StatusOK || c.body["size"] != float64(1000) {
		t.Fatalf("retry: %d %s", c.status, c.raw)
	}
	if st := s.status(alice, id); st != statusVerifying { // completed in S3; the completer's verdict is to come
		t.Fatalf("status %q, want verifying", st)
	}
}

// A create whose grant cannot be recorded issues nothing, charges nothing
// and leaves no upload open in S3.
func TestMultipartCreateWithoutTheLedgerLeavesNothing(t *testing.T) {
	s := startMultipart(t, nil, withRecorder(failingRecorder{}))
	alice := s.token("acme", "alice")
	r := s.create(alice, newKey(), 12*mib)
	mustStatus(t, r, http.StatusServiceUnavailable, apierr.CodeLedgerDown)
	if got := s.count(keys.Bucket("acme", keys.UserSubject("alice"))); got != 3 {
		t.Fatalf("after the 503 the caller holds %v tokens, want 3", got)
	}
	if n := s.uploads("incoming/acme/"); n != 0 {
		t.Fatalf("S3 holds %d uploads after the 503", n)
	}
}

type failingRecorder struct{}

func (failingRecorder) Record(context.Context, ledger.Grant) error {
	return errors.New("ledger down (test)")
}

// A complete and a DELETE of one grant at once: one wins, and what the
// caller sees agrees with S3 and the buckets — a 200 with the object made
// and nothing back, or a 204 with no object and its bytes back once (its
// token never). A DELETE that meets the complete in progress is 409 and
// says so; once the complete answered, it is answered for good.
func TestCompleteRacingAbort(t *testing.T) {
	s := startMultipart(t, map[string]string{"MINTGATE_TIERS": "anonymous=5:5/60s,user=100:0.001,tenant=1000:0.001,user_bytes=1MiB:1KiB/1h"})
	alice := s.token("acme", "alice")
	caller := keys.Bucket("acme", keys.UserSubject("alice"))
	callerBytes := keys.ByteBucket("acme", keys.UserSubject("alice"))
	var completed, aborted int
	for i := range 12 {
		g := s.create(alice, newKey(), 1000)
		id, key := g.str("urlId"), g.str("key")
		part := s.put(signed(t, s.parts(alice, id, 1))[0], 1000)
		before, bytesBefore := s.count(caller), s.count(callerBytes)
		var (
			wg   sync.WaitGroup
			c, d reply
		)
		// Each side starts first in half the races, the other later by
		// 0 to 10 ms: both orders, and the overlaps between.
		lag := func(side int) {
			if i%2 == side {
				time.Sleep(time.Duration(i/2) * 2 * time.Millisecond)
			}
		}
		wg.Go(func() {
			lag(0)
			c = s.complete(alice, id, []api.CompletedPart{part})
		})
		wg.Go(func() {
			lag(1)
			d = s.abort(alice, id)
			for d.status == http.StatusConflict && d.code() == apierr.CodeInProgress {
				time.Sleep(20 * time.Millisecond)
				d = s.abort(alice, id)
			}
		})
		wg.Wait()
		after, bytesAfter := s.count(caller), s.count(callerBytes)
		switch {
		case after != before:
			t.Fatalf("race %d: tokens %v → %v, want none back", i, before, after)
		case c.status == http.StatusOK && d.status == http.StatusConflict && d.code() == apierr.CodeNotAbortable && s.head(key) == 1000 && bytesAfter == bytesBefore:
			completed++
		case c.status == http.StatusGone && d.status == http.StatusNoContent && s.head(key) == -1 && bytesAfter == bytesBefore+1000:
			aborted++
		default:
			t.Fatalf("race %d: complete %d %s, DELETE %d %s, object %d bytes, bytes %v → %v", i, c.status, c.raw, d.status, d.raw, s.head(key), bytesBefore, bytesAfter)
		}
	}
	t.Logf("12 races: %d completed, %d aborted", completed, aborted)
}

// The multipart routes' real answers match api/openapi.yaml: every status
// a caller can cause, with its headers and body.
func TestMultipartAnswersMatchOpenAPI(t *testing.T) {
	c := &apiCheck{t: t, doc: loadAPI(t), seen: map[string]bool{}}
	s := startMultipart(t, nil)
	post, del, get := http.MethodPost, http.MethodDelete, http.MethodGet
	alice, bob := s.token("acme", "alice"), s.token("acme", "bob")
	const create = "/uploads/multipart"

	// What a client reads first: 12 MiB is above a single PUT, and the
	// create cuts it into the parts the limits announce.
	var lim api.LimitsResponse
	if err := json.Unmarshal(c.expect(http.StatusOK, get, limitsPath, s.do(get, limitsPath, nil, "")).raw, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.MaxObjectBytes != 10*mib || lim.PartSize != 5*mib {
		t.Errorf("limits %+v, want 10 MiB single PUTs and 5 MiB parts", lim)
	}
	key := newKey()
	g := c.expect(http.StatusCreated, post, create, s.create(alice, key, 12*mib))
	if g.body["partSize"] != float64(lim.PartSize) {
		t.Errorf("create %s, want the limits' partSize %d", g.raw, lim.PartSize)
	}
	c.expect(http.StatusOK, post, create, s.create(alice, key, 12*mib))
	c.expect(http.StatusUnprocessableEntity, post, create, s.create(alice, key, 11*mib))
	c.expect(http.StatusRequestEntityTooLarge, post, create, s.create(alice, newKey(), 6<<30))
	c.expect(http.StatusUnauthorized, post, create, s.create("", newKey(), mib))
	id := g.str("urlId")
	parts, list, complete, grant := "/uploads/"+id+"/parts", "/uploads/"+id+"/parts", "/uploads/"+id+"/complete", "/uploads/"+id

	ps := signed(t, c.expect(http.StatusOK, post, parts, s.parts(alice, id, 1, 2, 3)))
	c.expect(http.StatusBadRequest, post, parts, s.parts(alice, id, 0))
	c.expect(http.StatusNotFound, post, parts, s.parts(bob, id, 1))
	var done []api.CompletedPart
	for i, p := range ps {
		done = append(done, s.put(p, []int64{5 * mib, 5 * mib, 2 * mib}[i]))
	}
	c.expect(http.StatusOK, get, list, s.do(get, list, bearer(alice), ""))
	c.expect(http.StatusNotFound, get, list, s.do(get, list, bearer(bob), ""))
	c.expect(http.StatusUnprocessableEntity, post, complete, s.complete(alice, id, done[:2]))
	c.expect(http.StatusBadRequest, post, complete, s.complete(alice, id, []api.CompletedPart{done[1], done[0]}))
	c.expect(http.StatusNotFound, post, complete, s.complete(bob, id, done))
	c.expect(http.StatusOK, post, complete, s.complete(alice, id, done))
	c.expect(http.StatusOK, post, complete, s.complete(alice, id, done))
	c.expect(http.StatusGone, post, parts, s.parts(alice, id, 1))
	c.expect(http.StatusGone, get, list, s.do(get, list, bearer(alice), ""))
	c.expect(http.StatusConflict, del, grant, s.abort(alice, id))

	// Abort, and what a closed grant answers.
	other := c.expect(http.StatusCreated, post, create, s.create(alice, newKey(), mib)).str("urlId")
	c.expect(http.StatusNotFound, del, "/uploads/"+other, s.abort(bob, other))
	c.expect(http.StatusNoContent, del, "/uploads/"+other, s.abort(alice, other))
	c.expect(http.StatusNoContent, del, "/uploads/"+other, s.abort(alice, other))
	if r := c.expect(http.StatusOK, get, "/uploads/"+other, s.do(get, "/uploads/"+other, bearer(alice), "")); r.str("status") != statusAborted {
		t.Errorf("status %s, want aborted", r.raw)
	}
	c.expect(http.StatusGone, post, "/uploads/"+other+"/complete", s.complete(alice, other, done[:1]))
	single := s.sign(alice, newKey(), pngBody).str("urlId")
	c.expect(http.StatusConflict, del, "/uploads/"+single, s.abort(alice, single))

	// Once alice's bucket (3) is spent: 429 as a sign's.
	r := s.create(alice, newKey(), mib)
	for ; r.status == http.StatusCreated; r = s.create(alice, newKey(), mib) {
		c.expect(http.StatusCreated, post, create, r)
	}
	if r := c.expect(http.StatusTooManyRequests, post, create, r); r.str("scope") != ratelimit.ScopeCaller {
		t.Errorf("429 %s, want scope caller", r.raw)
	}

	// 503: S3 down.
	carol := s.token("acme", "carol")
	open := c.expect(http.StatusCreated, post, create, s.create(carol, newKey(), mib)).str("urlId")
	open2 := c.expect(http.StatusCreated, post, create, s.create(carol, newKey(), mib)).str("urlId")
	s.s3.Stop()
	c.expect(http.StatusServiceUnavailable, post, create, s.create(carol, newKey(), mib))
	c.expect(http.StatusServiceUnavailable, get, "/uploads/"+open+"/parts", s.do(get, "/uploads/"+open+"/parts", bearer(carol), ""))
	c.expect(http.StatusServiceUnavailable, del, "/uploads/"+open2, s.abort(carol, open2))
	c.expect(http.StatusServiceUnavailable, post, "/uploads/"+open+"/complete", s.complete(carol, open, done[:1]))
	// That complete may yet run in S3: its claim holds aborts off until
	// its lease ends.
	if r := c.expect(http.StatusConflict, del, "/uploads/"+open, s.abort(carol, open)); r.code() != apierr.CodeInProgress || retryAfter(t, r) < 60 {
		t.Errorf("DELETE after a complete S3 did not answer: %s %v", r.raw, r.header)
	}
}
