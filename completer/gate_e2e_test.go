package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/events"
	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/quota"
	"github.com/mintgate/mintgate/shared/testenv"
)

// gateStack is a completer with the verification gate on, over real
// servers: Redis, NATS with the events stream, fauxqs, versitygw notifying
// through the bridge, and clamd with the repository's signatures.
type gateStack struct {
	rdb   *redis.Client
	es    *eventStream
	gw    *testenv.VersityGW
	clamd *testenv.Clamd
	fq    *testenv.Fauxqs
	q     testenv.Queue
	addr  string
	log   *testenv.Buffer
}

func startGateStack(t *testing.T, env map[string]string) *gateStack {
	t.Helper()
	rs := testenv.StartRedis(t)
	s := &gateStack{es: startEventStream(t), fq: testenv.StartFauxqs(t), log: &testenv.Buffer{},
		clamd: testenv.StartClamd(t, 16<<20)}
	s.q = s.fq.CreateQueue(t, "uploads", testenv.QueueOptions{VisibilityTimeout: 2 * time.Second, MaxReceiveCount: 5})
	bridge := testenv.StartBridge(t, s.q.URL, s.fq.Endpoint)
	s.gw = testenv.StartVersityGW(t, bridge.URL)
	var vars map[string]string
	s.addr, vars = completerEnv(t, rs, s.fq, s.q, s.gw.Bucket)
	for k, v := range testenv.S3Env(s.gw.Endpoint, s.gw.Bucket) {
		vars[k] = v
	}
	vars["MINTGATE_VERIFY"] = "on"
	vars["MINTGATE_NATS_URL"] = s.es.nats.URL()
	vars["MINTGATE_CLAMD_ADDR"] = s.clamd.Addr
	vars["MINTGATE_SCAN_MAX_BYTES"] = strconv.Itoa(16 << 20)
	for k, v := range env {
		vars[k] = v
	}
	s.rdb = redis.NewClient(&redis.Options{Addr: rs.Addr})
	t.Cleanup(func() { s.rdb.Close() })
	startCompleter(t, s.addr, vars, s.log)
	return s
}

// upload writes a grant record for contentType and contentLength, as the
// signer's sign does, then PUTs body under the grant's key (as its URL
// would, Content-Type signed). It returns the urlId.
func (s *gateStack) upload(t *testing.T, contentType string, contentLength int, body []byte) string {
	t.Helper()
	ctx := context.Background()
	id := uuid.NewString()
	grant := keys.Grant("acme", id)
	if err := s.rdb.HSet(ctx, grant, "expiresAt", time.Now().Add(time.Minute).UnixMilli(), "subject", "u:alice",
		"contentType", contentType, "contentLength", contentLength).Err(); err != nil {
		t.Fatal(err)
	}
	s.rdb.Expire(ctx, grant, time.Hour)
	s.put(t, keys.Object("acme", id), contentType, body)
	return id
}

func (s *gateStack) put(t *testing.T, key, contentType string, body []byte) {
	t.Helper()
	if _, err := s.gw.Client().PutObject(context.Background(), &s3.PutObjectInput{
		Bucket: aws.String(s.gw.Bucket), Key: aws.String(key), Body: bytes.NewReader(body),
		ContentType: aws.String(contentType), IfNoneMatch: aws.String("*"),
	}); err != nil {
		t.Fatal(err)
	}
}

// marker is the done marker's value, "" when absent.
func (s *gateStack) marker(id string) string {
	return s.rdb.Get(context.Background(), keys.Done("acme", id)).Val()
}

// waitMarker waits until acme's urlId's done marker reads want.
func (s *gateStack) waitMarker(t *testing.T, id, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for s.marker(id) != want {
		if time.Now().After(deadline) {
			t.Fatalf("done marker of %s = %q, want %q\n%s", id, s.marker(id), want, s.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// exists reports whether the bucket holds key.
func (s *gateStack) exists(t *testing.T, key string) bool {
	t.Helper()
	_, err := s.gw.Client().HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: aws.String(s.gw.Bucket), Key: aws.String(key)})
	if err != nil && !isCode(err, "NotFound", "NoSuchKey") {
		t.Fatal(err)
	}
	return err == nil
}

// stored is every message of the events stream about urlId: its subject
// and body.
func (s *gateStack) stored(t *testing.T, id string) map[string][]byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := s.es.js.Stream(ctx, events.Stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		if m.Header.Get(jetstream.MsgIDHeader) == id {
			if _, twice := out[m.Subject]; twice {
				t.Errorf("two events of %s on %s", id, m.Subject)
			}
			out[m.Subject] = m.Data
		}
	}
	return out
}

// rejectedEvent is the one rejected event of id, failing the test unless
// there is exactly one and no completed event.
func (s *gateStack) rejectedEvent(t *testing.T, id string) events.Rejected {
	t.Helper()
	evs := s.stored(t, id)
	body, ok := evs[events.RejectedSubject("acme")]
	if !ok || len(evs) != 1 {
		t.Fatalf("events of %s: %q, want one rejected", id, evs)
	}
	var ev events.Rejected
	if err := json.Unmarshal(body, &ev); err != nil {
		t.Fatal(err)
	}
	return ev
}

// assertRejected: the upload ended rejected for reason: the marker, the
// object only in quarantine/, one rejected event, no completed one.
func (s *gateStack) assertRejected(t *testing.T, id, reason string, size int) {
	t.Helper()
	s.waitMarker(t, id, quota.Rejected(reason))
	if s.exists(t, keys.Object("acme", id)) || !s.exists(t, events.QuarantineKey("acme", id)) {
		t.Errorf("%s: in incoming/ %v, in quarantine/ %v; want only in quarantine", id,
			s.exists(t, keys.Object("acme", id)), s.exists(t, events.QuarantineKey("acme", id)))
	}
	ev := s.rejectedEvent(t, id)
	if ev.URLID != id || ev.Tenant != "acme" || ev.Key != keys.Object("acme", id) || ev.Reason != reason ||
		ev.Size != int64(size) || time.Since(ev.RejectedAt).Abs() > time.Minute {
		t.Errorf("rejected event %+v", ev)
	}
}

// assertCompleted: the upload ended completed with its one event.
func (s *gateStack) assertCompleted(t *testing.T, id string) {
	t.Helper()
	s.waitMarker(t, id, markerDone)
	evs := s.stored(t, id)
	if _, ok := evs[events.Subject("acme")]; !ok || len(evs) != 1 {
		t.Errorf("events of %s: %q, want one completed", id, evs)
	}
	if !s.exists(t, keys.Object("acme", id)) {
		t.Errorf("%s: the completed object left incoming/", id)
	}
}

// refundOutcome is what the sweeper's refund does with grant id once its
// URL expired and the grace passed: done (its upload landed) or refunded.
func (s *gateStack) refundOutcome(t *testing.T, id string) quota.RefundOutcome {
	t.Helper()
	b := bucket.Bucket{Key: keys.Bucket("acme", "u:alice"), Limit: bucket.Limit{Capacity: 10, Rate: 1, TTL: time.Hour}}
	out, err := quota.New(s.rdb).Refund(context.Background(), time.Now().Add(2*time.Hour),
		[]quota.Due{{Tenant: "acme", URLID: id, Buckets: []bucket.Bucket{b}}})
	if err != nil {
		t.Fatal(err)
	}
	return out[0]
}

func rejectedSeries(reason string) string {
	return `mintgate_completer_rejected_total{reason="` + reason + `",tenant="acme"}`
}

// TestGateVerdicts: issue 30. An image/png grant holding HTML ends
// rejected (type_mismatch): moved to quarantine/, one rejected event, and
// never refunded; a real PNG ends completed with its event; a PNG header
// claiming 20000×20000 is image_too_large; the EICAR string inside a PDF is
// malware (real clamd); a size other than the grant's is size_mismatch.
func TestGateVerdicts(t *testing.T) {
	s := startGateStack(t, map[string]string{"MINTGATE_MAX_IMAGE_PIXELS": "1000000"})
	html := []byte("<!DOCTYPE html><html><body><script>document.cookie</script></body></html>")
	good := realPNG(t, 64, 48)
	huge := pngHeader(20000, 20000)
	malware := pdfWith(eicar)
	cleanPDF := pdfWith("hello")

	htmlID := s.upload(t, "image/png", len(html), html)
	goodID := s.upload(t, "image/png", len(good), good)
	hugeID := s.upload(t, "image/png", len(huge), huge)
	malwareID := s.upload(t, "application/pdf", len(malware), malware)
	cleanID := s.upload(t, "application/pdf", len(cleanPDF), cleanPDF)
	sizeID := s.upload(t, "image/png", len(good)+1, good)

	s.assertRejected(t, htmlID, reasonType, len(html))
	s.assertCompleted(t, goodID)
	s.assertRejected(t, hugeID, reasonPixels, len(huge))
	s.assertRejected(t, malwareID, reasonMalware, len(malware))
	s.assertCompleted(t, cleanID)
	s.assertRejected(t, sizeID, reasonSize, len(good))

	// Tokens and bytes stay spent: after expiry and grace the sweeper's
	// refund finds the done marker, for the rejected as for the completed.
	for _, id := range []string{htmlID, goodID, sizeID} {
		if got := s.refundOutcome(t, id); got != quota.Done {
			t.Errorf("refund of %s: %s, want done", id, got)
		}
	}
	for reason, n := range map[string]float64{reasonType: 1, reasonPixels: 1, reasonMalware: 1, reasonSize: 1} {
		if got := scrape(t, s.addr, rejectedSeries(reason)); got != n {
			t.Errorf("rejected_total %s = %v, want %v", reason, got, n)
		}
	}
}

// TestGateHeldWhileClamdDown: with clamd stopped an upload stays
// verifying (neither completed nor rejected, never refunded) and /readyz
// names clamd; once clamd is back it completes.
func TestGateHeldWhileClamdDown(t *testing.T) {
	s := startGateStack(t, nil)
	s.clamd.Stop()
	body := realPNG(t, 8, 8)
	id := s.upload(t, "image/png", len(body), body)
	eventually(t, "/readyz names clamd", func() bool {
		resp, err := http.Get("http://" + s.addr + "/readyz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		return resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(b.String(), "clamd")
	})
	eventually(t, "a failed verification", func() bool { return scrape(t, s.addr, `mintgate_completer_errors_total{op="verify"}`) >= 1 })
	time.Sleep(2 * time.Second) // several visibility timeouts
	if v := s.marker(id); v != markerVerifying {
		t.Fatalf("marker %q while clamd is down, want verifying", v)
	}
	if evs := s.stored(t, id); len(evs) != 0 {
		t.Fatalf("events %q while clamd is down", evs)
	}
	if got := s.refundOutcome(t, id); got != quota.Done {
		t.Errorf("refund while verifying: %s, want done", got)
	}
	s.clamd.Start()
	s.assertCompleted(t, id)
	if n := scrape(t, s.addr, deleted); n != 2 { // the start's test event and the upload
		t.Errorf("deleted %v", n)
	}
}

// TestRejectionResumesFromItsIntent: a completer killed after writing the
// intent (rejecting:<reason>) and moving the object, before its event:
// the redelivered record finishes the rejection once — the object stays
// in quarantine, one rejected event — and a later delivery changes nothing.
func TestRejectionResumesFromItsIntent(t *testing.T) {
	s := startGateStack(t, nil)
	ctx := context.Background()
	id := uuid.NewString()
	key, q := keys.Object("acme", id), events.QuarantineKey("acme", id)
	// The killed completer's writes: the intent, the object copied to
	// quarantine/ and deleted from incoming/ (outside incoming/, so no
	// notification fires).
	s.rdb.Set(ctx, keys.Done("acme", id), quota.Rejecting(reasonType), quota.MarkerTTL)
	s.put(t, q, "image/png", []byte("<html></html>"))

	record := strings.ReplaceAll(fixture(t, "direct-put.json", id), fixtureBucket, s.gw.Bucket)
	for range 2 {
		if _, err := s.fq.Client().SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(s.q.URL), MessageBody: aws.String(record)}); err != nil {
			t.Fatal(err)
		}
	}
	s.waitMarker(t, id, quota.Rejected(reasonType))
	eventually(t, "both deliveries handled", func() bool { return scrape(t, s.addr, recordsDone) == 2 })
	if s.exists(t, key) || !s.exists(t, q) {
		t.Errorf("in incoming/ %v, in quarantine/ %v", s.exists(t, key), s.exists(t, q))
	}
	if ev := s.rejectedEvent(t, id); ev.Reason != reasonType || ev.Size != 1024 {
		t.Errorf("rejected event %+v", ev)
	}
	if got := scrape(t, s.addr, rejectedSeries(reasonType)); got != 1 {
		t.Errorf("rejected_total %v, want 1", got)
	}
}
