package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/ledger"
	"github.com/mintgate/mintgate/shared/quota"
	"github.com/mintgate/mintgate/shared/testenv"
	"github.com/mintgate/mintgate/shared/tiers"
)

func TestUnusedGrantIsRefundedOnceWhenDueNotBefore(t *testing.T) {
	s := newStack(t, false)
	sw := s.start()
	user, ten := keys.Bucket(tenant, "u:alice"), keys.TenantBucket(tenant)
	s.setTokens(user, 0)
	s.setTokens(ten, 0)

	g := newGrant("not-uploaded", tiers.User, "u:alice", time.Now().Add(time.Second))
	due := g.ExpiresAt.Add(s.grace)
	s.record(g)

	// Up to just before it is due: nothing.
	for time.Until(due) > 150*time.Millisecond {
		if s.rdb.Exists(context.Background(), keys.Refunded(tenant, g.URLID)).Val() != 0 || floor(s.tokens(user)) != 0 {
			t.Fatalf("refunded %v before it was due", time.Until(due))
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitFor(t, 10*time.Second, "the refund", func() bool {
		return s.rdb.Exists(context.Background(), keys.Refunded(tenant, g.URLID)).Val() == 1
	})
	v, _ := s.rdb.Get(context.Background(), keys.Refunded(tenant, g.URLID)).Result()
	refundedAt, _ := quota.RefundedAt(v)
	at := refundedAt.UnixMilli()
	if at < due.UnixMilli() {
		t.Errorf("refunded %dms before due", due.UnixMilli()-at)
	}
	t.Logf("refunded %dms after due", at-due.UnixMilli())
	waitFor(t, 5*time.Second, "the ack", s.idle)
	time.Sleep(500 * time.Millisecond) // room for a wrong second refund
	if floor(s.tokens(user)) != 1 || floor(s.tokens(ten)) != 1 {
		t.Errorf("tokens user %v tenant %v, want exactly one refund each", s.tokens(user), s.tokens(ten))
	}
	for name, want := range map[string]float64{
		"mintgate_sweeper_refunds_total":          1,
		"mintgate_sweeper_grants_swept_total":     1,
		"mintgate_sweeper_already_done_total":     0,
		"mintgate_sweeper_lateness_seconds_count": 1,
	} {
		if got := sw.metric(t, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if code := sw.status("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz = %d", code)
	}
}

func TestUploadedGrantIsNotRefunded(t *testing.T) {
	s := newStack(t, false)
	sw := s.start()
	user := keys.Bucket(tenant, "u:alice")
	s.setTokens(user, 0)
	g := newGrant("uploaded", tiers.User, "u:alice", time.Now())
	s.rdb.Set(context.Background(), keys.Done(tenant, g.URLID), "1", time.Minute) // what the completer does
	s.record(g)
	waitFor(t, 10*time.Second, "the grant swept", func() bool { return sw.metric(t, "mintgate_sweeper_grants_swept_total") == 1 })
	if floor(s.tokens(user)) != 0 || s.refunded() != 0 || sw.metric(t, "mintgate_sweeper_already_done_total") != 1 {
		t.Errorf("uploaded grant refunded: tokens %v, markers %d", s.tokens(user), s.refunded())
	}
}

func TestDuplicatesRefundOnce(t *testing.T) {
	s := newStack(t, false)
	sw := s.start()
	user := keys.Bucket(tenant, "u:carol")
	s.setTokens(user, 0)
	g := newGrant("dup", tiers.User, "u:carol", time.Now().Add(200*time.Millisecond))
	s.record(g)
	s.record(g) // recorded twice: two batches carry it

	// And delivered twice more, as after a lost ack or a replayed batch.
	nc, err := nats.Connect(s.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	body, err := ledger.Seal([]byte(testenv.GrantSecret), ledger.Batch{ID: "replayed", Grants: []ledger.Grant{g}})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := js.Publish(context.Background(), ledger.SubjectDue, body); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, "four deliveries swept", func() bool { return sw.metric(t, "mintgate_sweeper_grants_swept_total") == 4 })
	waitFor(t, 5*time.Second, "the consumer idle", s.idle)
	if got := sw.metric(t, "mintgate_sweeper_refunds_total"); got != 1 {
		t.Errorf("refunds %v, want 1", got)
	}
	if got := sw.metric(t, "mintgate_sweeper_already_refunded_total"); got != 3 {
		t.Errorf("already refunded %v, want 3", got)
	}
	if floor(s.tokens(user)) != 1 {
		t.Errorf("tokens %v, want 1", s.tokens(user))
	}
}

func TestTwoSweepersManyGrantsEachRefundedOnce(t *testing.T) {
	s := newStack(t, false)
	a, b := s.start(), s.start()
	subjects := []string{"u:a", "u:b", "u:c"}
	for _, sub := range subjects {
		s.setTokens(keys.Bucket(tenant, sub), 0)
	}
	s.setTokens(keys.TenantBucket(tenant), 0)
	const per = 100
	expires := time.Now().Add(500 * time.Millisecond)
	for i := range per {
		for _, sub := range subjects {
			s.record(newGrant(fmt.Sprintf("m-%s-%03d", sub[2:], i), tiers.User, sub, expires.Add(time.Duration(i)*5*time.Millisecond)))
		}
	}
	n := per * len(subjects)
	waitFor(t, 20*time.Second, "every grant refunded", func() bool { return s.refunded() == n })
	waitFor(t, 5*time.Second, "the consumer idle", s.idle)
	for _, sub := range subjects {
		if got := floor(s.tokens(keys.Bucket(tenant, sub))); got != per {
			t.Errorf("%s: %d tokens, want %d", sub, got, per)
		}
	}
	if got := floor(s.tokens(keys.TenantBucket(tenant))); got != n {
		t.Errorf("tenant: %d tokens, want %d", got, n)
	}
	ra, rb := a.metric(t, "mintgate_sweeper_refunds_total"), b.metric(t, "mintgate_sweeper_refunds_total")
	if ra+rb != float64(n) {
		t.Errorf("refunds %v + %v, want %d", ra, rb, n)
	}
	t.Logf("split: %v / %v", ra, rb)
}

func TestAnonymousRefundsStopAtTheAnonymousCapacity(t *testing.T) {
	s := newStack(t, false)
	s.start()
	anon := keys.Bucket(tenant, "a:9f86d0")
	s.setTokens(anon, 3)
	for i := range 20 {
		s.record(newGrant(fmt.Sprintf("anon-%02d", i), tiers.Anonymous, "a:9f86d0", time.Now()))
	}
	waitFor(t, 10*time.Second, "every anonymous grant refunded", func() bool { return s.refunded() == 20 })
	if got := s.tokens(anon); got != 5 {
		t.Errorf("anonymous bucket %v after 20 refunds, want its capacity 5", got)
	}
}

func TestRedisOutageNothingAckedThenRefundedOnce(t *testing.T) {
	s := newStack(t, true)
	sw := s.start()
	user := keys.Bucket(tenant, "u:dave")
	s.setTokens(user, 0)
	const n = 50
	expires := time.Now().Add(300 * time.Millisecond)
	for i := range n {
		s.record(newGrant(fmt.Sprintf("out-%02d", i), tiers.User, "u:dave", expires))
	}
	s.redis.Stop()
	waitFor(t, 15*time.Second, "failed attempts", func() bool {
		return sw.metric(t, `mintgate_sweeper_errors_total{kind="redis"}`) >= n
	})
	if got := sw.metric(t, "mintgate_sweeper_grants_swept_total"); got != 0 {
		t.Fatalf("%v grants acked while Redis was down", got)
	}
	if info := s.consumerInfo(); info == nil || info.AckFloor.Stream != 0 {
		t.Fatalf("consumer acked something while Redis was down: %+v", info)
	}
	if code := sw.status("/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz with Redis down = %d", code)
	}
	s.redis.Start()
	waitFor(t, 40*time.Second, "every grant refunded", func() bool { return s.refunded() == n })
	waitFor(t, 10*time.Second, "the consumer idle", s.idle)
	if got := floor(s.tokens(user)); got != n {
		t.Errorf("tokens %d, want %d", got, n)
	}
	if got := sw.metric(t, "mintgate_sweeper_refunds_total"); got != n {
		t.Errorf("refunds %v, want %d", got, n)
	}
}

func TestSweeperStoppedMidBatchAndRestarted(t *testing.T) {
	s := newStack(t, true)
	first := s.start()
	user := keys.Bucket(tenant, "u:erin")
	s.setTokens(user, 0)
	const n = 200
	// Due one after another over two seconds, so the stop lands mid-stream.
	start := time.Now().Add(200 * time.Millisecond)
	for i := range n {
		s.record(newGrant(fmt.Sprintf("mid-%03d", i), tiers.User, "u:erin", start.Add(time.Duration(i)*10*time.Millisecond)))
	}
	waitFor(t, 10*time.Second, "some refunds", func() bool { return s.refunded() >= 30 })
	s.redis.Stop() // the grants in flight now fail
	waitFor(t, 10*time.Second, "failed attempts", func() bool {
		return first.metric(t, `mintgate_sweeper_errors_total{kind="redis"}`) > 0
	})
	if err := first.stop(); err != nil {
		t.Fatalf("first sweeper: %v", err)
	}
	done := s.refunded // only callable with Redis up
	s.redis.Start()
	// The test's own client may hold a connection from before the restart:
	// its first command fails (-1), the next ones reach the new server.
	before := -1
	waitFor(t, 10*time.Second, "Redis answering the test", func() bool { before = done(); return before >= 0 })
	t.Logf("first sweeper refunded %d of %d before it stopped", before, n)
	if before >= n {
		t.Fatal("the stop did not land mid-stream")
	}
	second := s.start()
	waitFor(t, 40*time.Second, "every grant refunded", func() bool { return done() == n })
	waitFor(t, 10*time.Second, "the consumer idle", s.idle)
	if got := floor(s.tokens(user)); got != n {
		t.Errorf("tokens %d, want %d: a grant was refunded twice or never", got, n)
	}
	if got := second.metric(t, "mintgate_sweeper_refunds_total"); int(got)+before != n {
		t.Errorf("second sweeper refunded %v, first %d; want %d in all", got, before, n)
	}
}

func TestNATSKilledWithGrantsPendingLosesNone(t *testing.T) {
	s := newStack(t, false)
	sw := s.start()
	user := keys.Bucket(tenant, "u:frank")
	s.setTokens(user, 0)
	const n = 300
	expires := time.Now().Add(1500 * time.Millisecond)
	for i := range n {
		s.record(newGrant(fmt.Sprintf("kill-%03d", i), tiers.User, "u:frank", expires))
	}
	s.nats.Kill() // SIGKILL with every grant pending
	s.nats.Start()
	waitFor(t, 30*time.Second, "every grant refunded", func() bool { return s.refunded() == n })
	waitFor(t, 10*time.Second, "the consumer idle", s.idle)
	if got := floor(s.tokens(user)); got != n {
		t.Errorf("tokens %d, want %d", got, n)
	}
	if code := sw.status("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz after the restart = %d", code)
	}
	// The ledger logs through the sweeper's logger, to run's stdout.
	if logs := sw.logs.String(); !strings.Contains(logs, `"msg":"nats disconnected","service":"sweeper","component":"grant-ledger"`) {
		t.Errorf("no ledger line about the disconnect in the sweeper's log:\n%s", logs)
	}
}

func TestStartRefusedWithoutScheduling(t *testing.T) {
	old := testenv.StartNATSWith(t, testenv.NATSOptions{Binary: testenv.OldNATSBinary(t), NoSyncAlways: true})
	rds := testenv.StartRedis(t)
	vars := map[string]string{
		"MINTGATE_NATS_URL":     old.URL(),
		"MINTGATE_REDIS_URL":    rds.URL(),
		"MINTGATE_HTTP_ADDR":    fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)),
		"MINTGATE_GRANT_SECRET": testenv.GrantSecret,
	}
	maps.Copy(vars, testenv.UnusedS3Env())
	var out testenv.Buffer
	err := run(context.Background(), []string{"sweeper"}, func(k string) string { return vars[k] }, &out)
	if err == nil || !strings.Contains(err.Error(), "2.9.10") || !strings.Contains(err.Error(), "scheduling") {
		t.Fatalf("run on nats-server 2.9.10: %v; want a refusal naming the version", err)
	}
	t.Log(err)
}

func TestBadConfigNamesTheVariable(t *testing.T) {
	for name, val := range map[string]string{
		"MINTGATE_NATS_URL":      "http://127.0.0.1:4222",
		"MINTGATE_HTTP_ADDR":     "8082",
		"MINTGATE_SWEEP_GRACE":   "soon",
		"MINTGATE_TIERS":         "user=30:0.5",
		"MINTGATE_TENANT_TIERS":  "acme:gold=60:1",
		"MINTGATE_REDIS_URL":     "http://x",
		"MINTGATE_REDIS_TIMEOUT": "-1s",
		"MINTGATE_GRANT_SECRET":  "31-bytes-is-one-byte-too-short!",
		// Checked with a valid current secret below.
		"MINTGATE_GRANT_SECRET_PREVIOUS": "31-bytes-is-one-byte-too-short!",
	} {
		err := run(context.Background(), []string{"sweeper"}, func(k string) string {
			switch k {
			case name:
				return val
			case "MINTGATE_GRANT_SECRET":
				return testenv.GrantSecret
			}
			return ""
		}, &testenv.Buffer{})
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%q: %v; want an error naming it", name, val, err)
		}
	}
	// The previous secret may not be the current one.
	err := run(context.Background(), []string{"sweeper"}, func(k string) string {
		if k == "MINTGATE_GRANT_SECRET" || k == "MINTGATE_GRANT_SECRET_PREVIOUS" {
			return testenv.GrantSecret
		}
		return ""
	}, &testenv.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "MINTGATE_GRANT_SECRET_PREVIOUS") {
		t.Errorf("the previous secret equal to the current: %v; want an error naming it", err)
	}
}

// The attack of the security review: anyone who reaches NATS publishes
// grants on the due subject to refill drained buckets. Nothing the secret
// does not verify is ever applied; each is counted.
func TestForgedGrantsOnAnOpenBusAreNeverApplied(t *testing.T) {
	s := newStack(t, false)
	sw := s.start()
	user, ten := keys.Bucket(tenant, "u:victim"), keys.TenantBucket(tenant)
	s.setTokens(user, 0)
	s.setTokens(ten, 0)

	nc, err := nats.Connect(s.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	publish := func(body []byte) {
		t.Helper()
		if _, err := js.Publish(context.Background(), ledger.SubjectDue, body); err != nil {
			t.Fatal(err)
		}
	}
	var forged int
	for i := range 20 { // the proof's 20 grants, in today's and the old format
		g := newGrant(fmt.Sprintf("forged-%02d", i), tiers.User, "u:victim", time.Now())
		switch i % 3 {
		case 0: // a plain grant, as before batches
			body, _ := json.Marshal(g)
			publish(body)
		case 1: // sealed with a guessed secret
			body, err := ledger.Seal([]byte("guessed-secret-guessed-secret-guessed"), ledger.Batch{ID: g.URLID, Grants: []ledger.Grant{g}})
			if err != nil {
				t.Fatal(err)
			}
			publish(body)
		case 2: // a genuine batch of someone else's, redirected to the victim
			body, err := ledger.Seal([]byte(testenv.GrantSecret), ledger.Batch{ID: g.URLID, Grants: []ledger.Grant{newGrant(g.URLID, tiers.User, "u:other", time.Now())}})
			if err != nil {
				t.Fatal(err)
			}
			publish(bytes.Replace(body, []byte("u:other"), []byte("u:victim"), 1))
		}
		forged++
	}
	genuine := newGrant("genuine", tiers.User, "u:victim", time.Now())
	s.record(genuine)

	waitFor(t, 15*time.Second, "the genuine grant swept", func() bool { return sw.metric(t, "mintgate_sweeper_grants_swept_total") == 1 })
	waitFor(t, 5*time.Second, "every forgery counted", func() bool { return sw.metric(t, "mintgate_sweeper_forged_total") == float64(forged) })
	waitFor(t, 5*time.Second, "the consumer idle", s.idle)
	if got := floor(s.tokens(user)); got != 1 {
		t.Errorf("victim's bucket holds %v tokens, want the genuine refund's 1", got)
	}
	if got := floor(s.tokens(ten)); got != 1 {
		t.Errorf("tenant bucket holds %v tokens, want 1", got)
	}
	if n := s.refunded(); n != 1 {
		t.Errorf("%d refunded markers, want 1", n)
	}
}

// A grant issued in degraded mode charged no Redis bucket, nor did one
// issued in shadow mode past a short bucket, so their expiry must not
// credit one.
func TestUnchargedGrantsAreNeverRefundedIntoRedis(t *testing.T) {
	s := newStack(t, false)
	sw := s.start()
	user := keys.Bucket(tenant, "u:dora")
	s.setTokens(user, 0)
	d := newGrant("degraded", tiers.User, "u:dora", time.Now())
	d.Degraded = true
	s.record(d)
	sh := newGrant("shadow", tiers.User, "u:dora", time.Now())
	sh.Shadow = true
	s.record(sh)
	s.record(newGrant("normal", tiers.User, "u:dora", time.Now()))
	waitFor(t, 15*time.Second, "all three swept", func() bool { return sw.metric(t, "mintgate_sweeper_grants_swept_total") == 3 })
	if got := floor(s.tokens(user)); got != 1 {
		t.Errorf("bucket holds %v tokens, want 1 (the normal grant's refund only)", got)
	}
	for _, reason := range []string{"degraded", "shadow"} {
		if got := sw.metric(t, `mintgate_sweeper_skipped_total{reason="`+reason+`"}`); got != 1 {
			t.Errorf("skipped %s %v, want 1", reason, got)
		}
		if s.rdb.Exists(context.Background(), keys.Refunded(tenant, reason)).Val() != 0 {
			t.Errorf("a %s grant got a refunded marker", reason)
		}
	}
}

// An anonymous sign spent from the tenant's anonymous_all bucket too, so
// its refund gives that token back as well, capped by anonymous_all's own
// capacity.
func TestAnonymousGrantIsRefundedIntoAnonymousAll(t *testing.T) {
	s := newStack(t, false)
	sw := s.start()
	anonAll := keys.AnonBucket(tenant)
	s.setTokens(anonAll, 0)
	s.setTokens(keys.Bucket(tenant, "a:hash"), 0)
	s.record(newGrant("anon-1", tiers.Anonymous, "a:hash", time.Now()))
	waitFor(t, 15*time.Second, "the anonymous grant swept", func() bool { return sw.metric(t, "mintgate_sweeper_refunds_total") == 1 })
	if got := floor(s.tokens(anonAll)); got != 1 {
		t.Errorf("anonymous_all bucket holds %v tokens after the refund, want 1", got)
	}
	if got := floor(s.tokens(keys.Bucket(tenant, "a:hash"))); got != 1 {
		t.Errorf("caller's anonymous bucket holds %v, want 1", got)
	}
}

// A rotation of MINTGATE_GRANT_SECRET: sweepers on the new key with the old
// one as MINTGATE_GRANT_SECRET_PREVIOUS apply the batches the signers
// sealed with the old key before they rolled; without it they would
// terminate them as forged and those refunds would be lost.
func TestGrantSecretRotation(t *testing.T) {
	const next = "the-next-grant-secret-of-at-least-32-bytes"
	for _, c := range []struct {
		name     string
		previous string
		refunds  float64
		forged   float64
	}{
		{"with the previous key", testenv.GrantSecret, 1, 0},
		{"without it", "", 0, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newStack(t, false)
			sw := s.startWith(map[string]string{"MINTGATE_GRANT_SECRET": next, "MINTGATE_GRANT_SECRET_PREVIOUS": c.previous})
			user := keys.Bucket(tenant, "u:rota")
			s.setTokens(user, 0)
			s.record(newGrant("sealed-old", tiers.User, "u:rota", time.Now())) // s.ledger seals with the old key
			waitFor(t, 15*time.Second, "the old batch handled", func() bool {
				return sw.metric(t, "mintgate_sweeper_refunds_total")+sw.metric(t, "mintgate_sweeper_forged_total") == 1
			})
			if got := sw.metric(t, "mintgate_sweeper_refunds_total"); got != c.refunds {
				t.Errorf("refunds %v, want %v", got, c.refunds)
			}
			if got := sw.metric(t, "mintgate_sweeper_forged_total"); got != c.forged {
				t.Errorf("forged %v, want %v", got, c.forged)
			}
		})
	}
}

// TestMissingStreamKeepsTheSweeperUnready: a sweeper started before the
// operator step serves an unready /readyz, says why in its log, and never
// creates the stream (its NATS user may not); once the operator has made
// the stream it opens it, becomes ready and refunds.
func TestMissingStreamKeepsTheSweeperUnready(t *testing.T) {
	srv := testenv.StartNATS(t)
	s := &stack{t: t, redis: testenv.StartRedis(t), nats: srv, natsURL: srv.URL(), grace: time.Second}
	sw := s.start()
	time.Sleep(2 * time.Second) // several tries of the opening
	if code := sw.status("/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz %d without the stream, want 503", code)
	}
	if logs := sw.logs.String(); !strings.Contains(logs, "does not exist") || !strings.Contains(logs, "operator step") {
		t.Errorf("the sweeper's log does not say the stream is missing:\n%s", logs)
	}
	_, js := testenv.JetStream(t, srv.URL())
	if _, err := js.Stream(context.Background(), ledger.DefaultStream); err == nil {
		t.Fatal("the sweeper created the stream")
	}
	select {
	case err := <-sw.done:
		t.Fatalf("the sweeper exited without the stream: %v", err)
	default:
	}

	s.dial(0) // the operator step, then the signer's ledger
	waitFor(t, 20*time.Second, "the sweeper ready once the stream exists", func() bool { return sw.status("/readyz") == http.StatusOK })
	g := newGrant("after-operator", tiers.User, "u:alice", time.Now().Add(time.Second))
	s.record(g)
	waitFor(t, 20*time.Second, "the refund", func() bool {
		return s.rdb.Exists(context.Background(), keys.Refunded(tenant, g.URLID)).Val() == 1
	})
}
