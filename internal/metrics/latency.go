package metrics

import (
	"math"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Quantiles are commit → delivered percentiles of one consumer over a
// window, estimated from the histogram buckets (linear inside a bucket, as
// Prometheus' histogram_quantile does).
type Quantiles struct {
	// Delivered counts the events delivered in the window.
	Delivered uint64  `json:"n"`
	P50       float64 `json:"p50"`
	P95       float64 `json:"p95"`
	P99       float64 `json:"p99"`
}

// LatencyWindow turns the cumulative commit → delivered histogram of this
// process into per-window percentiles: each call to Since returns what was
// delivered since the previous call. It is safe for concurrent use.
type LatencyWindow struct {
	m    *Metrics
	mu   sync.Mutex
	prev map[string]histo
}

type histo struct {
	count   uint64
	buckets []uint64 // cumulative, one per LatencyBuckets bound
}

// LatencyWindow returns a window over m's commit → delivered histogram.
func (m *Metrics) LatencyWindow() *LatencyWindow {
	return &LatencyWindow{m: m, prev: map[string]histo{}}
}

// Since returns, per consumer, the percentiles of the events this process
// delivered since the previous call (the first call: since the start). A
// consumer that delivered nothing in the window is left out.
func (w *LatencyWindow) Since() map[string]Quantiles {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := map[string]histo{}
	ch := make(chan prometheus.Metric, 16)
	go func() {
		w.m.latency.Collect(ch)
		close(ch)
	}()
	for pm := range ch {
		var d dto.Metric
		if err := pm.Write(&d); err != nil || d.Histogram == nil {
			continue
		}
		var consumer string
		for _, l := range d.Label {
			if l.GetName() == "consumer" {
				consumer = l.GetValue()
			}
		}
		h := now[consumer]
		if h.buckets == nil {
			h.buckets = make([]uint64, len(LatencyBuckets))
		}
		h.count += d.Histogram.GetSampleCount()
		for i, b := range d.Histogram.Bucket {
			if i < len(h.buckets) {
				h.buckets[i] += b.GetCumulativeCount()
			}
		}
		now[consumer] = h
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
