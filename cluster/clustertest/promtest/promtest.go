// Package promtest reads Prometheus metrics in tests: a node's /metrics
// scraped and parsed, and the value of one series.
package promtest

import (
	"net/http"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Scrape fetches and parses one node's /metrics.
func Scrape(t testing.TB, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics of %s: %s", addr, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics of %s: %v", addr, err)
	}
	return fams
}

// series is the first series of family name whose labels include want
// (nil: any); nil when there is none.
func series(fams map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
next:
	for _, m := range fams[name].GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		return m
	}
	return nil
}

// GaugeValue is the value of the series of family name whose labels
// include want (nil: the family's only series); ok is false when absent.
func GaugeValue(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	m := series(fams, name, want)
	switch {
	case m == nil:
		return 0, false
	case m.Gauge != nil:
		return m.GetGauge().GetValue(), true
	case m.Counter != nil:
		return m.GetCounter().GetValue(), true
	case m.Untyped != nil:
		return m.GetUntyped().GetValue(), true
	}
	return 0, true
}

// Histogram is the histogram of family name whose labels include want;
// nil when absent.
func Histogram(fams map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Histogram {
	return series(fams, name, want).GetHistogram()
}
