package checks_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mintgate/mintgate/shared/config"
	"github.com/mintgate/mintgate/shared/dial"
	"github.com/mintgate/mintgate/shared/events"
	"github.com/mintgate/mintgate/shared/ledger"
	"github.com/mintgate/mintgate/shared/testenv"
	"github.com/mintgate/mintgate/shared/webhook"
)

// rewrite replaces each old with its new in text, failing the test when
// an old is missing: a change to the shipped file must show up here.
func rewrite(t *testing.T, name, text string, pairs ...string) string {
	t.Helper()
	for i := 0; i < len(pairs); i += 2 {
		if !strings.Contains(text, pairs[i]) {
			t.Fatalf("%s no longer contains %q: update the test's rewrite", name, pairs[i])
		}
		text = strings.ReplaceAll(text, pairs[i], pairs[i+1])
	}
	return text
}

// shippedNATS is nats-server running deploy/nats/nats.conf as the compose
// stack does: its authorization.conf, TLS and JetStream, with the ports,
// the store and the certificate moved to the test's own.
type shippedNATS struct {
	server  *testenv.NATS
	url     string // tls://127.0.0.1:<port>
	secrets string // devSecrets' folder
}

func startShippedNATS(t *testing.T) shippedNATS {
	t.Helper()
	sec := devSecrets(t, "127.0.0.1")
	dir := t.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	conf := rewrite(t, "deploy/nats/nats.conf", readFile(t, "deploy/nats/nats.conf"),
		"listen: 0.0.0.0:4222", fmt.Sprintf("listen: %q", addr),
		"http: 0.0.0.0:8222", fmt.Sprintf("http: \"127.0.0.1:%d\"", testenv.FreePort(t)),
		"store_dir: /data", fmt.Sprintf("store_dir: %q", filepath.Join(dir, "js")),
		"/etc/nats/tls/", sec+"/",
	)
	for name, text := range map[string]string{"nats.conf": conf, "authorization.conf": readFile(t, "deploy/nats/authorization.conf")} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	n := testenv.StartNATSConfig(t, filepath.Join(dir, "nats.conf"), addr, envFile(t, filepath.Join(sec, "nats-users.env")))
	return shippedNATS{server: n, url: "tls://" + addr, secrets: sec}
}

// options are the connection options a service gets from its environment.
func (s shippedNATS) options(t *testing.T, service string) []nats.Option {
	t.Helper()
	n := config.NATS{URL: s.url, Creds: filepath.Join(s.secrets, "nats-"+service+".nk"), CA: filepath.Join(s.secrets, "ca.crt")}
	opts, err := dial.NATSOptions(n, service)
	if err != nil {
		t.Fatal(err)
	}
	return opts
}

// connect is a plain connection as service; permission errors the server
// reports for it arrive on the returned channel.
func (s shippedNATS) connect(t *testing.T, service string) (*nats.Conn, <-chan error) {
	t.Helper()
	errs := make(chan error, 16)
	opts := append(s.options(t, service), nats.MaxReconnects(0), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case errs <- err:
		default:
		}
	}))
	nc, err := nats.Connect(s.url, opts...)
	if err != nil {
		t.Fatalf("connect as %s: %v", service, err)
	}
	t.Cleanup(nc.Close)
	return nc, errs
}

// violations are the subjects of the server's permission violation log
// lines, as "<user> publish|subscribe <subject>".
func (s shippedNATS) violations(t *testing.T) []string {
	t.Helper()
	users := map[string]string{}
	for _, kv := range envFile(t, filepath.Join(s.secrets, "nats-users.env")) {
		name, key, _ := strings.Cut(kv, "=")
		users[key] = strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(name, "NATS_"), "_NKEY"))
	}
	re := regexp.MustCompile(`"\$G/nkey:([A-Z0-9]+)" - (Publish|Subscription) Violation - Subject "([^"]+)"`)
	var out []string
	for _, m := range re.FindAllStringSubmatch(s.server.Output(), -1) {
		out = append(out, fmt.Sprintf("%s %s %s", users[m[1]], strings.ToLower(m[2]), m[3]))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// operatorStep is what deploy/streams runs, as its own user "streams":
// both streams created or updated by the real code, retried while
// JetStream starts.
func operatorStep(t *testing.T, s shippedNATS) {
	t.Helper()
	nc, _ := s.connect(t, "streams")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := ledger.EnsureStream(ctx, js, ledger.Config{Grace: 30 * time.Second}); err != nil {
		t.Fatalf("the operator step, ledger: %v; the server refused %q", err, s.violations(t))
	}
	if _, err := events.EnsureStream(ctx, js, 15*time.Minute, 0); err != nil {
		t.Fatalf("the operator step, upload events: %v; the server refused %q", err, s.violations(t))
	}
	if _, err := webhook.EnsureStream(ctx, js, 0, webhook.DefaultMaxBytes); err != nil {
		t.Fatalf("the operator step, webhooks: %v; the server refused %q", err, s.violations(t))
	}
}

// dialLedger is ledger.Dial as service, retried while JetStream starts.
func dialLedger(t *testing.T, s shippedNATS, service string) *ledger.Client {
	t.Helper()
	var l *ledger.Client
	var err error
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		l, err = ledger.Dial(ctx, s.url, ledger.Config{Grace: 0, Secret: []byte(testenv.GrantSecret)}, s.options(t, service)...)
		cancel()
		if err == nil {
			t.Cleanup(l.Close)
			return l
		}
	}
	t.Fatalf("ledger.Dial as %s: %v; the server refused %q", service, err, s.violations(t))
	return nil
}

// TestNATSAuthorizationLetsTheLedgerWork runs the ledger's own code, each
// end as its own user, against the shipped authorization: the operator
// step creates and updates both streams, the signer
// records a grant, the sweeper consumes and acks it, trims the stream and
// rescues a schedule the server did not fire, the completer publishes an upload event; the server reports no
// permission violation. A subject the code needs and authorization.conf
// lacks fails here, naming it.
func TestNATSAuthorizationLetsTheLedgerWork(t *testing.T) {
	s := startShippedNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	operatorStep(t, s)
	operatorStep(t, s) // idempotent: a second run (an upgrade) is allowed too

	signerLedger := dialLedger(t, s, signer)
	sweeperLedger := dialLedger(t, s, sweeper)
	g := ledger.Grant{
		URLID: "0b9e6f0e-7f6c-4d3a-9a51-3c1f2a9d8e77", Tenant: "acme", Tier: "user", Subject: "u:alice",
		Key: "incoming/acme/0b9e6f0e-7f6c-4d3a-9a51-3c1f2a9d8e77", IssuedAt: time.Now(), ExpiresAt: time.Now().Add(time.Second),
	}
	if err := signerLedger.Record(ctx, g); err != nil {
		t.Fatalf("signer records a grant: %v; the server refused %q", err, s.violations(t))
	}
	if err := signerLedger.Ping(ctx); err != nil {
		t.Errorf("signer's readiness check: %v", err)
	}

	got := make(chan ledger.Grant, 1)
	trimmed := make(chan ledger.Trim, 16)
	stop, err := sweeperLedger.Consume(ctx, "sweeper", func(_ context.Context, b ledger.Batch) error {
		got <- b.Grants[0]
		return nil
	}, ledger.WithTrimInterval(100*time.Millisecond), ledger.WithTrimObserver(func(tr ledger.Trim) { trimmed <- tr }))
	if err != nil {
		t.Fatalf("sweeper consumes: %v; the server refused %q", err, s.violations(t))
	}
	defer stop()
	select {
	case d := <-got:
		if d.URLID != g.URLID {
			t.Errorf("sweeper got %+v", d)
		}
	case <-ctx.Done():
		t.Fatalf("the sweeper never got the grant; the server refused %q", s.violations(t))
	}
	for done := false; !done; {
		select {
		case tr := <-trimmed:
			if tr.Err != nil {
				t.Fatalf("sweeper's trim: %v; the server refused %q", tr.Err, s.violations(t))
			}
			done = tr.Floor > 0
		case <-ctx.Done():
			t.Fatalf("the sweeper never trimmed; the server refused %q", s.violations(t))
		}
	}
	if err := sweeperLedger.Ping(ctx); err != nil {
		t.Errorf("sweeper's readiness check: %v", err)
	}
	stop()

	// The rescue: a grant due in an hour, which a sweeper whose rescue
	// clock runs two hours ahead finds overdue; it reads the schedule,
	// applies it and deletes it.
	stuck := g
	stuck.URLID, stuck.ExpiresAt = "5d0c1a7e-2b3f-4c8d-9e6a-7f1b2c3d4e5f", time.Now().Add(time.Hour)
	stuck.Key = "incoming/acme/" + stuck.URLID
	if err := signerLedger.Record(ctx, stuck); err != nil {
		t.Fatalf("signer records a grant: %v; the server refused %q", err, s.violations(t))
	}
	rescued := make(chan string, 1)
	stop, err = sweeperLedger.Consume(ctx, "sweeper", func(context.Context, ledger.Batch) error { return nil },
		ledger.WithTrimInterval(100*time.Millisecond),
		ledger.WithRescueClock(func() time.Time { return time.Now().Add(2 * time.Hour) }),
		ledger.WithObserver(func(o ledger.Outcome) {
			if o.Action == ledger.Rescued {
				rescued <- o.Batch.Grants[0].URLID
			}
		}))
	if err != nil {
		t.Fatalf("sweeper consumes: %v; the server refused %q", err, s.violations(t))
	}
	defer stop()
	select {
	case id := <-rescued:
		if id != stuck.URLID {
			t.Errorf("rescued %s, want %s", id, stuck.URLID)
		}
	case <-ctx.Done():
		t.Fatalf("the sweeper never rescued the overdue schedule; the server refused %q", s.violations(t))
	}

	// The signer's status waits hear the completer's events (OnVerdict,
	// core subscriptions), by their own code.
	signerNC, _ := s.connect(t, signer)
	heard := make(chan string, 1)
	if err := events.OnVerdict(signerNC, func(id string) { heard <- id }); err != nil {
		t.Fatal(err)
	}
	if err := signerNC.Flush(); err != nil {
		t.Fatal(err)
	}

	// The completer's upload events (docs/events.md), by its own code.
	nc, _ := s.connect(t, completer)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := events.Open(ctx, js, time.Minute)
	if err != nil {
		t.Fatalf("completer opens its stream: %v; the server refused %q", err, s.violations(t))
	}
	if _, err := pub.Publish(ctx, events.Event{URLID: g.URLID, Tenant: "acme", Key: g.Key, Size: 5, ETag: "x"}); err != nil {
		t.Fatalf("completer publishes an event: %v", err)
	}
	if err := pub.Ping(ctx); err != nil {
		t.Errorf("completer's readiness check: %v", err)
	}
	select {
	case id := <-heard:
		if id != g.URLID {
			t.Errorf("the signer heard %s, want %s", id, g.URLID)
		}
	case <-ctx.Done():
		t.Errorf("the signer never heard the completed event; the server refused %q", s.violations(t))
	}

	if v := s.violations(t); len(v) > 0 {
		t.Errorf("the services' own calls were refused: %q\n(add the subjects to deploy/nats/authorization.conf if the code needs them)", v)
	}
}

// TestNATSAuthorizationRefuses: no one without a key, nothing over an
// unchecked certificate, and each user only its own part: the sweeper and
// the completer cannot publish a grant, the signer cannot pull the
// sweepers' consumer, read their replies or purge the ledger.
func TestNATSAuthorizationRefuses(t *testing.T) {
	s := startShippedNATS(t)
	ca := filepath.Join(s.secrets, "ca.crt")

	if nc, err := nats.Connect(s.url, nats.RootCAs(ca), nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Error("an anonymous client connected")
	} else if !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Errorf("anonymous: %v, want an authorization violation", err)
	}
	creds, err := nats.NkeyOptionFromSeed(filepath.Join(s.secrets, "nats-sweeper.nk"))
	if err != nil {
		t.Fatal(err)
	}
	if nc, err := nats.Connect(s.url, creds, nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Error("connected to a server whose certificate no trusted CA signed")
	}

	// The streams exist, as after the operator step.
	operatorStep(t, s)
	dialLedger(t, s, signer)
	type attempt struct {
		user, op, subject string
	}
	var want []string
	try := func(a attempt) {
		t.Helper()
		nc, errs := s.connect(t, a.user)
		switch a.op {
		case "publish":
			if err := nc.Publish(a.subject, []byte(`{"urlId":"forged"}`)); err != nil {
				t.Fatal(err)
			}
		case "request":
			if _, err := nc.Request(a.subject, []byte(`{"batch":1}`), 500*time.Millisecond); err == nil {
				t.Errorf("%s: request to %s answered", a.user, a.subject)
			}
		case "subscribe":
			if _, err := nc.SubscribeSync(a.subject); err != nil {
				t.Fatal(err)
			}
		}
		_ = nc.Flush()
		select {
		case err := <-errs:
			if !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
				t.Errorf("%s %s %s: %v, want a permissions violation", a.user, a.op, a.subject, err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("%s may %s %s", a.user, a.op, a.subject)
		}
		op := a.op
		if op == "request" {
			op = "publish"
		}
		if op == "subscribe" {
			op = "subscription"
		}
		want = append(want, fmt.Sprintf("%s %s %s", a.user, op, a.subject))
	}
	for _, a := range []attempt{
		{sweeper, "publish", "mintgate.grants.sched.x"},
		{sweeper, "publish", ledger.SubjectDue},
		{completer, "publish", "mintgate.grants.sched.x"},
		{completer, "publish", ledger.SubjectDue},
		{signer, "publish", ledger.SubjectDue},
		{signer, "request", "$JS.API.CONSUMER.MSG.NEXT.MINTGATE_GRANTS.sweeper"},
		{signer, "request", "$JS.API.CONSUMER.CREATE.MINTGATE_GRANTS.thief.mintgate.grants.due"},
		{signer, "request", "$JS.API.STREAM.PURGE.MINTGATE_GRANTS"},
		{signer, "request", "$JS.API.STREAM.DELETE.MINTGATE_GRANTS"},
		{sweeper, "request", "$JS.API.STREAM.DELETE.MINTGATE_GRANTS"},
		{sweeper, "request", "$JS.API.CONSUMER.DELETE.MINTGATE_GRANTS.sweeper"},
		{signer, "subscribe", ledger.SubjectDue},
		{signer, "subscribe", "_INBOX.sweeper.>"},
		{signer, "publish", events.SubjectPrefix + "acme"},
		{signer, "subscribe", "mintgate.webhooks.due.>"},
		{sweeper, "subscribe", "_INBOX.>"},
	} {
		try(a)
	}

	// Nothing reached the stream: it holds no message.
	nc, _ := s.connect(t, sweeper)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(context.Background(), ledger.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	if n := st.CachedInfo().State.Msgs; n != 0 {
		t.Errorf("the ledger holds %d messages after refused publishes", n)
	}
	slices.Sort(want)
	if got := s.violations(t); !slices.Equal(got, want) {
		t.Errorf("server logged violations\n%q\nwant\n%q", got, want)
	}
}

// TestNATSServicesCannotChangeStreams: the services' users cannot create,
// update or delete a stream, nor delete or reconfigure a consumer; only
// the operator step's user changes streams, and it can do nothing else.
// Each refusal is a permissions violation the server logs, and the streams
// keep the operator's configuration after the services' real JetStream
// calls tried to change them.
func TestNATSServicesCannotChangeStreams(t *testing.T) {
	s := startShippedNATS(t)
	operatorStep(t, s)
	ctx := context.Background()

	var want []string
	refused := func(user, subject string, body []byte) {
		t.Helper()
		nc, errs := s.connect(t, user)
		if _, err := nc.Request(subject, body, 500*time.Millisecond); err == nil {
			t.Errorf("%s: request to %s answered", user, subject)
		}
		select {
		case err := <-errs:
			if !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
				t.Errorf("%s %s: %v, want a permissions violation", user, subject, err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("%s may publish %s", user, subject)
		}
		want = append(want, fmt.Sprintf("%s publish %s", user, subject))
	}
	streams := []string{ledger.DefaultStream, events.Stream}
	for _, user := range []string{signer, sweeper, completer} {
		for _, stream := range streams {
			for _, op := range []string{"CREATE", "UPDATE", "DELETE"} {
				refused(user, "$JS.API.STREAM."+op+"."+stream, []byte(`{"name":"`+stream+`"}`))
			}
		}
		refused(user, "$JS.API.CONSUMER.DELETE."+ledger.DefaultStream+".sweeper", nil)
		refused(user, "$JS.API.CONSUMER.DURABLE.CREATE."+ledger.DefaultStream+".sweeper", nil)
	}
	// The operator's user changes streams and nothing else.
	for _, subject := range []string{
		"$JS.API.STREAM.DELETE." + ledger.DefaultStream,
		"$JS.API.STREAM.PURGE." + ledger.DefaultStream,
		"$JS.API.STREAM.CREATE.OTHER",
		"$JS.API.CONSUMER.CREATE." + ledger.DefaultStream + ".x",
		"mintgate.grants.sched.x",
		ledger.SubjectDue,
	} {
		refused("streams", subject, []byte(`{}`))
	}

	// The real calls a service could make to change its stream fail, and
	// the streams keep the operator's settings (here: scheduling and the
	// 7-day age of the ledger, the events' subjects).
	for _, user := range []string{signer, sweeper, completer} {
		nc, _ := s.connect(t, user)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		short, cancel := context.WithTimeout(ctx, time.Second)
		sc := ledger.Config{MaxAge: 2 * time.Hour}.StreamConfig()
		sc.AllowMsgSchedules = false
		if _, err := js.UpdateStream(short, sc); err == nil {
			t.Errorf("%s updated the ledger stream", user)
		}
		if _, err := js.CreateOrUpdateStream(short, events.StreamConfig(time.Second)); err == nil {
			t.Errorf("%s updated the events stream", user)
		}
		cancel()
	}
	nc, _ := s.connect(t, "streams")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, ledger.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	if c := st.CachedInfo().Config; !c.AllowMsgSchedules || c.MaxAge != ledger.DefaultMaxAge {
		t.Errorf("the ledger stream changed: schedules %v, max age %v", c.AllowMsgSchedules, c.MaxAge)
	}
	ev, err := js.Stream(ctx, events.Stream)
	if err != nil {
		t.Fatal(err)
	}
	if d := ev.CachedInfo().Config.Duplicates; d != 15*time.Minute {
		t.Errorf("the events stream's window is %v, want the operator's 15m", d)
	}

	got := s.violations(t)
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("the server logged no violation for %q", w)
		}
	}
}

// TestNATSServiceFacingAMissingStream: a service whose stream the operator
// has not created says so and never creates it, with the shipped rights
// (which would refuse it anyway): the ledger's Open reports
// ErrStreamMissing, then opens once the operator step has run.
func TestNATSServiceFacingAMissingStream(t *testing.T) {
	s := startShippedNATS(t)
	nc, _ := s.connect(t, signer)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := ledger.Open(short, js, ledger.Config{Secret: []byte(testenv.GrantSecret)}); !errors.Is(err, ledger.ErrStreamMissing) {
		t.Fatalf("Open as the signer without the stream: %v; want ErrStreamMissing", err)
	}
	if v := s.violations(t); len(v) > 0 {
		t.Errorf("opening the ledger tried what the signer may not: %q", v)
	}
	operatorStep(t, s)
	dialLedger(t, s, signer)
	dialLedger(t, s, sweeper)
}
