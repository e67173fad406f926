package main

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// metrics are the signer's own series, on the run's registry.
type metrics struct {
	signs         *prometheus.CounterVec   // by outcome
	limited       *prometheus.CounterVec   // 429s by tenant and scope
	scriptSeconds *prometheus.HistogramVec // Redis script latency, by script
	ledgerSeconds *prometheus.HistogramVec // grant ledger latency, by result
	degraded      prometheus.Counter       // decisions made without Redis
	finishFailed  prometheus.Counter       // URLs issued whose done record could not be stored
	cancels       *prometheus.CounterVec   // cancels of spends cut short, by result
	cancelDropped prometheus.Counter       // cancels the full queue could not take
	cancelPending prometheus.Gauge         // cancels queued or being retried
	lateSpends    prometheus.Counter       // spends Redis answered Late in time: its clock is ahead of the estimate
	shadowDenied  *prometheus.CounterVec   // signs a short bucket would have refused, issued in shadow mode, by scope
	multipart     *prometheus.CounterVec   // multipart requests by step and outcome
	bytesGranted  *prometheus.CounterVec   // contentLength of the grants issued under tiers of bytes, by tenant
}

func newMetrics(reg prometheus.Registerer) *metrics {
	factory := promauto.With(reg) // registers each metric as it is made
	m := &metrics{
		signs: factory.NewCounterVec(prometheus.CounterOpts{
			Name: "mintgate_signer_signs_total",
			Help: "Sign requests by outcome: issued, issued_degraded, replayed, rate_limited, reused, in_progress, limiter_unavailable, ledger_unavailable, presign_unavailable, rejected, too_many_requests (the address's replays and refusals past MINTGATE_READ_LIMIT).",
		}, []string{"outcome"}),
		limited: factory.NewCounterVec(prometheus.CounterOpts{
			Name: "mintgate_signer_rate_limited_total",
			Help: "Sign requests answered 429, by tenant and the scope that was short (caller or tenant).",
		}, []string{"tenant", "scope"}),
		scriptSeconds: factory.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "mintgate_signer_redis_script_seconds",
			Help:    "Latency of the signer's Redis scripts (sign, refund, complete, cancel), errors included.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .15, .25, .5},
		}, []string{"script"}),
		ledgerSeconds: factory.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "mintgate_signer_ledger_seconds",
			Help:    "Latency of recording a grant in the ledger until its ack, by result (ok, error).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"result"}),
		degraded: factory.NewCounter(prometheus.CounterOpts{
			Name: "mintgate_signer_degraded_decisions_total",
			Help: "Sign decisions made by the in-process buckets while Redis was unavailable (MINTGATE_DEGRADED_MODE=local); idempotency is not guaranteed for them.",
		}),
		finishFailed: factory.NewCounter(prometheus.CounterOpts{
			Name: "mintgate_signer_finish_failures_total",
			Help: "URLs issued whose completed idempotency record or grant record could not be stored in Redis.",
		}),
		cancels: factory.NewCounterVec(prometheus.CounterOpts{
			Name: "mintgate_signer_cancels_total",
			Help: "Cancels of sign requests whose Redis spend failed on the signer's side but may have run (a stalled Redis), by result: " +
				"refunded (it had run: its tokens went back), tombstone (nothing to give back: it had not run, and now never will, or took nothing), " +
				"gave_up (Redis did not answer before the deadline or the shutdown: a token may be lost).",
		}, []string{"result"}),
		cancelPending: factory.NewGauge(prometheus.GaugeOpts{
			Name: "mintgate_signer_cancels_pending",
			Help: "Cancels queued or being retried, waiting for Redis to answer: if the signer dies now, each may be a token lost until its bucket refills.",
		}),
		cancelDropped: factory.NewCounter(prometheus.CounterOpts{
			Name: "mintgate_signer_cancel_dropped_total",
			Help: "Cancels not even queued, the canceller's queue being full (or the signer stopping): each may be a token lost.",
		}),
		shadowDenied: factory.NewCounterVec(prometheus.CounterOpts{
			Name: "mintgate_signer_shadow_denied_total",
			Help: "Signs of tenants in shadow mode (MINTGATE_SHADOW_TENANTS) that a short bucket would have refused, issued anyway, by scope: caller or tenant.",
		}, []string{"scope"}),
		bytesGranted: factory.NewCounterVec(prometheus.CounterOpts{
			Name: "mintgate_signer_bytes_granted_total",
			Help: "Bytes (contentLength) of the grants issued to callers of tenants with a tier of bytes set, by tenant: what they spent from their buckets of bytes (a refund gives some back).",
		}, []string{"tenant"}),
		multipart: factory.NewCounterVec(prometheus.CounterOpts{
			Name: "mintgate_signer_multipart_total",
			Help: "Multipart requests by step (create, parts, list, complete, abort) and outcome. A create's decision is also counted in mintgate_signer_signs_total, as a sign's.",
		}, []string{"step", "outcome"}),
		lateSpends: factory.NewCounter(prometheus.CounterOpts{
			Name: "mintgate_signer_late_spends_total",
			Help: "Spends Redis answered in time but judged late by its own clock, then retried without a deadline: " +
				"Redis's clock is ahead of the signer's estimate (it stepped, or Redis Cluster nodes disagree). Check NTP on the Redis hosts.",
		}),
	}
	m.shadowDenied.WithLabelValues(scopeCaller)
	m.shadowDenied.WithLabelValues(scopeTenant)
	for _, r := range []string{cancelRefunded, cancelTombstone, cancelGaveUp} {
		m.cancels.WithLabelValues(r) // every result from the start, at 0
	}
	return m
}
