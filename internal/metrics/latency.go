package metrics

import (
	"math"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Quantiles are commit → delivered (or commit → searchable) percentiles
// of one consumer (or index) over a window, estimated from the histogram buckets (linear inside a bucket, as
// Prometheus' histogram_quantile does).
type Quantiles struct {
	// Delivered counts the events delivered (made searchable) in the window.
	Delivered uint64  `json:"n"`
	P50       float64 `json:"p50"`
	P95       float64 `json:"p95"`
	P99       float64 `json:"p99"`
}

// LatencyWindow turns the cumulative commit → delivered histogram of this
// process into per-window percentiles: each call to Since returns what was
// delivered since the previous call. It is safe for concurrent use.
type LatencyWindow struct{ w window }

// SearchableWindow is the same over the commit → searchable histogram, per
// consumer and index.
type SearchableWindow struct{ w window }

// window turns a cumulative histogram vector into per-window counts by a
// key of its labels.
type window struct {
	vec  *prometheus.HistogramVec
	key  func(labels map[string]string) string
	mu   sync.Mutex
	prev map[string]histo
}

type histo struct {
	count   uint64
	buckets []uint64 // cumulative, one per LatencyBuckets bound
}

// LatencyWindow returns a window over m's commit → delivered histogram.
func (m *Metrics) LatencyWindow() *LatencyWindow {
	return &LatencyWindow{w: window{vec: m.latency, key: func(l map[string]string) string { return l["consumer"] }, prev: map[string]histo{}}}
}

// SearchableWindow returns a window over m's commit → searchable histogram.
func (m *Metrics) SearchableWindow() *SearchableWindow {
	return &SearchableWindow{w: window{vec: m.searchable, key: func(l map[string]string) string { return l["consumer"] + "\x00" + l["index"] }, prev: map[string]histo{}}}
}

// Since returns, per consumer, the percentiles of the events this process
// delivered since the previous call (the first call: since the start). A
// consumer that delivered nothing in the window is left out.
func (w *LatencyWindow) Since() map[string]Quantiles { return w.w.since() }

// Since returns, per consumer and index, the percentiles of the events
// this process saw searchable since the previous call (Delivered counts
// them). An index with none in the window is left out.
func (w *SearchableWindow) Since() map[string]map[string]Quantiles {
	out := map[string]map[string]Quantiles{}
	for k, q := range w.w.since() {
		consumer, index, _ := strings.Cut(k, "\x00")
		if out[consumer] == nil {
			out[consumer] = map[string]Quantiles{}
		}
		out[consumer][index] = q
	}
	return out
}

func (w *window) since() map[string]Quantiles {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := map[string]histo{}
	ch := make(chan prometheus.Metric, 16)
	go func() {
		w.vec.Collect(ch)
		close(ch)
	}()
	for pm := range ch {
		var d dto.Metric
		if err := pm.Write(&d); err != nil || d.Histogram == nil {
			continue
		}
		labels := map[string]string{}
		for _, l := range d.Label {
			labels[l.GetName()] = l.GetValue()
		}
		key := w.key(labels)
		h := now[key]
		if h.buckets == nil {
			h.buckets = make([]uint64, len(LatencyBuckets))
		}
		h.count += d.Histogram.GetSampleCount()
		for i, b := range d.Histogram.Bucket {
			if i < len(h.buckets) {
				h.buckets[i] += b.GetCumulativeCount()
			}
		}
		now[key] = h
	}
	out := map[string]Quantiles{}
	for name, h := range now {
		p := w.prev[name]
		n := h.count - p.count
		if n == 0 {
			continue
		}
		delta := make([]uint64, len(h.buckets))
		for i := range h.buckets {
			delta[i] = h.buckets[i]
			if p.buckets != nil {
				delta[i] -= p.buckets[i]
			}
		}
		out[name] = Quantiles{Delivered: n, P50: quantile(0.5, delta, n), P95: quantile(0.95, delta, n), P99: quantile(0.99, delta, n)}
	}
	w.prev = now
	return out
}

// quantile estimates the q-quantile of n observations from cumulative
// bucket counts over LatencyBuckets (observations above the last bound
// count as the last bound).
func quantile(q float64, cum []uint64, n uint64) float64 {
	rank := q * float64(n)
	lower, below := 0.0, uint64(0)
	for i, c := range cum {
		upper := LatencyBuckets[i]
		if float64(c) >= rank {
			inBucket := c - below
			if inBucket == 0 {
				return upper
			}
			v := lower + (upper-lower)*(rank-float64(below))/float64(inBucket)
			return math.Round(v*1000) / 1000
		}
		lower, below = upper, c
	}
	return LatencyBuckets[len(LatencyBuckets)-1]
}
