package grant

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mintgate/mintgate/shared/backoff"
)

// Subjects of the ledger stream. Each batch of grants is a schedule message
// on its own subject (a second schedule on a subject replaces the first);
// when it is due, JetStream publishes its body to SubjectDue, which the
// sweepers consume, and purges the schedule message in the same write. The
// consume loop purges due messages once the sweepers have finished with them.
const (
	SubjectSchedPrefix = "mintgate.grants.sched."
	SubjectDue         = "mintgate.grants.due"
)

// Defaults of LedgerConfig.
const (
	DefaultStream   = "MINTGATE_GRANTS"
	DefaultReplicas = 1
	DefaultMaxAge   = 7 * 24 * time.Hour
)

const (
	// duplicateWindow is how long a batch id is remembered for
	// de-duplication. A repeat past it would still land on the batch's own
	// subject and replace its schedule.
	duplicateWindow = 5 * time.Minute
	// DefaultPublishTimeout bounds one batch's publish and ack.
	DefaultPublishTimeout = 2 * time.Second
	// The first nats-server with message scheduling is 2.12.
	minMajor, minMinor = 2, 12
)

var (
	// ErrUnavailable wraps every error of Record and Ping: the ledger could
	// not take the grant, so the caller must not hand out its URL.
	ErrUnavailable = errors.New("grant: ledger unavailable")
	// ErrNoScheduling is returned by Dial, Open and EnsureStream when the
	// server or the stream cannot delay messages (a stream without
	// scheduling is also ErrStreamMisconfigured): such a server would accept the grants and
	// deliver them at once, refunding every URL while it is still valid.
	ErrNoScheduling = errors.New("grant: JetStream message scheduling unavailable (needs nats-server 2.12 or later)")
	// ErrStreamMissing is wrapped (with ErrUnavailable) when the ledger's
	// stream does not exist: the operator step (EnsureStream, run by
	// deploy/streams) creates it; a service never does.
	ErrStreamMissing = errors.New("grant: the ledger stream does not exist (the operator step creates it)")
	// ErrStreamMisconfigured is wrapped (with ErrUnavailable) when the
	// stream exists but lacks what the ledger relies on; the error names
	// each setting. The operator step updates it.
	ErrStreamMisconfigured = errors.New("grant: the ledger stream is misconfigured (the operator step updates it)")
	// ErrInvalidGrant is wrapped (with ErrUnavailable) when a grant cannot
	// be recorded as it is, such as a urlId that is not a subject token.
	ErrInvalidGrant = errors.New("grant: invalid grant")
)

// LedgerConfig shapes the stream and the group commit. Zero values take
// the defaults; Secret is required.
type LedgerConfig struct {
	Stream   string        // default "MINTGATE_GRANTS"
	Grace    time.Duration // a grant is due at ExpiresAt + Grace
	Replicas int           // default: the existing stream's, else 1 (production: 3, set by the operator on the stream)
	MaxAge   time.Duration // default: the existing stream's, else 7 days: far above URL TTL + grace + the worst outage, so limits never drop pending schedules

	// Secret keys the MAC every batch carries (MINTGATE_GRANT_SECRET, at
	// least MinSecretLen bytes): sweepers apply only batches it verifies.
	Secret []byte
	// PreviousSecret, when set, is also accepted when a batch is verified,
	// never used to seal: the window of a rotation of Secret
	// (MINTGATE_GRANT_SECRET_PREVIOUS), while batches sealed with the old
	// key are still pending.
	PreviousSecret []byte
	// Window is the longest a grant waits for company while an earlier
	// batch is in flight (default 1ms); MaxBatch caps the grants of one
	// message (default 256); MaxInFlight caps the publishes awaiting their
	// ack (default 1); PublishTimeout bounds one publish (default 2s).
	Window time.Duration
	// MinGap spaces the starts of two publishes by at least this much (a
	// full batch excepted): fewer, bigger messages, each one fsynced write
	// when published and two when its schedule fires (default 2ms; below
	// zero: none).
	MinGap         time.Duration
	MaxBatch       int
	MaxInFlight    int
	PublishTimeout time.Duration

	// Log is where the ledger logs (NATS disconnects and reconnects, …):
	// the service's logger. Nil: slog.Default().
	Log *slog.Logger
}

// logger is c.Log, or slog.Default(), for the ledger's own lines.
func (c LedgerConfig) logger() *slog.Logger {
	if c.Log == nil {
		return slog.Default().With("component", "grant-ledger")
	}
	return c.Log.With("component", "grant-ledger")
}

func (c LedgerConfig) withDefaults() LedgerConfig {
	if c.Stream == "" {
		c.Stream = DefaultStream
	}
	if c.Window <= 0 {
		c.Window = DefaultWindow
	}
	if c.MaxBatch <= 0 {
		c.MaxBatch = DefaultMaxBatch
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.MinGap == 0 {
		c.MinGap = DefaultMinGap
	}
	if c.PublishTimeout <= 0 {
		c.PublishTimeout = DefaultPublishTimeout
	}
	if c.Replicas <= 0 {
		c.Replicas = DefaultReplicas
	}
	if c.MaxAge <= 0 {
		c.MaxAge = DefaultMaxAge
	}
	return c
}

// StreamConfig is the stream the ledger creates or updates: file storage,
// limits retention (on a work-queue stream, acking a delivery would delete
// the schedule) and scheduling on.
//
// What the stream holds: one schedule message per pending grant, and one
// due message per grant fired and not yet finished with. The server
// removes a fired one-shot schedule itself; Consume purges, every trim
// interval, the due messages below its durable's ack floor (applied or
// terminated). Retention removes nothing before MaxAge, which only guards
// pending grants through outages: a due message no sweeper finished with
// stays until MaxAge after it fired, and so do the ones after it while it
// holds the floor. No per-message TTL (allow_msg_ttl stays off): see
// consumeLoop.trimLoop.
func (c LedgerConfig) StreamConfig() jetstream.StreamConfig {
	c = c.withDefaults()
	return jetstream.StreamConfig{
		Name:              c.Stream,
		Description:       "mintgate grant ledger: one schedule per batch of issued URLs, due at the latest expiry + grace",
		Subjects:          []string{SubjectSchedPrefix + ">", SubjectDue},
		Retention:         jetstream.LimitsPolicy,
		Discard:           jetstream.DiscardOld,
		Storage:           jetstream.FileStorage,
		Replicas:          c.Replicas,
		MaxAge:            c.MaxAge,
		Duplicates:        min(duplicateWindow, c.MaxAge),
		AllowMsgSchedules: true,
		AllowRollup:       true, // schedules need it; the server would set it anyway
	}
}

// Ledger records grants in a JetStream stream that delivers each batch to
// SubjectDue when it is due.
type Ledger struct {
	cfg    LedgerConfig
	nc     *nats.Conn
	js     jetstream.JetStream
	ownsNC bool
	log    *slog.Logger

	commitOnce sync.Once
	commit     *committer
}

// Dial connects to natsURL (a comma-separated list is fine) and opens the
// ledger on the stream the operator created (Open). The connection
// reconnects forever; while it is down, Record fails at once rather than
// buffering. opts come after the ledger's own connection options, so a
// caller adds credentials (nats.UserCredentials) or TLS.
func Dial(ctx context.Context, natsURL string, cfg LedgerConfig, opts ...nats.Option) (*Ledger, error) {
	nc, js, err := dialConn(ctx, natsURL, cfg, opts...)
	if err != nil {
		return nil, err
	}
	l, err := Open(ctx, js, cfg)
	if err != nil {
		nc.Close()
		return nil, err
	}
	l.ownsNC = true
	return l, nil
}

// dialConn is Dial's connection, with the ledger's reconnect policy.
func dialConn(ctx context.Context, natsURL string, cfg LedgerConfig, opts ...nats.Option) (*nats.Conn, jetstream.JetStream, error) {
	log := cfg.logger()
	timeout := 2 * time.Second
	if d, ok := ctx.Deadline(); ok && time.Until(d) < timeout {
		timeout = max(time.Until(d), 10*time.Millisecond)
	}
	nc, err := nats.Connect(natsURL, append([]nats.Option{
		nats.Name("mintgate-grant-ledger"),
		nats.Timeout(timeout),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectJitter(100*time.Millisecond, time.Second),
		// No reconnect buffer: a publish while disconnected fails now and
		// the signer answers 503, instead of a grant waiting in memory.
		nats.ReconnectBufSize(-1),
		nats.PingInterval(5 * time.Second),
		nats.MaxPingsOutstanding(2),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil { // nil: our own Close
				log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			log.Info("nats reconnected", "url", c.ConnectedUrlRedacted())
		}),
	}, opts...)...)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: connect %s: %w", ErrUnavailable, redactURL(natsURL), err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return nc, js, nil
}

// Open is Dial on a JetStream context the caller owns: Close leaves its
// connection open. It only reads the stream (JetStream's STREAM.INFO):
// creating and updating it is the operator's (EnsureStream), so a
// service's NATS user needs no right to change stream configuration.
//
// Open waits, retrying with backoff until ctx ends, while the stream is
// missing or misconfigured (ErrStreamMissing, ErrStreamMisconfigured: the
// operator step has not run yet) and while a clustered stream has no
// leader (timeouts, "temporarily unavailable": an election passing),
// rather than ending a service that would only be restarted into the same
// state. On ctx's end it returns the last try's error.
func Open(ctx context.Context, js jetstream.JetStream, cfg LedgerConfig) (*Ledger, error) {
	if err := preflight(js, cfg); err != nil {
		return nil, err
	}
	return openLoop(ctx, js, cfg, waitable, nil)
}

// preflight refuses what no retry can fix: a configuration the ledger
// cannot run with, or a server too old to schedule messages.
func preflight(js jetstream.JetStream, cfg LedgerConfig) error {
	if cfg.Grace < 0 {
		return fmt.Errorf("grant: negative grace %v would make grants due before they expire", cfg.Grace)
	}
	if len(cfg.Secret) < MinSecretLen {
		return fmt.Errorf("grant: the MAC secret has %d bytes, want at least %d", len(cfg.Secret), MinSecretLen)
	}
	return checkVersion(js.Conn().ConnectedServerVersion())
}

// openLoop tries open until it succeeds, ctx ends or an error retry does
// not accept; tried, when set, sees each failed try's error.
func openLoop(ctx context.Context, js jetstream.JetStream, cfg LedgerConfig, retry func(error) bool, tried func(error)) (*Ledger, error) {
	for n := 1; ; n++ {
		// Each try has its own bound: a request that reached a cluster
		// without a meta leader may get no answer at all, and would
		// otherwise wait out the whole of ctx.
		try, cancel := context.WithTimeout(ctx, openTry)
		l, err := open(try, js, cfg)
		cancel()
		if err == nil || !retry(err) {
			return l, err
		}
		if tried != nil {
			tried(err)
		}
		wait := electionBackoff.Delay(n)
		if errors.Is(err, ErrStreamMissing) || errors.Is(err, ErrStreamMisconfigured) {
			cfg.logger().Error("grant ledger: the stream is not as the ledger needs it; waiting for the operator step (deploy/streams) to create or update it, never doing so itself",
				"retryIn", wait, "err", err)
		} else {
			cfg.logger().Warn("grant ledger: the stream does not answer yet; retrying", "retryIn", wait, "err", err)
		}
		if backoff.Sleep(ctx, wait) != nil {
			return nil, err
		}
	}
}

// waitable is what Open waits out: an election, or a stream the operator
// has not created or updated yet.
func waitable(err error) bool {
	return passing(err) || errors.Is(err, ErrStreamMissing) || errors.Is(err, ErrStreamMisconfigured)
}

// openTry bounds one try of Open, the requests to the JetStream API it
// makes included (the library's own default for a request is 5 s).
const openTry = 5 * time.Second

// electionBackoff spaces the tries while a clustered stream or consumer
// has no leader: an election takes seconds.
var electionBackoff = backoff.Policy{Min: 250 * time.Millisecond, Max: 5 * time.Second}

// jsNotAvailable is JetStream's API error "JetStream system temporarily
// unavailable" (503), which a cluster answers while it has no meta leader:
// a node was killed, or too few are up for a quorum.
const jsNotAvailable jetstream.ErrorCode = 10008

// passing reports whether err is what a JetStream cluster answers while it
// elects a leader: a request that timed out or found no responder, the
// API's "temporarily unavailable", or a stream's info naming no leader.
func passing(err error) bool {
	var api *jetstream.APIError
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, errNoLeader) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoHeartbeat) ||
		(errors.As(err, &api) && api.ErrorCode == jsNotAvailable)
}

func open(ctx context.Context, js jetstream.JetStream, cfg LedgerConfig) (*Ledger, error) {
	cfg = cfg.withDefaults()
	info, err := streamInfo(ctx, js, cfg.Stream)
	if err != nil {
		return nil, err
	}
	if err := checkStream(js.Conn().ConnectedServerVersion(), info, cfg.Grace); err != nil {
		return nil, err
	}
	// What the stream has, so Config tells the truth.
	cfg.Replicas, cfg.MaxAge = info.Config.Replicas, info.Config.MaxAge
	return &Ledger{cfg: cfg, nc: js.Conn(), js: js, log: cfg.logger()}, nil
}

// streamInfo is the stream's info as the server stores it; a stream that
// does not exist is ErrStreamMissing.
func streamInfo(ctx context.Context, js jetstream.JetStream, name string) (*jetstream.StreamInfo, error) {
	s, err := js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("%w: %w: %s", ErrUnavailable, ErrStreamMissing, name)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: stream %s: %w", ErrUnavailable, name, err)
	}
	info := s.CachedInfo()
	if info.Cluster != nil && info.Cluster.Leader == "" {
		// A node that lost its peers still answers from what it stored,
		// but no grant can be written until a leader is elected.
		return nil, fmt.Errorf("%w: stream %s: %w", ErrUnavailable, name, errNoLeader)
	}
	return info, nil
}

// errNoLeader is a clustered stream's info without a leader: an election
// passing, waited out like a timeout.
var errNoLeader = errors.New("no leader")

// minMaxAgeOverGrace is the least a limited MaxAge may exceed the grace
// by: the stream drops a pending schedule older than MaxAge without a
// word, so MaxAge must cover a URL's life, the grace and an outage.
const minMaxAgeOverGrace = time.Hour

// checkStream reports what makes the stored stream unfit for the ledger
// (ErrStreamMisconfigured naming each), or nil. Each rule is one the
// ledger relies on: scheduling on (else grants are delivered, and
// refunded, at once); both subjects; limits retention (on a work queue an
// ack deletes the schedule); file storage (memory loses every pending
// grant with the server); purge and delete allowed and not sealed (the
// sweeper's trim and rescue); and a MaxAge that keeps pending schedules.
func checkStream(version string, info *jetstream.StreamInfo, grace time.Duration) error {
	if err := checkScheduling(version, info); err != nil {
		return fmt.Errorf("%w: %w: %w", ErrUnavailable, ErrStreamMisconfigured, err)
	}
	c := info.Config
	var wrong []string
	for _, sub := range []string{SubjectSchedPrefix + ">", SubjectDue} {
		if !slices.Contains(c.Subjects, sub) {
			wrong = append(wrong, "subjects "+strings.Join(c.Subjects, ",")+" lack "+sub)
		}
	}
	if c.Retention != jetstream.LimitsPolicy {
		wrong = append(wrong, "retention "+c.Retention.String()+", want limits")
	}
	if c.Storage != jetstream.FileStorage {
		wrong = append(wrong, "storage "+c.Storage.String()+", want file")
	}
	if c.Sealed || c.DenyPurge || c.DenyDelete {
		wrong = append(wrong, "sealed, deny_purge or deny_delete set: the sweeper purges and deletes")
	}
	if c.MaxAge != 0 && c.MaxAge < grace+minMaxAgeOverGrace {
		wrong = append(wrong, fmt.Sprintf("max_age %v, want 0 or at least the grace %v + %v", c.MaxAge, grace, minMaxAgeOverGrace))
	}
	if len(wrong) > 0 {
		return fmt.Errorf("%w: %w: stream %s: %s", ErrUnavailable, ErrStreamMisconfigured, c.Name, strings.Join(wrong, "; "))
	}
	return nil
}

// EnsureStream is the operator's step, never a service's: it creates the
// ledger's stream, or updates it to cfg.StreamConfig(), and returns it as
// the server stored it, checked as Open checks it. Replicas and MaxAge
// left unset keep the existing stream's (keepOperatorSettings). It is
// idempotent, and waits out an election as Open does.
func EnsureStream(ctx context.Context, js jetstream.JetStream, cfg LedgerConfig) (*jetstream.StreamInfo, error) {
	version := js.Conn().ConnectedServerVersion()
	if err := checkVersion(version); err != nil {
		return nil, err
	}
	for n := 1; ; n++ {
		try, cancel := context.WithTimeout(ctx, openTry)
		info, err := ensureStream(try, js, cfg)
		cancel()
		if err == nil {
			err = checkStream(version, info, cfg.Grace)
		}
		if err == nil || !passing(err) {
			return info, err
		}
		wait := electionBackoff.Delay(n)
		cfg.logger().Warn("grant ledger: the stream does not answer yet; retrying", "retryIn", wait, "err", err)
		if backoff.Sleep(ctx, wait) != nil {
			return nil, err
		}
	}
}

func ensureStream(ctx context.Context, js jetstream.JetStream, cfg LedgerConfig) (*jetstream.StreamInfo, error) {
	cfg, err := keepOperatorSettings(ctx, js, cfg)
	if err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s, err := js.CreateOrUpdateStream(ctx, cfg.StreamConfig())
	if err != nil {
		return nil, fmt.Errorf("%w: create or update stream %s: %w", ErrUnavailable, cfg.Stream, err)
	}
	// Ask again rather than trust the reply to the create: the answer must
	// come from what the server stored.
	info, err := s.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: stream %s info: %w", ErrUnavailable, cfg.Stream, err)
	}
	return info, nil
}

// keepOperatorSettings fills the replicas and max age the caller left
// unset from the stream as it exists, so a run of the operator step with
// defaults never shrinks a stream an operator gave three replicas or a
// longer retention.
func keepOperatorSettings(ctx context.Context, js jetstream.JetStream, cfg LedgerConfig) (LedgerConfig, error) {
	name := cfg.Stream
	if name == "" {
		name = DefaultStream
	}
	s, err := js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return cfg, nil // created with the defaults
	}
	if err != nil {
		// Not knowing the stream is not its absence: updating it with the
		// defaults could shrink an operator's three replicas to one.
		return cfg, fmt.Errorf("%w: stream %s: %w", ErrUnavailable, name, err)
	}
	existing := s.CachedInfo().Config
	if cfg.Replicas <= 0 {
		cfg.Replicas = existing.Replicas
	}
	if cfg.MaxAge <= 0 {
		cfg.MaxAge = existing.MaxAge
	}
	return cfg, nil
}

// checkVersion refuses servers older than 2.12, which accept the scheduling
// setting and ignore it.
func checkVersion(version string) error {
	major, minor, ok := parseVersion(version)
	if !ok {
		return fmt.Errorf("%w: cannot read nats-server version %q", ErrNoScheduling, version)
	}
	if major < minMajor || (major == minMajor && minor < minMinor) {
		return fmt.Errorf("%w: connected to nats-server %s", ErrNoScheduling, version)
	}
	return nil
}

// checkScheduling refuses a stream whose stored config does not allow
// schedules, whatever the server's version claims.
func checkScheduling(version string, info *jetstream.StreamInfo) error {
	if info == nil || !info.Config.AllowMsgSchedules {
		name := ""
		if info != nil {
			name = info.Config.Name
		}
		return fmt.Errorf("%w: stream %s on nats-server %s does not report allow_msg_schedules", ErrNoScheduling, name, version)
	}
	return nil
}

func parseVersion(v string) (major, minor int, ok bool) {
	v = strings.TrimPrefix(strings.TrimSpace(v), "v")
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(strings.TrimRightFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	return major, minor, err1 == nil && err2 == nil
}

// Record stores g in the ledger and returns once the batch that carries it
// is acknowledged: the grants of concurrent calls share one message (see
// committer), due at the latest expiry among them plus Grace. Every error
// wraps ErrUnavailable; after one, the grant may still have been stored
// (an ack lost in a stall), so the caller's undo must leave a mark the
// sweeper honours.
func (l *Ledger) Record(ctx context.Context, g Grant) error {
	if !validToken(g.URLID) {
		return fmt.Errorf("%w: %w: urlId %q is not a subject token", ErrUnavailable, ErrInvalidGrant, g.URLID)
	}
	if g.ExpiresAt.IsZero() {
		return fmt.Errorf("%w: %w: grant %s has no expiresAt", ErrUnavailable, ErrInvalidGrant, g.URLID)
	}
	if g.DueAt.IsZero() {
		g.DueAt = g.ExpiresAt.Add(l.cfg.Grace)
	}
	// Fail now, not at the timeout, while the connection is down.
	if st := l.nc.Status(); st != nats.CONNECTED {
		return fmt.Errorf("%w: nats connection %s", ErrUnavailable, strings.ToLower(st.String()))
	}
	l.commitOnce.Do(func() {
		cfg := commitConfig(l.cfg.Window, l.cfg.MaxBatch, l.cfg.MaxInFlight, l.cfg.MinGap)
		l.commit = newCommitter(cfg, uuid.NewString, l.publish)
	})
	if err := l.commit.record(ctx, g); err != nil {
		return fmt.Errorf("%w: record grant %s: %w", ErrUnavailable, g.URLID, err)
	}
	return nil
}

// publish sends one sealed batch, scheduled at its due time on its own
// subject, and waits for the stream's ack.
func (l *Ledger) publish(b Batch) error {
	if st := l.nc.Status(); st != nats.CONNECTED {
		return fmt.Errorf("nats connection %s", strings.ToLower(st.String()))
	}
	body, err := Seal(l.cfg.Secret, b)
	if err != nil {
		return err
	}
	msg := &nats.Msg{
		Subject: SubjectSchedPrefix + b.ID,
		Header:  nats.Header{},
		Data:    body,
	}
	msg.Header.Set(jetstream.MsgIDHeader, b.ID)
	msg.Header.Set(jetstream.ScheduleHeader, ScheduleAt(b.DueAt(l.cfg.Grace)))
	msg.Header.Set(jetstream.ScheduleTargetHeader, SubjectDue)
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.PublishTimeout)
	defer cancel()
	// No retries on "no responders": a missing stream is an outage to report now.
	if _, err := l.js.PublishMsg(ctx, msg, jetstream.WithExpectStream(l.cfg.Stream), jetstream.WithRetryAttempts(0)); err != nil {
		return fmt.Errorf("publish batch %s of %d grants: %w", b.ID, len(b.Grants), err)
	}
	return nil
}

// ScheduleAt is the Nats-Schedule header value for a delivery at t: "@at"
// and t in UTC as RFC 3339 with every fractional digit. nats-server 2.12+
// parses it with time.RFC3339, which accepts fractional seconds, and fires
// a schedule only once the clock has reached it, so a grant is never early.
// (nats.go's WithScheduleAt drops the fraction and so fires up to a second
// too early.)
func ScheduleAt(t time.Time) string {
	return "@at " + t.UTC().Format(time.RFC3339Nano)
}

// validToken reports whether s can be one subject token.
func validToken(s string) bool {
	if s == "" || len(s) > 255 {
		return false
	}
	for _, r := range s {
		if r <= ' ' || r == '.' || r == '*' || r == '>' || r == 0x7f {
			return false
		}
	}
	return true
}

// Ping checks that the connection is up and the stream answers, and is
// still as the ledger needs it (ErrStreamMissing, ErrStreamMisconfigured).
func (l *Ledger) Ping(ctx context.Context) error {
	if st := l.nc.Status(); st != nats.CONNECTED {
		return fmt.Errorf("%w: nats connection %s", ErrUnavailable, strings.ToLower(st.String()))
	}
	info, err := streamInfo(ctx, l.js, l.cfg.Stream)
	if err != nil {
		return err
	}
	return checkStream(l.nc.ConnectedServerVersion(), info, l.cfg.Grace)
}

// Close sends the grants still queued and waits for their acks, then
// closes the connection Dial opened. A ledger from Open leaves its
// caller's connection alone.
func (l *Ledger) Close() {
	l.commitOnce.Do(func() {}) // no committer starts after this
	if l.commit != nil {
		l.commit.close()
	}
	if l.ownsNC {
		_ = l.nc.FlushTimeout(time.Second)
		l.nc.Close()
	}
}

// Config is the ledger's configuration with defaults applied.
func (l *Ledger) Config() LedgerConfig { return l.cfg }

func redactURL(s string) string {
	var out []string
	for u := range strings.SplitSeq(s, ",") {
		if at := strings.LastIndex(u, "@"); at >= 0 {
			if scheme := strings.Index(u, "://"); scheme >= 0 && scheme < at {
				u = u[:scheme+3] + "***" + u[at:]
			}
		}
		out = append(out, u)
	}
	return strings.Join(out, ",")
}
