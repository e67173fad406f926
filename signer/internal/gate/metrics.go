package gate

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Metrics are the gate's series, on the signer's registry.
type Metrics struct {
	ScriptSeconds *prometheus.HistogramVec // Redis call latency, by call
	Degraded      prometheus.Counter       // decisions made without Redis
	Cancels       *prometheus.CounterVec   // cancels of spends cut short, by result
	CancelDropped prometheus.Counter       // cancels the full queue could not take
	CancelPending prometheus.Gauge         // cancels queued or being retried
	LateSpends    prometheus.Counter       // spends Redis answered Late in time: its clock is ahead of the estimate
}

// NewMetrics registers the gate's series on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	factory := promauto.With(reg) // registers each metric as it is made
	m := &Metrics{
		ScriptSeconds: factory.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "mintgate_signer_redis_script_seconds",
			Help:    "Latency of the signer's Redis calls (sign, refund, complete, cancel, status, peek, refill, and the multipart claims, release and abort), errors included.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .15, .25, .5},
		}, []string{"script"}),
		Degraded: factory.NewCounter(prometheus.CounterOpts{
			Name: "mintgate_signer_degraded_decisions_total",
			Help: "Sign decisions made by the in-process buckets while Redis was unavailable (MINTGATE_DEGRADED_MODE=local); idempotency is not guaranteed for them.",
		}),
		Cancels: factory.NewCounterVec(prometheus.CounterOpts{
			Name: "mintgate_signer_cancels_total",
			Help: "Cancels of sign requests whose Redis spend failed on the signer's side but may have run (a stalled Redis), by result: " +
				"refunded (it had run: its tokens went back), tombstone (nothing to give back: it had not run, and now never will, or took nothing), " +
				"gave_up (Redis did not answer before the deadline or the shutdown: a token may be lost).",
		}, []string{"result"}),
		CancelPending: factory.NewGauge(prometheus.GaugeOpts{
			Name: "mintgate_signer_cancels_pending",
			Help: "Cancels queued or being retried, waiting for Redis to answer: if the signer dies now, each may be a token lost until its bucket refills.",
		}),
		CancelDropped: factory.NewCounter(prometheus.CounterOpts{
			Name: "mintgate_signer_cancel_dropped_total",
			Help: "Cancels not even queued, the canceller's queue being full (or the signer stopping): each may be a token lost.",
		}),
		LateSpends: factory.NewCounter(prometheus.CounterOpts{
			Name: "mintgate_signer_late_spends_total",
			Help: "Spends Redis answered in time but judged late by its own clock, then retried without a deadline: " +
				"Redis's clock is ahead of the signer's estimate (it stepped, or Redis Cluster nodes disagree). Check NTP on the Redis hosts.",
		}),
	}
	for _, r := range []string{CancelRefunded, CancelTombstone, CancelGaveUp} {
		m.Cancels.WithLabelValues(r) // every result from the start, at 0
	}
	return m
}
