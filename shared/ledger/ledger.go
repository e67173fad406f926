package ledger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mintgate/mintgate/shared/backoff"
	"github.com/mintgate/mintgate/shared/config"
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
	ErrUnavailable = errors.New("ledger: unavailable")
	// ErrNoScheduling is returned by Dial, Open and EnsureStream when the
	// server or the stream cannot delay messages (a stream without
	// scheduling is also ErrStreamMisconfigured): such a server would accept the grants and
	// deliver them at once, refunding every URL while it is still valid.
	ErrNoScheduling = errors.New("ledger: JetStream message scheduling unavailable (needs nats-server 2.12 or later)")
	// ErrStreamMissing is wrapped (with ErrUnavailable) when the ledger's
	// stream does not exist: the operator step (EnsureStream, run by
	// deploy/streams) creates it; a service never does.
	ErrStreamMissing = errors.New("ledger: the stream does not exist (the operator step creates it)")
	// ErrStreamMisconfigured is wrapped (with ErrUnavailable) when the
	// stream exists but lacks what the ledger relies on; the error names
	// each setting. The operator step updates it.
	ErrStreamMisconfigured = errors.New("ledger: the stream is misconfigured (the operator step updates it)")
	// ErrInvalidGrant is wrapped (with ErrUnavailable) when a grant cannot
	// be recorded as it is, such as a urlId that is not a subject token.
	ErrInvalidGrant = errors.New("ledger: invalid grant")
)

// LedgerConfig shapes the stream and the group commit. Zero values take
// the defaults; Secret is required.
type Config struct {
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
func (c Config) logger() *slog.Logger {
	if c.Log == nil {
		return slog.Default().With("component", "grant-ledger")
	}
	return c.Log.With("component", "grant-ledger")
}

func (c Config) withDefaults() Config {
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

// Ledger records grants in a JetStream stream that delivers each batch to
// SubjectDue when it is due.
type Client struct {
	cfg    Config
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
func Dial(ctx context.Context, natsURL string, cfg Config, opts ...nats.Option) (*Client, error) {
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
func dialConn(ctx context.Context, natsURL string, cfg Config, opts ...nats.Option) (*nats.Conn, jetstream.JetStream, error) {
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
		return nil, nil, fmt.Errorf("%w: connect %s: %w", ErrUnavailable, config.RedactURL(natsURL), err)
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
func Open(ctx context.Context, js jetstream.JetStream, cfg Config) (*Client, error) {
	if err := preflight(js, cfg); err != nil {
		return nil, err
	}
	return openLoop(ctx, js, cfg, waitable, nil)
}

// preflight refuses what no retry can fix: a configuration the ledger
// cannot run with, or a server too old to schedule messages.
func preflight(js jetstream.JetStream, cfg Config) error {
	if cfg.Grace < 0 {
		return fmt.Errorf("ledger: negative grace %v would make grants due before they expire", cfg.Grace)
	}
	if err := CheckSecret(cfg.Secret); err != nil {
		return fmt.Errorf("ledger: the MAC secret %w", err)
	}
	return checkVersion(js.Conn().ConnectedServerVersion())
}

// openLoop tries open until it succeeds, ctx ends or an error retry does
// not accept; tried, when set, sees each failed try's error.
func openLoop(ctx context.Context, js jetstream.JetStream, cfg Config, retry func(error) bool, tried func(error)) (*Client, error) {
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

func open(ctx context.Context, js jetstream.JetStream, cfg Config) (*Client, error) {
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
	return &Client{cfg: cfg, nc: js.Conn(), js: js, log: cfg.logger()}, nil
}

// Ping checks that the connection is up and the stream answers, and is
// still as the ledger needs it (ErrStreamMissing, ErrStreamMisconfigured).
func (l *Client) Ping(ctx context.Context) error {
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
func (l *Client) Close() {
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
func (l *Client) Config() Config { return l.cfg }

// JetStream is the client's JetStream context, for the other streams a
// service reads or writes on the same connection.
func (l *Client) JetStream() jetstream.JetStream { return l.js }
