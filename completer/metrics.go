package main

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Reasons a record or message is handled by ignoring it (it is deleted).
const (
	ignoredTestEvent  = "test_event"       // S3's s3:TestEvent
	ignoredNotCreated = "not_created"      // an event other than ObjectCreated:*
	ignoredOutside    = "outside_incoming" // a key not under incoming/
	ignoredTenant     = "bad_tenant"       // incoming/<tenant>/… with an invalid tenant
	ignoredURLID      = "bad_url_id"       // incoming/<tenant>/<x> where x is not a canonical UUID
	ignoredSource     = "foreign_source"   // a record whose eventSource is not aws:s3
	ignoredBucket     = "foreign_bucket"   // a record of a bucket other than MINTGATE_S3_BUCKET
	ignoredGone       = "object_gone"      // an upload whose object left incoming/ before its verdict, not by us
)

// metrics are the completer's own series, on the run's registry.
type metrics struct {
	received     prometheus.Counter
	deleted      prometheus.Counter
	done         prometheus.Counter
	takenBack    prometheus.Counter
	ignored      *prometheus.CounterVec // by reason
	unparseable  prometheus.Counter
	held         prometheus.Gauge
	extended     prometheus.Counter
	errors       *prometheus.CounterVec // by op: receive, handle, delete, extend, publish, dlq
	redisSeconds prometheus.Histogram
	// dlqMessages has no labels: its one series is absent until the
	// dead-letter queue's depth is read, and again once the queue has no
	// redrive policy (Reset).
	dlqMessages *prometheus.GaugeVec

	eventsPublished prometheus.Counter
	eventsDuplicate prometheus.Counter
	lag             prometheus.Histogram

	rejected      *prometheus.CounterVec // by tenant, reason
	extra         *prometheus.CounterVec // by tenant, outcome
	scanTruncated prometheus.Counter
}

// newMetrics declares every metric of the completer: a list, one entry a
// metric, longer than our 60 lines because splitting it would only
// scatter the list.
func newMetrics(reg prometheus.Registerer) *metrics {
	factory := promauto.With(reg) // registers each metric as it is made
	m := &metrics{
		received: factory.NewCounter(prometheus.CounterOpts{
			Name: "mintgate_completer_messages_received_total",
			Help: "SQS messages received (a message delivered again counts again).",
		}),
		deleted: factory.NewCounter(prometheus.CounterOpts{
			Name: "mintgate_completer_messages_deleted_total",
			Help: "SQS messages deleted after all their records were handled.",
		}),
		takenBack: factory.NewCounter(prometheus.CounterOpts{
			Name: "mintgate_completer_refunds_taken_back_total",
			Help: "Uploads that landed after their grant was refunded (a slow PUT started before expiry): the refund was taken back, the buckets charged again.",
		}),
		done: factory.NewCounter(prometheus.CounterOpts{
			Name: "mintgate_completer_records_done_total",
			Help: "ObjectCreated records whose done marker was set (a redelivered record counts again).",
		}),
		ignored: factory.NewCounterVec(prometheus.CounterOpts{
			Name: "mintgate_completer_ignored_total",
			Help: "Messages or records handled by ignoring them, by reason: test_event, not_created, outside_incoming, bad_tenant, bad_url_id, foreign_source, foreign_bucket, object_gone (an upload's object left incoming/ before its verdict; it stays verifying).",
		}, []string{"reason"}),
		unparseable: factory.NewCounter(prometheus.CounterOpts{
			Name: "mintgate_completer_unparseable_total",
			Help: "Messages that are not S3 event notifications, left in the queue for its redrive policy to move to the dead-letter queue.",
		}),
		held: factory.NewGauge(prometheus.GaugeOpts{
			Name: "mintgate_completer_messages_held",
			Help: "SQS messages received but not handled because Redis is down, held (kept invisible) until it answers.",
		}),
		extended: factory.NewCounter(prometheus.CounterOpts{
			Name: "mintgate_completer_visibility_extensions_total",
			Help: "Visibility timeout extensions of held messages (one per message per extension).",
		}),
		errors: factory.NewCounterVec(prometheus.CounterOpts{
			Name: "mintgate_completer_errors_total",
			Help: "Failures by operation: receive (SQS), handle (Redis, NATS, S3 or clamd down, or a notification that can never be applied), delete (SQS), extend (SQS visibility of held messages), publish (an upload event to NATS; also counted as handle), verify (reading the object from S3 or scanning it with clamd; also counted as handle), quarantine (moving a rejected object; also counted as handle), dlq (reading the dead-letter queue's depth).",
		}, []string{"op"}),
		redisSeconds: factory.NewHistogram(prometheus.HistogramOpts{
			Name:    "mintgate_completer_redis_seconds",
			Help:    "Latency of setting a done marker in Redis, errors included.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .15, .25, .5},
		}),
		dlqMessages: factory.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mintgate_completer_dlq_messages",
			Help: "Messages in the dead-letter queue of the queue's redrive policy (ApproximateNumberOfMessages + ApproximateNumberOfMessagesNotVisible), read every 30 s. Absent while the queue has no redrive policy; keeps its last value while reads fail (errors_total{op=\"dlq\"}).",
		}, nil),
		lag: factory.NewHistogram(prometheus.HistogramOpts{
			Name:    "mintgate_completer_lag_seconds",
			Help:    "Time from an upload's S3 eventTime to its done marker being set (a redelivered record counts again).",
			Buckets: []float64{.1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900},
		}),
		eventsPublished: factory.NewCounter(prometheus.CounterOpts{
			Name: "mintgate_completer_events_published_total",
			Help: "Upload events, completed or rejected, the stream stored (one per upload; 0 with events off).",
		}),
		eventsDuplicate: factory.NewCounter(prometheus.CounterOpts{
			Name: "mintgate_completer_events_duplicate_total",
			Help: "Upload-completed events published again (after a failure between publish and marking done, or by two deliveries of one record at once), dropped by the stream as duplicates of the urlId.",
		}),
	}
	gateMetrics(factory, m)
	m.zero()
	return m
}

// zero makes every label value of the vectors exist from the start, so a
// series reads 0 rather than missing.
func (m *metrics) zero() {
	for _, r := range []string{ignoredTestEvent, ignoredNotCreated, ignoredOutside, ignoredTenant, ignoredURLID, ignoredSource, ignoredBucket, ignoredGone} {
		m.ignored.WithLabelValues(r)
	}
	for _, op := range []string{opReceive, opHandle, opDelete, opExtend, opPublish, opVerify, opQuarantine, opDLQ} {
		m.errors.WithLabelValues(op)
	}
}

// gateMetrics adds the verification gate's series to m.
func gateMetrics(factory promauto.Factory, m *metrics) {
	m.rejected = factory.NewCounterVec(prometheus.CounterOpts{
		Name: "mintgate_completer_rejected_total",
		Help: "Uploads the verification gate rejected (object moved to quarantine/, tokens kept spent), by tenant and reason: size_mismatch, type_mismatch, image_too_large, malware, scan_limit, encoding_not_allowed, metadata_not_allowed. One per upload.",
	}, []string{"tenant", "reason"})
	m.extra = factory.NewCounterVec(prometheus.CounterOpts{
		Name: "mintgate_completer_extra_objects_total",
		Help: "Objects written at incoming/<tenant>/<urlId> after that upload's verdict (a second PUT on a still-live URL once the first object was quarantined), removed from incoming/ and never announced, by tenant and outcome: deleted, or replaced (written over again before the delete; the newer one is removed on its own record).",
	}, []string{"tenant", "outcome"})
	m.scanTruncated = factory.NewCounter(prometheus.CounterOpts{
		Name: "mintgate_completer_scan_truncated_total",
		Help: "Objects larger than MINTGATE_SCAN_MAX_BYTES, of which clamd scanned only the first MINTGATE_SCAN_MAX_BYTES (a redelivered record counts again).",
	})
}

// Operations of mintgate_completer_errors_total.
const (
	opReceive = "receive"
	opHandle  = "handle"
	opDelete  = "delete"
	opExtend  = "extend"
	opPublish = "publish"
	opDLQ     = "dlq" // reading the dead-letter queue's depth

	opVerify     = "verify"     // reading the object from S3, or scanning it
	opQuarantine = "quarantine" // moving a rejected object out of incoming/
)
