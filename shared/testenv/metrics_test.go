package testenv

import (
	"fmt"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// failures records what a helper failed with instead of ending the test.
type failures struct {
	testing.TB
	msgs []string
}

func (f *failures) Helper() {}

func (f *failures) Fatalf(format string, args ...any) {
	f.msgs = append(f.msgs, fmt.Sprintf(format, args...))
}

func TestMetricReadsSeriesAndFailsOnMissingOnes(t *testing.T) {
	reg := prometheus.NewRegistry()
	auto := promauto.With(reg)
	auto.NewCounter(prometheus.CounterOpts{Name: "c_total", Help: "c"}).Add(3)
	v := auto.NewCounterVec(prometheus.CounterOpts{Name: "v_total", Help: "v"}, []string{"op", "kind"})
	v.WithLabelValues("a", "x").Add(2)
	v.WithLabelValues("b", "y").Add(5)
	auto.NewHistogram(prometheus.HistogramOpts{Name: "h_seconds", Help: "h"}).Observe(0.5)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()

	for series, want := range map[string]float64{
		"c_total": 3, `v_total{kind="x",op="a"}`: 2, "h_seconds_count": 1, "h_seconds_sum": 0.5,
	} {
		if got := Metric(t, srv.URL, series); got != want {
			t.Errorf("Metric(%s) = %v, want %v", series, got, want)
		}
	}
	if got := MetricSum(t, srv.URL, "v_total"); got != 7 {
		t.Errorf("MetricSum(v_total) = %v, want 7", got)
	}
	for _, series := range []string{"renamed_total", `v_total{op="a"}`, "c"} {
		f := &failures{TB: t}
		if Metric(f, srv.URL, series); len(f.msgs) != 1 {
			t.Errorf("Metric(%s) of a missing series did not fail the test", series)
		}
	}
	f := &failures{TB: t}
	if MetricSum(f, srv.URL, "renamed_total"); len(f.msgs) != 1 {
		t.Error("MetricSum of a missing metric did not fail the test")
	}
}
