package ledger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mintgate/mintgate/shared/backoff"
)

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
func (c Config) StreamConfig() jetstream.StreamConfig {
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
func EnsureStream(ctx context.Context, js jetstream.JetStream, cfg Config) (*jetstream.StreamInfo, error) {
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

func ensureStream(ctx context.Context, js jetstream.JetStream, cfg Config) (*jetstream.StreamInfo, error) {
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
func keepOperatorSettings(ctx context.Context, js jetstream.JetStream, cfg Config) (Config, error) {
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
