package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mintgate/mintgate/shared/schedule"
	"github.com/mintgate/mintgate/shared/telemetry"
)

// perEndpoint bounds the tries in flight to one endpoint (URL): a slow or
// dead one holds at most this many, and every other endpoint's deliveries
// go on.
const perEndpoint = 8

// inFlight bounds the tries in flight in all.
const inFlight = 256

// busyWait is the least wait before a delivery whose endpoint is
// saturated is tried again, without counting a try. It doubles with each
// time the same delivery finds its endpoint saturated, up to busyMax, and
// is spread at random over two try timeouts more, so that a dead
// endpoint's backlog neither comes back all at once nor cycles through
// the stream every few seconds.
const (
	busyWait = time.Second
	busyMax  = 5 * time.Minute
)

// busyDelay is the wait of a delivery whose endpoint is saturated for the
// busy-th time in a row.
func (d *Deliverer) busyDelay(busy int) time.Duration {
	wait := busyMax
	if busy < 9 {
		wait = min(busyWait<<busy, busyMax)
	}
	return wait + time.Duration(rand.Int64N(int64(2*d.cfg.Timeout)+1))
}

// stuckWait is the wait of a message whose next step could not be stored
// (MINTGATE_WEBHOOKS refusing writes): doubling with each delivery of it,
// up to busyMax, so that its endpoint is not POSTed every few seconds
// meanwhile.
func stuckWait(msg jetstream.Msg) time.Duration {
	n := uint64(1)
	if md, err := msg.Metadata(); err == nil && md.NumDelivered > 0 {
		n = md.NumDelivered
	}
	if n > 7 {
		return busyMax
	}
	return min(5*time.Second<<(n-1), busyMax)
}

// Deliverer delivers the upload events: a durable consumer ("webhooks")
// of MINTGATE_UPLOADS takes each event's first try, another of
// MINTGATE_WEBHOOKS the retries. A failed try is scheduled again in
// MINTGATE_WEBHOOKS (Nats-Schedule) before the message it came from is
// acked; after the last try the delivery is stored as failed. Nothing
// waits in memory: a process killed at any line leaves every delivery in
// JetStream, tried again (with the same webhook-id) after a restart.
type Deliverer struct {
	js       jetstream.JetStream
	cfg      Config
	endpoint func(tenant string) (Endpoint, bool)
	post     *poster
	m        *Metrics
	log      *slog.Logger
	// since is where the events' durable starts when it is first created:
	// events older than the first start are not delivered.
	since time.Time

	// retries is the stream of the retries, once its consumer is open: a
	// handled due message is deleted from it.
	retries atomic.Pointer[jetstream.Stream]
	// events is MINTGATE_UPLOADS, where each retry reads its event again.
	events atomic.Pointer[jetstream.Stream]
	// full is whether MINTGATE_WEBHOOKS was at FullShare of its bound
	// when last read (watchStream): no new retry or failed record.
	full atomic.Bool

	mu   sync.Mutex
	busy map[string]int // tries in flight per endpoint URL
	all  chan struct{}
	wg   sync.WaitGroup

	tel *telemetry.Provider // nil: tries are not traced (TraceWith)
}

// NewDeliverer delivers on js with cfg to the endpoint of each tenant
// (endpoint: the tenant's own, else cfg.Default; false: no webhook for
// that tenant, its events are passed over), counting in m.
func NewDeliverer(js jetstream.JetStream, cfg Config, endpoint func(string) (Endpoint, bool), m *Metrics, log *slog.Logger) *Deliverer {
	return &Deliverer{js: js, cfg: cfg, endpoint: endpoint, post: newPoster(cfg.Timeout, cfg.AllowPrivate), m: m, log: log,
		since: time.Now(), busy: map[string]int{}, all: make(chan struct{}, inFlight)}
}

// Ping checks the stream of retries as the deliveries need it (for
// /readyz: a dead receiver never makes the completer unready).
func (d *Deliverer) Ping(ctx context.Context) error {
	_, err := StreamInfo(ctx, d.js)
	return err
}

// Run consumes both durables until ctx ends, then waits for the tries in
// flight. Each durable has its own loop: while its stream or consumer
// cannot be opened it logs why and tries again, and a consumer that stops
// (deleted, its stream made again) is opened again.
func (d *Deliverer) Run(ctx context.Context) {
	go d.watchStream(ctx)
	go d.rescueLoop(ctx)
	go d.serveRedeliver(ctx)
	var loops sync.WaitGroup
	for _, open := range []func(context.Context) (jetstream.Consumer, error){d.openEvents, d.openRetries} {
		loops.Go(func() { d.consume(ctx, open) })
	}
	loops.Wait()
	d.wg.Wait()
}

// consume runs one durable, opened by open, until ctx ends, opening it
// again whenever it stops.
func (d *Deliverer) consume(ctx context.Context, open func(context.Context) (jetstream.Consumer, error)) {
	for ctx.Err() == nil {
		c, err := openRetrying(ctx, d.log, open)
		if err != nil {
			return // ctx ended
		}
		cc, err := c.Consume(func(msg jetstream.Msg) { d.dispatch(ctx, msg) }, jetstream.PullMaxMessages(64),
			jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
				if ctx.Err() == nil {
					d.log.Warn("webhooks: consume", "err", err)
				}
			}))
		if err != nil {
			d.log.Error("webhooks: consume; opening it again", "err", err)
			sleep(ctx, time.Second)
			continue
		}
		select {
		case <-ctx.Done():
			cc.Stop()
			select { // its callback has returned: no try starts after this
			case <-cc.Closed():
			case <-time.After(5 * time.Second):
			}
			return
		case <-cc.Closed():
			d.log.Warn("webhooks: a consumer stopped; opening it again")
			sleep(ctx, time.Second)
		}
	}
}

// sleep waits for wait or until ctx ends.
func sleep(ctx context.Context, wait time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(wait):
	}
}

// openRetrying calls open until it works or ctx ends.
func openRetrying(ctx context.Context, log *slog.Logger, open func(context.Context) (jetstream.Consumer, error)) (jetstream.Consumer, error) {
	wait := 250 * time.Millisecond
	for {
		octx, cancel := context.WithTimeout(ctx, 10*time.Second)
		c, err := open(octx)
		cancel()
		if err == nil {
			return c, nil
		}
		log.Error("webhooks: cannot open a consumer yet; retrying", "err", err, "retryIn", wait)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 15*time.Second)
	}
}

// ackWait is how long a message may be in a try before JetStream gives
// it again: a try's timeout, twice, and a margin.
func (d *Deliverer) ackWait() time.Duration { return 2*d.cfg.Timeout + 30*time.Second }

// openEvents is the durable of the events' first tries. Created, it
// starts at the first start's time; found, it is used as it is (a
// consumer's start cannot change).
func (d *Deliverer) openEvents(ctx context.Context) (jetstream.Consumer, error) {
	c, err := d.js.Consumer(ctx, eventsStream, Durable)
	if err == nil || !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return c, err
	}
	return d.js.CreateConsumer(ctx, eventsStream, jetstream.ConsumerConfig{
		Durable:        Durable,
		Description:    "mintgate webhooks: the first try of each upload event",
		FilterSubjects: eventSubjects,
		DeliverPolicy:  jetstream.DeliverByStartTimePolicy,
		OptStartTime:   &d.since,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        d.ackWait(),
		MaxAckPending:  2 * inFlight,
	})
}

// openRetries is the durable of the retries.
func (d *Deliverer) openRetries(ctx context.Context) (jetstream.Consumer, error) {
	if _, err := StreamInfo(ctx, d.js); err != nil {
		return nil, err
	}
	s, err := d.js.Stream(ctx, Stream)
	if err != nil {
		return nil, err
	}
	d.retries.Store(&s)
	c, err := d.js.Consumer(ctx, Stream, Durable)
	if err == nil || !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return c, err
	}
	return d.js.CreateConsumer(ctx, Stream, jetstream.ConsumerConfig{
		Durable:       Durable,
		Description:   "mintgate webhooks: retries and redeliveries",
		FilterSubject: DuePrefix + ">",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       d.ackWait(),
		MaxAckPending: 2 * inFlight,
	})
}

// dispatch runs msg's try in a goroutine of its own, once one of the
// inFlight slots is free.
func (d *Deliverer) dispatch(ctx context.Context, msg jetstream.Msg) {
	if ctx.Err() != nil {
		return // stopping: JetStream gives it again
	}
	select {
	case d.all <- struct{}{}:
	case <-ctx.Done():
		return
	}
	d.wg.Go(func() {
		defer func() { <-d.all }()
		d.handle(ctx, msg)
	})
}

// handle is one message: a first try or a retry.
func (d *Deliverer) handle(ctx context.Context, msg jetstream.Msg) {
	del, err := d.parse(ctx, msg)
	if errors.Is(err, ErrUnavailable) {
		if ctx.Err() == nil {
			d.log.Warn("webhooks: cannot read the event again; the delivery is tried again later", "subject", msg.Subject(), "err", err)
			_ = msg.NakWithDelay(stuckWait(msg))
		}
		return
	}
	if err != nil {
		if errors.Is(err, errForged) {
			d.m.forged.Inc()
		}
		d.log.Error("webhooks: a message no delivery can come of; dropped, nothing sent", "subject", msg.Subject(), "err", err)
		_ = msg.Term()
		d.forget(ctx, msg)
		return
	}
	ep, ok := d.endpoint(del.Tenant)
	if !ok {
		_ = msg.Ack() // no webhook for this tenant (any more)
		return
	}
	if !d.acquire(ep.URL) {
		// Saturated: tried again shortly, no try counted, the consumer free.
		del.Busy++
		d.settle(ctx, msg, del, "busy", d.schedule(ctx, del, d.busyDelay(del.Busy-1)))
		return
	}
	t := d.try(ctx, ep, del)
	d.release(ep.URL)
	if ctx.Err() != nil {
		return // shutting down: JetStream gives it again
	}
	del.Attempts++
	del.Busy = 0
	del.URL, del.LastStatus, del.LastError = RedactURL(ep.URL), t.Status, ""
	switch {
	case t.delivered():
		d.settle(ctx, msg, del, "delivered", nil)
	case del.Attempts <= len(d.cfg.Retries):
		del.LastError = t.Err.Error()
		d.settle(ctx, msg, del, "retry", d.schedule(ctx, del, jitter(d.cfg.Retries[del.Attempts-1])))
	default:
		del.LastError = t.Err.Error()
		d.settle(ctx, msg, del, "failed", d.fail(ctx, del))
	}
}

// settle acks msg once what comes next is stored (err nil), and counts
// the outcome; else msg is given again later, and nothing is lost.
func (d *Deliverer) settle(ctx context.Context, msg jetstream.Msg, del Delivery, outcome string, err error) {
	if err != nil {
		if ctx.Err() == nil {
			d.log.Warn("webhooks: cannot store the next step; the delivery is tried again later",
				"webhookId", del.ID, "tenant", del.Tenant, "err", err)
			_ = msg.NakWithDelay(stuckWait(msg))
		}
		return
	}
	if err := msg.Ack(); err != nil {
		d.log.Warn("webhooks: ack", "webhookId", del.ID, "err", err)
	} else {
		d.forget(ctx, msg)
	}
	d.m.deliveries.WithLabelValues(del.Tenant, outcome).Inc()
	switch outcome {
	case "delivered":
		d.m.lag.Observe(max(time.Since(del.Timestamp), 0).Seconds())
	case "failed":
		d.log.Error("webhooks: delivery failed every try; kept as failed (GET /admin/webhooks/failed)",
			"webhookId", del.ID, "tenant", del.Tenant, "url", del.URL, "attempts", del.Attempts, "err", del.LastError)
		d.m.failed.Inc() // the running count; watchStream counts again now and then
	case "retry":
		d.log.Info("webhooks: try failed; scheduled again", "webhookId", del.ID, "tenant", del.Tenant,
			"attempt", del.Attempts, "status", del.LastStatus, "err", del.LastError)
	}
}

// try is one POST of del to ep, timed.
func (d *Deliverer) try(ctx context.Context, ep Endpoint, del Delivery) try {
	body, err := del.Body()
	if err != nil {
		return try{Err: err}
	}
	if err := CheckURL(ep.URL, d.cfg.AllowPrivate); err != nil {
		return try{Err: err}
	}
	ctx, span := d.trySpan(ctx, del)
	start := time.Now()
	t := d.post.post(ctx, ep, del.ID, start, body)
	d.m.seconds.Observe(time.Since(start).Seconds())
	endTry(span, t)
	return t
}

// parse reads a message of either stream: an event of MINTGATE_UPLOADS
// is its first try's delivery; a retry or redelivery of MINTGATE_WEBHOOKS
// must be on its own tenant's and id's subject, and is sent as its event,
// read again (reread).
func (d *Deliverer) parse(ctx context.Context, msg jetstream.Msg) (Delivery, error) {
	md, err := msg.Metadata()
	var del Delivery
	if err == nil && md.Stream == Stream {
		del, err = parseOn(msg.Subject(), msg.Data())
		if err == nil {
			del, err = d.reread(ctx, del)
		}
	} else {
		del, err = FromEvent(msg)
	}
	del.Trace = traceOf(msg)
	return del, err
}

// acquire takes one of url's slots, or reports that all are taken.
func (d *Deliverer) acquire(url string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.busy[url] >= perEndpoint {
		return false
	}
	d.busy[url]++
	return true
}

func (d *Deliverer) release(url string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.busy[url]--; d.busy[url] <= 0 {
		delete(d.busy, url)
	}
}

// jitter is wait give or take a fifth, at random.
func jitter(wait time.Duration) time.Duration {
	return time.Duration(float64(wait) * (0.8 + 0.4*rand.Float64()))
}

// publishTimeout bounds one publish to MINTGATE_WEBHOOKS.
const publishTimeout = 5 * time.Second

// schedule stores del to be tried again after wait: a scheduled message
// on its own subject, which fires on its due subject.
func (d *Deliverer) schedule(ctx context.Context, del Delivery, wait time.Duration) error {
	if d.full.Load() {
		return fmt.Errorf("%w: %w", ErrUnavailable, ErrStreamFull)
	}
	msg, err := deliveryMsg(SchedSubject(del.Tenant, del.ID), del)
	if err != nil {
		return err
	}
	msg.Header.Set(jetstream.ScheduleHeader, schedule.At(time.Now().Add(wait)))
	msg.Header.Set(jetstream.ScheduleTargetHeader, DueSubject(del.Tenant, del.ID))
	return publish(ctx, d.js, msg)
}

// fail stores del as failed.
func (d *Deliverer) fail(ctx context.Context, del Delivery) error {
	if d.full.Load() {
		return fmt.Errorf("%w: %w", ErrUnavailable, ErrStreamFull)
	}
	now := time.Now().UTC()
	del.FailedAt = &now
	msg, err := deliveryMsg(FailedSubject(del.Tenant, del.ID), del)
	if err != nil {
		return err
	}
	return publish(ctx, d.js, msg)
}

func deliveryMsg(subject string, del Delivery) (*nats.Msg, error) {
	body, err := json.Marshal(del)
	if err != nil {
		return nil, err
	}
	msg := &nats.Msg{Subject: subject, Header: nats.Header{}, Data: body}
	if del.Trace != "" {
		msg.Header.Set(headerTrace, del.Trace) // the retry stays in its upload's trace
	}
	return msg, nil
}

// publish stores msg in MINTGATE_WEBHOOKS and waits for the ack.
func publish(ctx context.Context, js jetstream.JetStream, msg *nats.Msg) error {
	ctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	if _, err := js.PublishMsg(ctx, msg, jetstream.WithExpectStream(Stream), jetstream.WithRetryAttempts(0)); err != nil {
		return fmt.Errorf("%w: publish %s: %w", ErrUnavailable, msg.Subject, err)
	}
	return nil
}

// forget deletes msg, once handled and acked, from MINTGATE_WEBHOOKS (a
// fired retry or redelivery; not an event of MINTGATE_UPLOADS): the
// stream keeps only what is still to be tried or kept as failed, so a
// consumer created again never tries a delivery of the past again. A
// process killed before the delete leaves the message, acked: tried
// again only by such a new consumer, with the same webhook-id.
func (d *Deliverer) forget(ctx context.Context, msg jetstream.Msg) {
	md, err := msg.Metadata()
	s := d.retries.Load()
	if err != nil || md.Stream != Stream || s == nil {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
	defer cancel()
	if err := (*s).DeleteMsg(dctx, md.Sequence.Stream); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		d.log.Warn("webhooks: could not delete a handled retry from the stream; it stays, acked", "err", err)
	}
}
