package webhook

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the deliveries' series.
type Metrics struct {
	deliveries *prometheus.CounterVec
	seconds    prometheus.Histogram
	lag        prometheus.Histogram
	failed     prometheus.Gauge
	forged     prometheus.Counter
	bytes      prometheus.Gauge
	maxBytes   prometheus.Gauge
}

// NewMetrics registers the deliveries' series on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mintgate_webhook_deliveries_total",
			Help: "Webhook tries by tenant and outcome: delivered (a 2xx), retry (failed, scheduled again), failed (the last try failed: kept for the admin API), busy (the endpoint was saturated: scheduled again, no try counted).",
		}, []string{"tenant", "outcome"}),
		seconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "mintgate_webhook_delivery_seconds",
			Help:    "Duration of one webhook try, from the request to the answer (or the timeout).",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
		}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "mintgate_webhook_lag_seconds",
			Help: "From an upload event's time (completedAt, rejectedAt) to its delivery (the 2xx): the first try's lag, or the retries' and redeliveries'.",
			// Seconds for a first try, up to the retries' hours.
			Buckets: []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 7200, 18000, 36000, 86400},
		}),
		failed: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mintgate_webhook_failed",
			Help: "Webhook deliveries that failed every try and are kept in MINTGATE_WEBHOOKS (GET /admin/webhooks/failed): a running count, counted again every 10 minutes.",
		}),
		forged: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mintgate_webhook_forged_total",
			Help: "Messages of MINTGATE_WEBHOOKS that named no event of MINTGATE_UPLOADS of their own (another id or tenant, or none): dropped, nothing sent. Not written by a completer.",
		}),
		bytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mintgate_webhook_stream_bytes",
			Help: "Bytes stored in MINTGATE_WEBHOOKS (retries waiting, failed deliveries), read every 15 s.",
		}),
		maxBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mintgate_webhook_stream_max_bytes",
			Help: "MINTGATE_WEBHOOKS' size bound (MINTGATE_WEBHOOK_STREAM_MAX_BYTES, set by the operator step); 0 for none. At it, new retries are refused and wait, never dropped.",
		}),
	}
	reg.MustRegister(m.deliveries, m.seconds, m.lag, m.failed, m.forged, m.bytes, m.maxBytes)
	return m
}
