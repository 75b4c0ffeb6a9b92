// Package metrics owns searchsync's Prometheus metrics for the relay process:
// deliveries by consumer and outcome, commit → delivered and commit →
// searchable latency histograms per consumer and index, consumer call durations, batch figures and
// partitions owned. Lag and backlog gauges come from the lag package's
// collector, registered beside these.
package metrics

import (
	"context"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/searchsync/searchsync/delivery"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/sink"
)

// Metrics holds the relay's collectors.
type Metrics struct {
	deliveries *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	searchable *prometheus.HistogramVec
	callTime   *prometheus.HistogramVec
	batchSize  prometheus.Histogram
	stepTime   *prometheus.HistogramVec
	batchOut   *prometheus.CounterVec
	bulkOps    prometheus.Histogram
	bulkBytes  prometheus.Histogram
	bulkTime   *prometheus.HistogramVec
}

// LatencyBuckets cover 5 ms to about 10 minutes.
var LatencyBuckets = prometheus.ExponentialBucketsRange(0.005, 600, 20)

// New registers the relay's metrics with reg.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "searchsync_deliveries_total", Help: "Events handed to a consumer, by outcome (ok, stale, retry, poison, not_attempted).",
		}, []string{"consumer", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "searchsync_delivery_latency_seconds", Help: "Time from an event's created_at (its transaction) until a consumer delivered it.",
			Buckets: LatencyBuckets,
		}, []string{"consumer", "index"}),
		searchable: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "searchsync_searchable_latency_seconds", Help: "Time from an event's created_at until a refresh made its write searchable (an upper bound: late by at most one refresh-stats poll, 250 ms).",
			Buckets: LatencyBuckets,
		}, []string{"consumer", "index"}),
		callTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "searchsync_consumer_call_seconds", Help: "Duration of one consumer call for a batch (for the search consumer: projection, _mget and _bulk).",
			Buckets: prometheus.ExponentialBucketsRange(0.001, 60, 16),
		}, []string{"consumer"}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "searchsync_batch_events", Help: "Events claimed per relay batch.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 14),
		}),
		stepTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "searchsync_batch_step_seconds", Help: "Time per relay batch step (claim, deliver, ack).",
			Buckets: prometheus.ExponentialBucketsRange(0.0005, 30, 16),
		}, []string{"step"}),
		batchOut: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "searchsync_events_total", Help: "Events by the state the relay wrote (dispatched, stale, retried, failed, skipped, fenced).",
		}, []string{"result"}),
	}
	m.bulkOps = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "searchsync_bulk_ops", Help: "Ops per _bulk request.", Buckets: prometheus.ExponentialBuckets(1, 2, 14),
	})
	m.bulkBytes = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "searchsync_bulk_bytes", Help: "Document bytes per _bulk request.", Buckets: prometheus.ExponentialBuckets(256, 4, 10),
	})
	m.bulkTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "searchsync_bulk_request_seconds", Help: "Duration of one _bulk request, by result (answered, error).",
		Buckets: prometheus.ExponentialBucketsRange(0.001, 60, 16),
	}, []string{"result"})
	reg.MustRegister(m.deliveries, m.latency, m.searchable, m.callTime, m.batchSize, m.stepTime, m.batchOut, m.bulkOps, m.bulkBytes, m.bulkTime)
	return m
}

// ObserveSearchable records that an event written by consumer to index
// became searchable seconds after its commit (search.SearchableConfig.Observe).
func (m *Metrics) ObserveSearchable(consumer, index string, seconds float64) {
	m.searchable.WithLabelValues(consumer, index).Observe(seconds)
}

// Batch is what ObserveBatch records of one relay batch (the caller copies
// it from relay.BatchStats: metrics is fed by callbacks and does not import
// the relay).
type Batch struct {
	Claimed                                             int
	Dispatched, Stale, Retried, Failed, Skipped, Fenced int
	Claim, Deliver, Ack                                 time.Duration
}

// ObserveBatch records one relay batch; call it from relay.Config.OnBatch.
func (m *Metrics) ObserveBatch(b Batch) {
	if b.Claimed == 0 {
		return
	}
	m.batchSize.Observe(float64(b.Claimed))
	m.stepTime.WithLabelValues("claim").Observe(b.Claim.Seconds())
	m.stepTime.WithLabelValues("deliver").Observe(b.Deliver.Seconds())
	m.stepTime.WithLabelValues("ack").Observe(b.Ack.Seconds())
	for res, n := range map[string]int{"dispatched": b.Dispatched, "stale": b.Stale, "retried": b.Retried,
		"failed": b.Failed, "skipped": b.Skipped, "fenced": b.Fenced} {
		if n > 0 {
			m.batchOut.WithLabelValues(res).Add(float64(n))
		}
	}
}

// ObserveBulk records one _bulk request; use it as indexer.WriterConfig.OnBulk.
func (m *Metrics) ObserveBulk(ops, docBytes int, took time.Duration, err error) {
	m.bulkOps.Observe(float64(ops))
	m.bulkBytes.Observe(float64(docBytes))
	result := "answered"
	if err != nil {
		result = "error"
	}
	m.bulkTime.WithLabelValues(result).Observe(took.Seconds())
}

// Relay is what RegisterRelay reads of a relay instance at every scrape.
type Relay struct {
	// Partitions owned now.
	Partitions func() int
	// Overtaken counts events delivered after a later event of their
	// aggregate (a producer that skipped the aggregate lock).
	Overtaken func() uint64
	// WatermarkWait is how long the oldest id has waited for the
	// visibility watermark; WatermarkGiveUps how often the relay stopped
	// waiting for a transaction (relay.watermark.max_wait).
	WatermarkWait    func() time.Duration
	WatermarkGiveUps func() uint64
}

// RegisterRelay exports a relay instance's partitions, out-of-order
// deliveries and watermark, as r reports them at every scrape.
func RegisterRelay(reg prometheus.Registerer, instanceID string, r Relay) {
	labels := prometheus.Labels{"instance_id": instanceID}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "searchsync_relay_partitions_owned", Help: "Partitions this relay instance owns now.", ConstLabels: labels,
		}, func() float64 { return float64(r.Partitions()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "searchsync_relay_out_of_order_events_total", ConstLabels: labels,
			Help: "Events delivered after a later event of their aggregate: a producer committed them out of id order (docs/ordering.md).",
		}, func() float64 { return float64(r.Overtaken()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "searchsync_relay_watermark_wait_seconds", ConstLabels: labels,
			Help: "How long the oldest outbox id has waited for the visibility watermark (transactions that may still commit a lower id).",
		}, func() float64 { return r.WatermarkWait().Seconds() }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "searchsync_relay_watermark_give_ups_total", ConstLabels: labels,
			Help: "Times the relay stopped waiting for a transaction that held outbox ids longer than relay.watermark.max_wait.",
		}, func() float64 { return float64(r.WatermarkGiveUps()) }),
	)
}

// Linked is what the metrics read of a search consumer's writes of the
// documents relations reach (linked.Stats), at every scrape.
type Linked struct {
	Conflicts, FanOut, FanOutSkipped func() uint64
}

// RegisterLinked exports a search consumer's counters of the documents
// relations reach: guarded writes that met another writer's change, and the
// documents a change of an entity's copied fields was brought to, or left
// out beyond max_fan_out (docs/relations.md, "Propagation").
func RegisterLinked(reg prometheus.Registerer, consumer string, l Linked) {
	labels := prometheus.Labels{"consumer": consumer}
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "searchsync_relation_write_conflicts_total", ConstLabels: labels,
			Help: "Writes of documents relations reach that another writer's change came before: read, folded and written again.",
		}, func() float64 { return float64(l.Conflicts()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "searchsync_relation_fanout_documents_total", ConstLabels: labels,
			Help: "Documents brought a new copy of a related entity's fields (relations' other_fields).",
		}, func() float64 { return float64(l.FanOut()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "searchsync_relation_fanout_skipped_total", ConstLabels: labels,
			Help: "Documents left with an older copy of a related entity's fields because one change reached more than max_fan_out of them; a reindex brings them up to date.",
		}, func() float64 { return float64(l.FanOutSkipped()) }),
	)
}

// Instrument wraps a consumer so that its outcomes, call durations and the
// commit → delivered latency of what it delivered are recorded. indexes are
// the search indexes the consumer writes (empty for other consumers).
func (m *Metrics) Instrument(c sink.Consumer, indexes []string) sink.Consumer {
	return &instrumented{Consumer: c, m: m, index: strings.Join(indexes, ",")}
}

type instrumented struct {
	sink.Consumer
	m     *Metrics
	index string
}

// Unwrap returns the wrapped consumer.
func (i *instrumented) Unwrap() sink.Consumer { return i.Consumer }

func (i *instrumented) Deliver(ctx context.Context, events []*outbox.Event) []delivery.Outcome {
	start := time.Now()
	out := i.Consumer.Deliver(ctx, events)
	now := time.Now()
	name := i.Consumer.Name()
	i.m.callTime.WithLabelValues(name).Observe(now.Sub(start).Seconds())
	counts := map[delivery.Kind]int{}
	lat := i.m.latency.WithLabelValues(name, i.index)
	for j, o := range out {
		counts[o.Kind]++
		if o.Kind.Delivered() && !events[j].CreatedAt.IsZero() {
			lat.Observe(now.Sub(events[j].CreatedAt).Seconds())
		}
	}
	for k, n := range counts {
		i.m.deliveries.WithLabelValues(name, k.String()).Add(float64(n))
	}
	return out
}

// Probe forwards to the wrapped consumer's probe (sink.Prober); a consumer
// without one is probed by its next batch, which the relay knows from
// ErrNoProbe.
func (i *instrumented) Probe(ctx context.Context) error {
	if p, ok := i.Consumer.(sink.Prober); ok {
		return p.Probe(ctx)
	}
	return sink.ErrNoProbe
}

// Close closes the wrapped consumer when it holds connections.
func (i *instrumented) Close() error {
	if c, ok := i.Consumer.(sink.Closer); ok {
		return c.Close()
	}
	return nil
}
