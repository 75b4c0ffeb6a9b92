package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestLatencyWindow: each window holds what was observed since the previous
// one, per consumer, and its percentiles fall in the right buckets.
func TestLatencyWindow(t *testing.T) {
	t.Parallel()
	m := New(prometheus.NewRegistry())
	w := m.LatencyWindow()
	if got := w.Since(); len(got) != 0 {
		t.Fatalf("empty histogram: %+v", got)
	}
	for range 98 {
		m.latency.WithLabelValues("search", "customers").Observe(0.02)
	}
	m.latency.WithLabelValues("search", "customers").Observe(5)
	m.latency.WithLabelValues("search", "customers").Observe(5)
	m.latency.WithLabelValues("hook", "").Observe(1)
	got := w.Since()
	s := got["search"]
	if s.Delivered != 100 || s.P50 > 0.05 || s.P50 < 0.005 || s.P99 < 2 || s.P99 > 10 {
		t.Errorf("search: %+v; want 100 delivered, p50 about 0.02 s, p99 about 5 s", s)
	}
	if h := got["hook"]; h.Delivered != 1 || h.P50 < 0.5 || h.P50 > 2 {
		t.Errorf("hook: %+v", h)
	}
	// The next window sees only what came after.
	m.latency.WithLabelValues("hook", "").Observe(30)
	got = w.Since()
	if _, ok := got["search"]; ok || got["hook"].Delivered != 1 || got["hook"].P50 < 10 {
		t.Errorf("second window: %+v", got)
	}
}

// TestSearchableWindow: per consumer and index, what became searchable
// since the previous window.
func TestSearchableWindow(t *testing.T) {
	t.Parallel()
	m := New(prometheus.NewRegistry())
	w := m.SearchableWindow()
	for range 10 {
		m.ObserveSearchable("search", "customers", 1.2)
	}
	m.ObserveSearchable("search", "orders", 0.3)
	got := w.Since()
	if c := got["search"]["customers"]; c.Delivered != 10 || c.P50 < 0.8 || c.P50 > 2 {
		t.Errorf("customers: %+v; want 10 at about 1.2 s", c)
	}
	if o := got["search"]["orders"]; o.Delivered != 1 {
		t.Errorf("orders: %+v", o)
	}
	if got := w.Since(); len(got) != 0 {
		t.Errorf("an empty window: %+v", got)
	}
}
