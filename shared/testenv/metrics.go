package testenv

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metric is the value of one series a service serves at url (its
// /metrics), named as the text format writes it: a name, or
// name{label="value",…} with the labels sorted by name; a histogram's
// name_count and name_sum too. The test fails when the service has no such
// series, so a metric renamed or never registered cannot pass for 0.
func Metric(tb testing.TB, url, series string) float64 {
	tb.Helper()
	v, ok := MetricIfPresent(tb, url, series)
	if !ok {
		tb.Fatalf("%s serves no series %s", url, series)
	}
	return v
}

// MetricIfPresent is Metric for a series that may rightly be absent; ok
// tells whether it is there.
func MetricIfPresent(tb testing.TB, url, series string) (v float64, ok bool) {
	tb.Helper()
	for _, mf := range scrapeMetrics(tb, url) {
		for _, m := range mf.GetMetric() {
			for s, v := range samples(mf, m) {
				if s == series {
					return v, true
				}
			}
		}
	}
	return 0, false
}

// MetricSum is the sum of every series of the counter or gauge name at
// url (of a histogram: its observations, every series's count). The test fails when the service has no such metric.
func MetricSum(tb testing.TB, url, name string) float64 {
	tb.Helper()
	mf, ok := scrapeMetrics(tb, url)[name]
	if !ok {
		tb.Fatalf("%s serves no metric %s", url, name)
	}
	sum := 0.0
	for _, m := range mf.GetMetric() {
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		default:
			tb.Fatalf("%s: %s is neither a counter, a gauge nor a histogram", url, name)
		}
	}
	return sum
}

// scrapeMetrics GETs url and parses the Prometheus text it serves.
func scrapeMetrics(tb testing.TB, url string) map[string]*dto.MetricFamily {
	tb.Helper()
	resp, err := http.Get(url)
	if err != nil {
		tb.Fatalf("metrics: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("metrics: %s answered %d", url, resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		tb.Fatalf("metrics of %s: %v", url, err)
	}
	return mfs
}

// samples are the series of m, one of mf's metrics, by the name the text
// format gives each (histograms: _count and _sum only).
func samples(mf *dto.MetricFamily, m *dto.Metric) map[string]float64 {
	name, labels := mf.GetName(), labelText(m.GetLabel())
	switch {
	case m.Counter != nil:
		return map[string]float64{name + labels: m.GetCounter().GetValue()}
	case m.Gauge != nil:
		return map[string]float64{name + labels: m.GetGauge().GetValue()}
	case m.Untyped != nil:
		return map[string]float64{name + labels: m.GetUntyped().GetValue()}
	case m.Histogram != nil:
		h := m.GetHistogram()
		return map[string]float64{name + "_count" + labels: float64(h.GetSampleCount()), name + "_sum" + labels: h.GetSampleSum()}
	case m.Summary != nil:
		s := m.GetSummary()
		return map[string]float64{name + "_count" + labels: float64(s.GetSampleCount()), name + "_sum" + labels: s.GetSampleSum()}
	}
	return nil
}

// labelText writes labels as the text format does: {a="x",b="y"}, sorted
// by name, or nothing.
func labelText(labels []*dto.LabelPair) string {
	if len(labels) == 0 {
		return ""
	}
	pairs := make([]string, 0, len(labels))
	for _, l := range labels {
		pairs = append(pairs, fmt.Sprintf("%s=%s", l.GetName(), strconv.Quote(l.GetValue())))
	}
	slices.Sort(pairs)
	return "{" + strings.Join(pairs, ",") + "}"
}
