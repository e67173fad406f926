package webhook

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the deliveries' series.
type Metrics struct {
	deliveries *prometheus.CounterVec
	seconds    prometheus.Histogram
	failed     prometheus.Gauge
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
		failed: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mintgate_webhook_failed",
			Help: "Webhook deliveries that failed every try and are kept in MINTGATE_WEBHOOKS (GET /admin/webhooks/failed).",
		}),
	}
	reg.MustRegister(m.deliveries, m.seconds, m.failed)
	return m
}
