package ledger

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mintgate/mintgate/shared/testenv"
)

// TestOverdueScheduleIsRescued: a batch whose schedule the server has not
// fired 30 s after its due time is applied by the sweeper, once, and its
// schedule deleted; a schedule not yet overdue is left to the server.
func TestOverdueScheduleIsRescued(t *testing.T) {
	srv := testenv.StartNATS(t)
	l := dial(t, srv.URL(), Config{Grace: time.Second})
	_, js := connect(t, srv.URL())
	ctx := context.Background()

	inAnHour := time.Now().Add(time.Hour)
	stuck, later := testGrant("stuck", inAnHour), testGrant("later", inAnHour.Add(10*time.Minute))
	for _, g := range []Grant{stuck, later} {
		if err := l.Record(ctx, g); err != nil {
			t.Fatalf("Record: %v", err)
		}
	}
	// The rescue's clock reads 31 s after stuck's due time (expiry + grace).
	var skew atomic.Int64
	skew.Store(int64(time.Hour + time.Second + 31*time.Second))
	rec := newRecorder()
	consume(t, l, rec.handle, WithObserver(rec.observe), WithTrimInterval(100*time.Millisecond),
		WithRescueClock(func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }))

	waitFor(t, 10*time.Second, "the overdue batch rescued", func() bool { return rec.count(Rescued) == 1 })
	time.Sleep(time.Second) // more rescue passes: none may apply it again, or apply the other
	if n := rec.calls("stuck"); n != 1 {
		t.Errorf("overdue grant handled %d times, want 1", n)
	}
	if n := rec.calls("later"); n != 0 {
		t.Errorf("a grant due 10 min after the cutoff was handled %d times", n)
	}
	s, err := js.Stream(ctx, DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(SubjectSchedPrefix+">"))
	if err != nil {
		t.Fatal(err)
	}
	if len(info.State.Subjects) != 1 {
		t.Errorf("schedules left %v, want only the later grant's", info.State.Subjects)
	}
}
