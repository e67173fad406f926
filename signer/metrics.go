package main

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/mintgate/mintgate/signer/internal/gate"
	"github.com/mintgate/mintgate/signer/internal/ratelimit"
)

// metrics are the signer's own series, on the run's registry, the gate's
// among them.
type metrics struct {
	*gate.Metrics

	signs         *prometheus.CounterVec   // by outcome
	limited       *prometheus.CounterVec   // 429s by tenant and scope
	ledgerSeconds *prometheus.HistogramVec // grant ledger latency, by result
	finishFailed  prometheus.Counter       // URLs issued whose done record could not be stored
	shadowDenied  *prometheus.CounterVec   // signs a short bucket would have refused, issued in shadow mode, by scope
	multipart     *prometheus.CounterVec   // multipart requests by step and outcome
	bytesGranted  *prometheus.CounterVec   // contentLength of the grants issued under tiers of bytes, by tenant
	waiting       prometheus.Gauge         // status waits (?wait=) in progress
	waitsRefused  prometheus.Counter       // status waits refused 429: no place free
	downloads     *prometheus.CounterVec   // download grant requests by tenant and outcome
}

func newMetrics(reg prometheus.Registerer) *metrics {
	factory := promauto.With(reg) // registers each metric as it is made
	m := &metrics{
		Metrics: gate.NewMetrics(reg),
		signs: factory.NewCounterVec(prometheus.CounterOpts{
			Name: "mintgate_signer_signs_total",
			Help: "Sign requests by outcome: issued, issued_degraded, replayed, rate_limited, reused, in_progress, limiter_unavailable, ledger_unavailable, presign_unavailable, rejected, too_many_requests (the address's replays and refusals past MINTGATE_READ_LIMIT).",
		}, []string{"outcome"}),
		limited: factory.NewCounterVec(prometheus.CounterOpts{
			Name: "mintgate_signer_rate_limited_total",
			Help: "Sign requests answered 429, by tenant and the scope that was short (caller or tenant).",
		}, []string{"tenant", "scope"}),
		ledgerSeconds: factory.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "mintgate_signer_ledger_seconds",
			Help:    "Latency of recording a grant in the ledger until its ack, by result (ok, error).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"result"}),
		finishFailed: factory.NewCounter(prometheus.CounterOpts{
			Name: "mintgate_signer_finish_failures_total",
			Help: "URLs issued whose completed idempotency record or grant record could not be stored in Redis.",
		}),
		shadowDenied: factory.NewCounterVec(prometheus.CounterOpts{
			Name: "mintgate_signer_shadow_denied_total",
			Help: "Signs of tenants in shadow mode (MINTGATE_SHADOW_TENANTS) that a short bucket would have refused, issued anyway, by scope: caller or tenant.",
		}, []string{"scope"}),
		bytesGranted: factory.NewCounterVec(prometheus.CounterOpts{
			Name: "mintgate_signer_bytes_granted_total",
			Help: "Bytes (contentLength) of the grants issued to callers of tenants with a tier of bytes set, by tenant: what they spent from their buckets of bytes (a refund gives some back).",
		}, []string{"tenant"}),
		downloads: factory.NewCounterVec(prometheus.CounterOpts{
			Name: "mintgate_signer_downloads_total",
			Help: "Download grant requests (POST /uploads/{urlId}/download) by tenant and outcome: issued, issued_degraded, replayed, rate_limited, shadow_limited (issued in shadow mode although a bucket was short), not_found, not_completed, upload_rejected, reused, in_progress, too_many_requests, limiter_unavailable, presign_unavailable, rejected.",
		}, []string{"tenant", "outcome"}),
		multipart: factory.NewCounterVec(prometheus.CounterOpts{
			Name: "mintgate_signer_multipart_total",
			Help: "Multipart requests by step (create, parts, list, complete, abort) and outcome. A create's decision is also counted in mintgate_signer_signs_total, as a sign's.",
		}, []string{"step", "outcome"}),
		waiting: factory.NewGauge(prometheus.GaugeOpts{
			Name: "mintgate_signer_status_waits",
			Help: "Status long polls (GET /uploads/{urlId}?wait=) in progress on this instance; at most MINTGATE_STATUS_WAITERS.",
		}),
		waitsRefused: factory.NewCounter(prometheus.CounterOpts{
			Name: "mintgate_signer_status_waits_refused_total",
			Help: "Status long polls answered 429: the address had MINTGATE_STATUS_WAITERS_PER_ADDRESS in progress, or the instance MINTGATE_STATUS_WAITERS.",
		}),
	}
	m.shadowDenied.WithLabelValues(ratelimit.ScopeCaller)
	m.shadowDenied.WithLabelValues(ratelimit.ScopeTenant)
	return m
}
