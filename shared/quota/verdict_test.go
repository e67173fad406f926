package quota_test

import (
	"testing"
	"time"

	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/quota"
)

// TestGrantShape: a grant record keeps what the grant was signed for,
// whether Finish or FinishOwn wrote it, so that the completer can check
// the object against it; a record without them (written before they were
// kept) reads as unknown, not as a grant of 0 bytes.
func TestGrantShape(t *testing.T) {
	rdb := startRedis(t)
	s := quota.New(rdb)
	e := &env{t: t, b: redisBackend("redis", rdb), now: time.Now(), tenant: "shape"}

	a := e.ask("alice", "k1")
	f := e.finished("u1", "{}")
	f.ContentType, f.ContentLength = "image/png", 1234
	if err := s.Finish(ctx, a, f); err != nil {
		t.Fatal(err)
	}
	mp := e.ask("alice", "k2")
	if d := e.spend(mp); d.Outcome != quota.Allowed {
		t.Fatalf("spend: %+v", d)
	}
	g := e.finished("u2", "{}")
	g.ContentType, g.ContentLength, g.Multipart = "application/pdf", 99<<20, `{"uploadId":"x"}`
	if _, err := s.FinishOwn(ctx, mp, g); err != nil {
		t.Fatal(err)
	}
	rdb.HSet(ctx, keys.Grant("shape", "old"), "expiresAt", e.now.UnixMilli(), "subject", "u:alice")

	for id, want := range map[string]quota.GrantShape{
		"u1":   {ContentType: "image/png", ContentLength: 1234, Known: true},
		"u2":   {ContentType: "application/pdf", ContentLength: 99 << 20, Known: true},
		"old":  {},
		"none": {},
	} {
		got, err := s.Shape(ctx, "shape", id)
		if err != nil || got != want {
			t.Errorf("%s: %+v %v, want %+v", id, got, err, want)
		}
	}
	// The old fields are as they were: GET /uploads/{urlId} reads them.
	if st, err := s.Status(ctx, "shape", "u2"); err != nil || !st.Found || st.Subject != "u:alice" || st.Multipart == "" {
		t.Errorf("status %+v %v", st, err)
	}
}

// TestSettle: the done marker moves only from the value the caller read,
// keeping its TTL; Status reports the value.
func TestSettle(t *testing.T) {
	rdb := startRedis(t)
	s := quota.New(rdb)
	done := keys.Done("acme", "u1")
	if _, moved, err := s.Settle(ctx, "acme", "u1", quota.DoneVerifying, quota.DoneVerified); err != nil || moved {
		t.Fatalf("settle of an absent marker: moved %v, %v", moved, err)
	}
	if rdb.Exists(ctx, done).Val() != 0 {
		t.Fatal("settle created the marker")
	}
	rdb.Set(ctx, done, quota.DoneVerifying, time.Hour)
	if held, moved, err := s.Settle(ctx, "acme", "u1", quota.DoneVerifying, quota.Rejecting("malware")); err != nil || !moved || held != quota.DoneVerifying {
		t.Fatalf("first verdict: %q %v %v", held, moved, err)
	}
	// A second delivery that reached the other verdict loses, and learns
	// the winner's.
	if held, moved, err := s.Settle(ctx, "acme", "u1", quota.DoneVerifying, quota.DoneVerified); err != nil || moved || held != quota.Rejecting("malware") {
		t.Fatalf("second verdict: %q %v %v", held, moved, err)
	}
	if ttl := rdb.TTL(ctx, done).Val(); ttl < 59*time.Minute {
		t.Errorf("TTL %s after settling", ttl)
	}
	st, err := s.Status(ctx, "acme", "u1")
	if err != nil || !st.Done || st.DoneValue != quota.Rejecting("malware") {
		t.Errorf("status %+v %v", st, err)
	}
	if v, reason := quota.ReadDone(st.DoneValue); v != quota.Refusing || reason != "malware" {
		t.Errorf("ReadDone %v %q", v, reason)
	}
	if st, err := s.Status(ctx, "acme", "absent"); err != nil || st.Done || st.DoneValue != "" {
		t.Errorf("status of an absent marker %+v %v", st, err)
	}
}
