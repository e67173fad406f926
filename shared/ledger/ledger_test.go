package ledger

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mintgate/mintgate/shared/testenv"
)

func TestVersionAndStreamChecks(t *testing.T) {
	on := &jetstream.StreamInfo{Config: jetstream.StreamConfig{Name: "S", AllowMsgSchedules: true}}
	off := &jetstream.StreamInfo{Config: jetstream.StreamConfig{Name: "S"}}
	cases := []struct {
		version string
		info    *jetstream.StreamInfo
		ok      bool
	}{
		{"2.15.2", on, true},
		{"2.12.0", on, true},
		{"2.12.0-RC.1", on, true},
		{"3.0.0", on, true},
		{"2.11.9", on, false},
		{"2.9.10", on, false},
		{"", on, false},
		{"2.15.2", off, false}, // accepted and ignored: never trust the version alone
	}
	for _, c := range cases {
		err := checkVersion(c.version)
		if err == nil {
			err = checkScheduling(c.version, c.info)
		}
		if (err == nil) != c.ok {
			t.Errorf("%s allow=%v: err = %v, want ok=%v", c.version, c.info.Config.AllowMsgSchedules, err, c.ok)
		}
		if err != nil && (!errors.Is(err, ErrNoScheduling) || !strings.Contains(err.Error(), c.version)) {
			t.Errorf("%s: error %q must wrap ErrNoScheduling and name the version", c.version, err)
		}
	}
}

// testSecret keys the MAC in these tests.
var testSecret = []byte(testenv.GrantSecret)

func testGrant(id string, expires time.Time) Grant {
	return Grant{
		URLID: id, Tenant: "acme", Tier: "user", Subject: "u:alice",
		Key: "incoming/acme/" + id, IssuedAt: expires.Add(-time.Second), ExpiresAt: expires,
	}
}

// delivery is one grant seen on the due subject, in the batch batch.
type delivery struct {
	g     Grant
	batch string
	at    time.Time
}

// watchDue collects every message published to the due subject, by a
// plain ordered consumer, so the ledger's own consume loop is not under test.
func watchDue(t *testing.T, js jetstream.JetStream, stream string) (get func() []delivery) {
	t.Helper()
	ctx := context.Background()
	c, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{SubjectDue}})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []delivery
	cc, err := c.Consume(func(m jetstream.Msg) {
		now := time.Now()
		b, err := UnsealAny(m.Data(), testSecret)
		if err != nil {
			t.Errorf("due message body %q: %v", m.Data(), err)
		}
		mu.Lock()
		for _, g := range b.Grants {
			got = append(got, delivery{g, b.ID, now})
		}
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
	return func() []delivery {
		mu.Lock()
		defer mu.Unlock()
		return append([]delivery(nil), got...)
	}
}

func connect(t *testing.T, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	return testenv.JetStream(t, url)
}

// ensure is the operator step on url: the stream of cfg, created or
// updated.
func ensure(t *testing.T, url string, cfg Config) *jetstream.StreamInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, js := connect(t, url)
	info, err := EnsureStream(ctx, js, cfg)
	if err != nil {
		t.Fatalf("EnsureStream: %v", err)
	}
	return info
}

// dial is a service's Dial after the operator step made cfg's stream.
func dial(t *testing.T, url string, cfg Config) *Client {
	t.Helper()
	ensure(t, url, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if cfg.Secret == nil {
		cfg.Secret = testSecret
	}
	l, err := Dial(ctx, url, cfg)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(l.Close)
	return l
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRecordIsDeliveredOnceAtDueNeverBefore(t *testing.T) {
	srv := testenv.StartNATS(t)
	grace := 700 * time.Millisecond
	l := dial(t, srv.URL(), Config{Grace: grace})
	_, js := connect(t, srv.URL())
	got := watchDue(t, js, DefaultStream)

	// Sub-second due times: a server that dropped the fraction would fire
	// these up to a second early.
	base := time.Now().Add(500 * time.Millisecond)
	want := map[string]time.Time{}
	for i := range 20 {
		g := testGrant(fmt.Sprintf("g-%02d", i), base.Add(time.Duration(i)*73*time.Millisecond))
		if err := l.Record(context.Background(), g); err != nil {
			t.Fatalf("Record: %v", err)
		}
		want[g.URLID] = g.ExpiresAt.Add(grace)
	}
	waitFor(t, 15*time.Second, "every grant delivered", func() bool { return len(got()) >= len(want) })
	time.Sleep(1500 * time.Millisecond) // room for a wrong second delivery to show up
	seen := map[string]int{}
	for _, d := range got() {
		seen[d.g.URLID]++
		due, ok := want[d.g.URLID]
		if !ok {
			t.Errorf("unexpected grant %q", d.g.URLID)
			continue
		}
		if d.at.Before(due) {
			t.Errorf("%s delivered %v before it was due", d.g.URLID, due.Sub(d.at))
		}
		if !d.g.ExpiresAt.Equal(due.Add(-grace)) || d.g.Tenant != "acme" || d.g.Tier != "user" {
			t.Errorf("%s body changed: %+v", d.g.URLID, d.g)
		}
	}
	for id := range want {
		if seen[id] != 1 {
			t.Errorf("%s delivered %d times", id, seen[id])
		}
	}
}

func TestRecordSurvivesServerKill(t *testing.T) {
	srv := testenv.StartNATS(t)
	l := dial(t, srv.URL(), Config{Grace: time.Second})
	const n = 300
	expires := time.Now().Add(2 * time.Second)
	for i := range n {
		if err := l.Record(context.Background(), testGrant(fmt.Sprintf("k-%03d", i), expires)); err != nil {
			t.Fatalf("Record %d: %v", i, err)
		}
	}
	srv.Kill() // SIGKILL: only what reached the disk survives
	srv.Start()
	_, js := connect(t, srv.URL())
	got := watchDue(t, js, DefaultStream)
	waitFor(t, 20*time.Second, "every grant after the restart", func() bool { return len(got()) >= n })
	seen := map[string]bool{}
	for _, d := range got() {
		seen[d.g.URLID] = true
	}
	if len(seen) != n {
		t.Errorf("%d distinct grants delivered, want %d", len(seen), n)
	}
	// The ledger's own connection came back too.
	waitFor(t, 10*time.Second, "ledger reconnected", func() bool { return l.Ping(context.Background()) == nil })
	if err := l.Record(context.Background(), testGrant("after", time.Now())); err != nil {
		t.Errorf("Record after restart: %v", err)
	}
}

func TestRecordFailsFastWhileServerIsDown(t *testing.T) {
	srv := testenv.StartNATS(t)
	l := dial(t, srv.URL(), Config{Grace: time.Second})
	srv.Stop()
	for i := range 3 {
		start := time.Now()
		err := l.Record(context.Background(), testGrant(fmt.Sprintf("down-%d", i), time.Now().Add(time.Minute)))
		took := time.Since(start)
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Record with the server down: %v, want ErrUnavailable", err)
		}
		// The signer turns this into a 503; it must not wait for a timeout.
		if took > time.Second {
			t.Errorf("Record took %v to fail", took)
		}
		if err := l.Ping(context.Background()); !errors.Is(err, ErrUnavailable) {
			t.Errorf("Ping with the server down: %v", err)
		}
	}
	srv.Start()
	waitFor(t, 10*time.Second, "ledger reconnected", func() bool { return l.Ping(context.Background()) == nil })
	if err := l.Record(context.Background(), testGrant("up", time.Now())); err != nil {
		t.Errorf("Record after the server came back: %v", err)
	}
}

func TestRecordRejectsBadGrant(t *testing.T) {
	srv := testenv.StartNATS(t)
	l := dial(t, srv.URL(), Config{})
	for _, id := range []string{"", "a.b", "a*", "a>", "a b"} {
		err := l.Record(context.Background(), testGrant(id, time.Now()))
		if !errors.Is(err, ErrInvalidGrant) || !errors.Is(err, ErrUnavailable) {
			t.Errorf("urlId %q: %v", id, err)
		}
	}
}

func TestStreamConfigAsCreated(t *testing.T) {
	srv := testenv.StartNATS(t)
	dial(t, srv.URL(), Config{Stream: "G", MaxAge: time.Hour})
	_, js := connect(t, srv.URL())
	s, err := js.Stream(context.Background(), "G")
	if err != nil {
		t.Fatal(err)
	}
	c := s.CachedInfo().Config
	if c.Retention != jetstream.LimitsPolicy || c.Storage != jetstream.FileStorage || !c.AllowMsgSchedules ||
		c.MaxAge != time.Hour || c.Duplicates != duplicateWindow || c.Replicas != 1 {
		t.Errorf("stream config %+v", c)
	}
}

// TestOperatorUpgradesAStreamWithoutScheduling: a stream made before
// scheduling existed is refused by a service, named as misconfigured and
// left as it is; the operator step upgrades it, and then grants are due
// on it.
func TestOperatorUpgradesAStreamWithoutScheduling(t *testing.T) {
	srv := testenv.StartNATS(t)
	_, js := connect(t, srv.URL())
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: DefaultStream, Subjects: []string{SubjectSchedPrefix + ">", SubjectDue}, Storage: jetstream.FileStorage,
	}); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := Dial(short, srv.URL(), Config{Secret: testSecret})
	if !errors.Is(err, ErrStreamMisconfigured) || !errors.Is(err, ErrNoScheduling) || !strings.Contains(err.Error(), "allow_msg_schedules") {
		t.Fatalf("Dial on a stream without scheduling: %v; want ErrStreamMisconfigured naming allow_msg_schedules", err)
	}
	if s, err := js.Stream(ctx, DefaultStream); err != nil || s.CachedInfo().Config.AllowMsgSchedules {
		t.Fatalf("the service changed the stream: %v", err)
	}
	l := dial(t, srv.URL(), Config{Grace: 100 * time.Millisecond})
	got := watchDue(t, js, DefaultStream)
	if err := l.Record(ctx, testGrant("pre", time.Now())); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "delivery on the upgraded stream", func() bool { return len(got()) == 1 })
}

func TestOldServerIsRefusedNamingItsVersion(t *testing.T) {
	old := testenv.StartNATSWith(t, testenv.NATSOptions{Binary: testenv.OldNATSBinary(t), NoSyncAlways: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := Dial(ctx, old.URL(), Config{Secret: testSecret})
	if !errors.Is(err, ErrNoScheduling) || !strings.Contains(err.Error(), "2.9.10") {
		t.Fatalf("Dial on nats-server 2.9.10: %v; want ErrNoScheduling naming 2.9.10", err)
	}
	t.Log(err)

	// The second guard on real data: the old server takes the setting and
	// drops it, and the stored config says so.
	nc, js := connect(t, old.URL())
	if _, err := EnsureStream(ctx, js, Config{}); !errors.Is(err, ErrNoScheduling) {
		t.Errorf("the operator step on nats-server 2.9.10: %v; want ErrNoScheduling", err)
	}
	info, err := ensureStream(ctx, js, Config{}.withDefaults())
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.AllowMsgSchedules {
		t.Fatal("nats-server 2.9.10 claims to schedule messages")
	}
	if err := checkScheduling(nc.ConnectedServerVersion(), info); !errors.Is(err, ErrNoScheduling) {
		t.Errorf("stream without scheduling accepted: %v", err)
	}
}

// TestOpenNeverCreatesTheStream: on a server without the stream, Open
// says it is missing and creates nothing, for as long as it waits; once
// the operator step has run, the same waiting Open opens it.
func TestOpenNeverCreatesTheStream(t *testing.T) {
	srv := testenv.StartNATS(t)
	_, js := connect(t, srv.URL())
	ctx := context.Background()
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := Open(short, js, Config{Secret: testSecret}); !errors.Is(err, ErrStreamMissing) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Open without a stream: %v; want ErrStreamMissing", err)
	}
	if _, err := js.Stream(ctx, DefaultStream); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("after Open the stream exists (%v): a service created it", err)
	}
	opened := make(chan error, 1)
	go func() {
		wait, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_, err := Open(wait, js, Config{Secret: testSecret})
		opened <- err
	}()
	time.Sleep(500 * time.Millisecond)
	ensure(t, srv.URL(), Config{})
	if err := <-opened; err != nil {
		t.Fatalf("Open after the operator step: %v", err)
	}
}

// TestOpenNamesWhatIsMisconfigured: each setting the ledger relies on,
// changed on a stream the operator made, is named by Open and by Ping.
func TestOpenNamesWhatIsMisconfigured(t *testing.T) {
	srv := testenv.StartNATS(t)
	_, js := connect(t, srv.URL())
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		change func(*jetstream.StreamConfig)
		want   string
	}{
		{"max age", func(c *jetstream.StreamConfig) { c.MaxAge, c.Duplicates = time.Minute, time.Minute }, "max_age"},
		{"subjects", func(c *jetstream.StreamConfig) { c.Subjects = []string{SubjectSchedPrefix + ">"} }, SubjectDue},
		{"deny delete", func(c *jetstream.StreamConfig) { c.DenyDelete = true }, "deny_delete"},
	} {
		t.Run(c.name, func(t *testing.T) {
			sc := Config{}.StreamConfig()
			c.change(&sc)
			_ = js.DeleteStream(ctx, DefaultStream)
			// A stream made again right after its delete can meet the old
			// one's store still being removed (500, 10049): try again.
			for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
				_, err := js.CreateStream(ctx, sc)
				if err == nil {
					break
				}
				if time.Since(start) > 10*time.Second {
					t.Fatal(err)
				}
			}
			short, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			_, err := Open(short, js, Config{Secret: testSecret})
			if !errors.Is(err, ErrStreamMisconfigured) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Open: %v; want ErrStreamMisconfigured naming %s", err, c.want)
			}
		})
	}
	// A ledger opened on a good stream turns unready when it changes.
	_ = js.DeleteStream(ctx, DefaultStream)
	l := dial(t, srv.URL(), Config{})
	sc := Config{}.StreamConfig()
	sc.MaxAge, sc.Duplicates = time.Minute, time.Minute
	if _, err := js.UpdateStream(ctx, sc); err != nil {
		t.Fatal(err)
	}
	if err := l.Ping(ctx); !errors.Is(err, ErrStreamMisconfigured) {
		t.Errorf("Ping on a stream whose max age dropped to 1m: %v", err)
	}
}

// TestEnsureStreamKeepsOperatorSettings: the operator step run with
// defaults must not shrink the retention (or replicas) an operator gave
// the stream, and Open never changes it.
func TestEnsureStreamKeepsOperatorSettings(t *testing.T) {
	srv := testenv.StartNATS(t)
	ctx := context.Background()
	_, js := connect(t, srv.URL())
	ensure(t, srv.URL(), Config{MaxAge: 30 * 24 * time.Hour})
	ensure(t, srv.URL(), Config{}) // idempotent, keeps the 720h
	l, err := Open(ctx, js, Config{Grace: time.Second, Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Config().MaxAge; got != 30*24*time.Hour {
		t.Errorf("the ledger's config says max age %v, want the stream's 720h", got)
	}
	s, err := js.Stream(ctx, DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().Config.MaxAge; got != 30*24*time.Hour {
		t.Fatalf("max age %v after the operator step with defaults, want the operator's 720h", got)
	}
}

// A batch published twice under its id (a retried publish) is stored and
// delivered once.
func TestBatchIsDeduplicatedByItsID(t *testing.T) {
	srv := testenv.StartNATS(t)
	l := dial(t, srv.URL(), Config{Grace: 200 * time.Millisecond})
	_, js := connect(t, srv.URL())
	got := watchDue(t, js, DefaultStream)
	b := Batch{ID: "batch-1", Grants: []Grant{testGrant("x-1", time.Now()), testGrant("x-2", time.Now())}}
	for range 3 {
		if err := l.publish(b); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, "the batch", func() bool { return len(got()) >= 2 })
	time.Sleep(time.Second)
	if n := len(got()); n != 2 {
		t.Errorf("%d grants delivered, want the batch's 2 once", n)
	}
}

// Concurrent Records share ledger messages, each grant is delivered once,
// never before it is due, and a batch never carries more than MaxBatch.
func TestConcurrentRecordsAreGroupCommitted(t *testing.T) {
	srv := testenv.StartNATS(t)
	const grace = 300 * time.Millisecond
	l := dial(t, srv.URL(), Config{Grace: grace, MaxBatch: 64})
	_, js := connect(t, srv.URL())
	got := watchDue(t, js, DefaultStream)
	const n = 2000
	base := time.Now().Add(time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			// Expiries spread over 900ms: batches mix them.
			g := testGrant(fmt.Sprintf("c-%04d", i), base.Add(time.Duration(i%10)*90*time.Millisecond))
			errs <- l.Record(context.Background(), g)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("Record: %v", err)
		}
	}
	msgs := streamMsgs(t, js)
	waitFor(t, 20*time.Second, "every grant delivered", func() bool { return len(got()) >= n })
	time.Sleep(500 * time.Millisecond)
	seen, batches := map[string]int{}, map[string]int{}
	for _, d := range got() {
		seen[d.g.URLID]++
		batches[d.batch]++
		if due := d.g.ExpiresAt.Add(grace); d.at.Before(due) {
			t.Errorf("%s delivered %v before it was due", d.g.URLID, due.Sub(d.at))
		}
	}
	for id, c := range seen {
		if c != 1 {
			t.Errorf("%s delivered %d times", id, c)
		}
	}
	if len(seen) != n {
		t.Errorf("%d distinct grants delivered, want %d", len(seen), n)
	}
	for id, c := range batches {
		if c > 64 {
			t.Errorf("batch %s carried %d grants, more than MaxBatch 64", id, c)
		}
	}
	if msgs >= n/4 {
		t.Errorf("%d concurrent grants took %d ledger messages: not group-committed", n, msgs)
	}
	t.Logf("%d grants in %d batches (%d messages stored before delivery)", n, len(batches), msgs)
}

// TestDialOpeningServesUntilTheOperatorStep: without the stream,
// DialOpening returns at once with a ledger that is not open: Ping says
// the stream is missing, Record refuses with ErrUnavailable; once the
// operator step has run it opens by itself and records.
func TestDialOpeningServesUntilTheOperatorStep(t *testing.T) {
	srv := testenv.StartNATS(t)
	ctx := context.Background()
	p, err := DialOpening(ctx, srv.URL(), Config{Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Ping(ctx); !errors.Is(err, ErrStreamMissing) || !errors.Is(err, ErrUnavailable) {
		t.Errorf("Ping without the stream: %v; want ErrStreamMissing", err)
	}
	if err := p.Record(ctx, testGrant("early", time.Now())); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Record before the ledger is open: %v; want ErrUnavailable", err)
	}
	ensure(t, srv.URL(), Config{})
	wait, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if _, err := p.Wait(wait); err != nil {
		t.Fatalf("Wait after the operator step: %v", err)
	}
	if err := p.Ping(ctx); err != nil {
		t.Errorf("Ping once open: %v", err)
	}
	if err := p.Record(ctx, testGrant("late", time.Now().Add(time.Hour))); err != nil {
		t.Errorf("Record once open: %v", err)
	}
}
