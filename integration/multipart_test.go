package integration

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/google/uuid"

	"github.com/mintgate/mintgate/api"
	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/testenv"
)

// mp is one caller's multipart calls on a stack.
type mp struct {
	t   *testing.T
	s   *stack
	tok string
}

func (m mp) call(method, path string, body any) (int, []byte) {
	m.t.Helper()
	var rd io.Reader = http.NoBody
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, m.s.SignerURL+path, rd)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+m.tok)
	if path == "/uploads/multipart" {
		req.Header.Set("Idempotency-Key", uuid.NewString())
	}
	resp, err := httpc.Do(req)
	if err != nil {
		m.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}

func (m mp) create(size int64) api.MultipartResponse {
	m.t.Helper()
	code, raw := m.call(http.MethodPost, "/uploads/multipart", map[string]any{"contentType": "image/png", "contentLength": size})
	var g api.MultipartResponse
	if code != http.StatusCreated || json.Unmarshal(raw, &g) != nil {
		m.t.Fatalf("create: %d %s", code, raw)
	}
	return g
}

func (m mp) sign(id string, ns ...int) []api.SignedPart {
	m.t.Helper()
	code, raw := m.call(http.MethodPost, "/uploads/"+id+"/parts", api.PartsRequest{PartNumbers: ns})
	var out api.PartsResponse
	if code != http.StatusOK || json.Unmarshal(raw, &out) != nil {
		m.t.Fatalf("parts: %d %s", code, raw)
	}
	return out.Parts
}

// putPart PUTs n bytes to a part's URL: its status and ETag.
func putPart(t *testing.T, p api.SignedPart, n int64) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(p.Method, p.URL, bytes.NewReader(make([]byte, n)))
	resp, err := httpc.Do(req)
	if err != nil {
		t.Fatalf("PUT part %d: %v", p.PartNumber, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header.Get("ETag")
}

func (s *stack) s3(t *testing.T) *s3.Client {
	t.Helper()
	return browserS3Client(s.S3Endpoint, testenv.AWSAccessKey, testenv.AWSSecretKey)
}

// TestMultipartJourney is issue 19's journey on the local stack's real
// versitygw, with the completer and the sweeper: 12 MiB in 5 MiB parts
// above a 10 MiB single-PUT limit completes to exactly 12 MiB and reads
// completed (the completer counts ObjectCreated:CompleteMultipartUpload);
// a part body longer than signed is 403; another caller's part request
// 404; 10 of 12 MiB is 422 and leaves no object; DELETE ends the grant
// and gives no token back, then or at its due time; an abandoned grant is aborted in S3 and refunded once after
// its life; the completed one never is.
func TestMultipartJourney(t *testing.T) {
	const mib = 1 << 20
	s := newStack(t, stackOptions{Grace: 2 * time.Second, Tiers: slowTiers, SignerExtra: map[string]string{
		"MINTGATE_MAX_OBJECT_BYTES":     strconv.Itoa(10 * mib),
		"MINTGATE_MULTIPART_PART_BYTES": strconv.Itoa(5 * mib),
		"MINTGATE_MULTIPART_TTL":        "4s",
	}})
	ctx := ctxT(t)
	rdb := s.redis(t)
	client := s.s3(t)
	alice := mp{t: t, s: s, tok: s.token(t, "acme", "mp-alice")}
	bob := mp{t: t, s: s, tok: s.token(t, "acme", "mp-bob")}
	tokens := func() float64 {
		v, err := rdb.HGet(ctx, keys.Bucket("acme", keys.UserSubject("mp-alice")), "t").Float64()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}

	// Completed: 12 MiB in three parts.
	g := alice.create(12 * mib)
	if g.PartCount != 3 || g.PartSize != 5*mib {
		t.Fatalf("create: %+v", g)
	}
	if code, _ := bob.call(http.MethodPost, "/uploads/"+g.URLID+"/parts", api.PartsRequest{PartNumbers: []int{1}}); code != http.StatusNotFound {
		t.Fatalf("another caller's part request: %d, want 404", code)
	}
	ps := alice.sign(g.URLID, 1, 2, 3)
	var parts []api.CompletedPart
	for i, p := range ps {
		n := []int64{5 * mib, 5 * mib, 2 * mib}[i]
		code, etag := putPart(t, p, n)
		if code != http.StatusOK {
			t.Fatalf("PUT part %d: %d", p.PartNumber, code)
		}
		parts = append(parts, api.CompletedPart{PartNumber: p.PartNumber, ETag: etag})
	}
	if code, raw := alice.call(http.MethodGet, "/uploads/"+g.URLID+"/parts", nil); code != http.StatusOK || !bytes.Contains(raw, []byte(`"size":2097152`)) {
		t.Fatalf("list: %d %s", code, raw)
	}
	if code, raw := alice.call(http.MethodPost, "/uploads/"+g.URLID+"/complete", api.CompleteRequest{Parts: parts[:2]}); code != http.StatusUnprocessableEntity || !bytes.Contains(raw, []byte("size_mismatch")) {
		t.Fatalf("complete of 10 of 12 MiB: %d %s", code, raw)
	}
	if _, err := client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String(g.Key)}); err == nil {
		t.Fatal("the refused complete left an object")
	}
	if code, raw := alice.call(http.MethodPost, "/uploads/"+g.URLID+"/complete", api.CompleteRequest{Parts: parts}); code != http.StatusOK || !bytes.Contains(raw, []byte(`"size":12582912`)) {
		t.Fatalf("complete: %d %s", code, raw)
	}
	head, err := client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String(g.Key)})
	if err != nil || aws.ToInt64(head.ContentLength) != 12*mib {
		t.Fatalf("object: %v %v, want 12 MiB", head, err)
	}
	s.waitStatus(t, alice.tok, g.URLID, "completed", 10*time.Second)
	// The completer's ObjectCreated:CompleteMultipartUpload marks it: the
	// marker the signer wrote first (pending) becomes done ("1").
	eventually(t, 30*time.Second, "the completer's done marker", func() bool {
		return rdb.Get(ctx, keys.Done("acme", g.URLID)).Val() == "1"
	})

	// A part body longer than signed (a one-part grant, small enough that
	// the gateway's early 403 is read whole).
	small := alice.create(1000)
	if code, _ := putPart(t, alice.sign(small.URLID, 1)[0], 1001); code != http.StatusForbidden {
		t.Fatalf("PUT of 1001 bytes on a part signed for 1000: %d, want 403", code)
	}

	// DELETE: no token back (a create is a create; no tier of bytes here).
	before := tokens()
	for range 2 {
		if code, raw := alice.call(http.MethodDelete, "/uploads/"+small.URLID, nil); code != http.StatusNoContent {
			t.Fatalf("DELETE: %d %s", code, raw)
		}
	}
	if after := tokens(); after != before {
		t.Fatalf("DELETE gave back %v tokens, want none", after-before)
	}

	// Abandoned: a part uploaded, never completed.
	lost := alice.create(1000)
	if code, _ := putPart(t, alice.sign(lost.URLID, 1)[0], 1000); code != http.StatusOK {
		t.Fatalf("PUT part: %d", code)
	}
	before = tokens()
	s.waitStatus(t, alice.tok, lost.URLID, "aborted", 30*time.Second)
	if time.Now().Before(lost.ExpiresAt.Add(2 * time.Second)) {
		t.Fatalf("aborted before its life and the grace ended")
	}
	ups, err := client.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String(s.Bucket), Prefix: aws.String(lost.Key)})
	if err != nil || len(ups.Uploads) != 0 {
		t.Fatalf("the abandoned upload is still open in S3: %v %v", ups, err)
	}
	if after := tokens(); int(after-before+0.5) != 1 {
		t.Fatalf("the sweeper gave back %v tokens, want 1", after-before)
	}
	// Past every grant's due time: the completed one was never refunded,
	// the DELETEd one gave nothing more back, the abandoned one once.
	time.Sleep(time.Until(g.ExpiresAt.Add(4 * time.Second)))
	if n, _ := rdb.Exists(ctx, keys.Refunded("acme", g.URLID)).Result(); n != 0 {
		t.Fatal("the completed grant was refunded")
	}
	if after := tokens(); int(after-before+0.5) != 1 {
		t.Fatalf("after every due time %v tokens came back since the abandon, want 1", after-before)
	}
	if st := s.status(t, alice.tok, g.URLID); st != "completed" {
		t.Fatalf("completed grant reads %q", st)
	}
}
