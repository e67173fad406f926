package main

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/mintgate/mintgate/shared/ledger"
	"github.com/mintgate/mintgate/shared/multipart"
)

// metrics are what an operator watches: how many grants came due, what
// became of them, how late, and what failed.
type metrics struct {
	swept           prometheus.Counter
	refunds         prometheus.Counter
	alreadyDone     prometheus.Counter
	alreadyRefunded prometheus.Counter
	lateness        prometheus.Histogram
	errors          *prometheus.CounterVec
	skipped         *prometheus.CounterVec
	forged          prometheus.Counter
	trimFailures    prometheus.Counter
	rescued         prometheus.Counter
	early           prometheus.Counter
	aborts          *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	factory := promauto.With(reg) // registers each metric as it is made
	m := &metrics{
		swept: factory.NewCounter(prometheus.CounterOpts{
			Name: "mintgate_sweeper_grants_swept_total",
			Help: "Due grants handled and acknowledged.",
		}),
		refunds: factory.NewCounter(prometheus.CounterOpts{
			Name: "mintgate_sweeper_refunds_total",
			Help: "Due grants whose token was refunded (the URL expired unused).",
		}),
		alreadyDone: factory.NewCounter(prometheus.CounterOpts{
			Name: "mintgate_sweeper_already_done_total",
			Help: "Due grants whose upload completed (done marker): no refund.",
		}),
		alreadyRefunded: factory.NewCounter(prometheus.CounterOpts{
			Name: "mintgate_sweeper_already_refunded_total",
			Help: "Due grants delivered again after their refund: nothing changed.",
		}),
		lateness: factory.NewHistogram(prometheus.HistogramOpts{
			Name:    "mintgate_sweeper_lateness_seconds",
			Help:    "Time from a grant's due time (expiresAt + grace) to its handling.",
			Buckets: []float64{0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 1800},
		}),
		errors: factory.NewCounterVec(prometheus.CounterOpts{
			Name: "mintgate_sweeper_errors_total",
			Help: "Deliveries not applied: kind=redis (Redis or, for multipart grants, S3 unavailable: retried with backoff) or malformed (terminated).",
		}, []string{"kind"}),
		skipped: factory.NewCounterVec(prometheus.CounterOpts{
			Name: "mintgate_sweeper_skipped_total",
			Help: "Due grants deliberately not refunded: reason=degraded (issued without Redis), shadow (issued in shadow mode past a short bucket: nothing charged), stale (older than the refunded marker lives), malformed (a signer's bug).",
		}, []string{"reason"}),
		forged: factory.NewCounter(prometheus.CounterOpts{
			Name: "mintgate_sweeper_forged_total",
			Help: "Ledger messages whose MAC did not verify under MINTGATE_GRANT_SECRET: never applied.",
		}),
		trimFailures: factory.NewCounter(prometheus.CounterOpts{
			Name: "mintgate_sweeper_ledger_trim_failures_total",
			Help: "Failed purges of the swept grants' ledger messages: they stay in the stream until a later purge (or its max age). Disk, not refunds.",
		}),
		early: factory.NewCounter(prometheus.CounterOpts{
			Name: "mintgate_sweeper_early_total",
			Help: "Grant batches delivered before their grants' due time (a copy re-published early, or clocks apart): held, and applied only once due.",
		}),
		aborts: factory.NewCounterVec(prometheus.CounterOpts{
			Name: "mintgate_sweeper_multipart_aborts_total",
			Help: "Due multipart grants' uploads ended in S3 before their refund, by outcome: aborted (now), completed (never refunded), gone (aborted before: a DELETE, or an earlier delivery), error (S3 unavailable: the batch is retried).",
		}, []string{"outcome"}),
		rescued: factory.NewCounter(prometheus.CounterOpts{
			Name: "mintgate_sweeper_rescued_batches_total",
			Help: "Grant batches applied from their schedule because nats-server had not fired it 30 s after it was due (a stuck scheduler); their grants count in grants_swept too.",
		}),
	}
	m.errors.WithLabelValues("redis")
	m.errors.WithLabelValues("malformed")
	for _, e := range []multipart.Ending{multipart.Aborted, multipart.Completed, multipart.AbortedBefore} {
		m.aborts.WithLabelValues(e.String())
	}
	m.aborts.WithLabelValues(abortError)
	for _, r := range []string{outcomeDegraded, outcomeShadow, outcomeStale, outcomeMalformed} {
		m.skipped.WithLabelValues(r)
	}
	return m
}

// observe counts what the consume loop did with each delivery.
func (m *metrics) observe(o ledger.Outcome) {
	switch o.Action {
	case ledger.Acked:
		m.swept.Add(float64(len(o.Batch.Grants)))
	case ledger.Rescued:
		m.swept.Add(float64(len(o.Batch.Grants)))
		m.rescued.Inc()
	case ledger.Forged:
		m.forged.Inc()
	case ledger.Early:
		m.early.Inc()
	case ledger.Retried:
		m.errors.WithLabelValues("redis").Inc()
	case ledger.Terminated:
		if errors.Is(o.Err, ledger.ErrMalformed) {
			m.errors.WithLabelValues("malformed").Inc()
		}
	}
}

// trimmed counts what the consume loop's purges of finished grants did.
func (m *metrics) trimmed(t ledger.Trim) {
	if t.Err != nil {
		m.trimFailures.Inc()
	}
}

func (m *metrics) outcome(out string) {
	switch out {
	case outcomeRefunded:
		m.refunds.Inc()
	case outcomeDone:
		m.alreadyDone.Inc()
	case outcomeAlready:
		m.alreadyRefunded.Inc()
	case outcomeDegraded, outcomeShadow, outcomeStale, outcomeMalformed:
		m.skipped.WithLabelValues(out).Inc()
	}
}
