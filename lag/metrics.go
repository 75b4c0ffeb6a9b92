package lag

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Collector exports the Sampler's latest snapshot as Prometheus gauges. It
// reads what the sampler has (no query per scrape), so /metrics, the dashboard
// and `searchsync status` show the same figures.
type Collector struct {
	s *Sampler

	pending, ready, failed, oldest, blocked, rate *prometheus.Desc
	typePending, typeFailed, typeOldest           *prometheus.Desc
	consPending, consFailed, consOldest, idxLag   *prometheus.Desc
}

// NewCollector returns a collector over s; register it with a registry.
func NewCollector(s *Sampler) *Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("searchsync_"+name, help, labels, nil)
	}
	return &Collector{
		s:           s,
		pending:     d("outbox_pending_events", "Pending events (backlog)."),
		ready:       d("outbox_ready_events", "Pending events whose available_at has come."),
		failed:      d("outbox_failed_events", "Failed events waiting for an operator."),
		oldest:      d("outbox_oldest_pending_age_seconds", "Age of the oldest pending event."),
		blocked:     d("outbox_blocked_aggregates", "Aggregates whose head event is failed or backing off."),
		rate:        d("outbox_delivered_per_second", "Events handled (dispatched or skipped) per second, all relays."),
		typePending: d("aggregate_type_pending_events", "Pending events per aggregate_type.", "aggregate_type"),
		typeFailed:  d("aggregate_type_failed_events", "Failed events per aggregate_type.", "aggregate_type"),
		typeOldest:  d("aggregate_type_oldest_pending_age_seconds", "Age of the oldest pending event per aggregate_type.", "aggregate_type"),
		consPending: d("consumer_backlog_events", "Pending events routed to a consumer.", "consumer", "type"),
		consFailed:  d("consumer_failed_events", "Failed events routed to a consumer.", "consumer", "type"),
		consOldest:  d("consumer_lag_seconds", "Age of the oldest pending event routed to a consumer.", "consumer", "type"),
		idxLag:      d("index_lag_seconds", "Age of the oldest pending event bound for an index.", "index", "consumer"),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.pending, c.ready, c.failed, c.oldest, c.blocked, c.rate,
		c.typePending, c.typeFailed, c.typeOldest, c.consPending, c.consFailed, c.consOldest, c.idxLag} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.s.Last()
	if s == nil {
		return
	}
	g := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	g(c.pending, float64(s.Pending))
	g(c.ready, float64(s.Ready))
	g(c.failed, float64(s.Failed))
	g(c.oldest, s.OldestPendingAge)
	g(c.blocked, float64(s.BlockedCount))
	g(c.rate, s.DeliveredRate)
	for _, a := range s.AggregateTypes {
		g(c.typePending, float64(a.Pending), a.AggregateType)
		g(c.typeFailed, float64(a.Failed), a.AggregateType)
		g(c.typeOldest, a.OldestPendingAge, a.AggregateType)
	}
	for _, k := range s.Consumers {
		g(c.consPending, float64(k.Pending), k.Name, k.Type)
		g(c.consFailed, float64(k.Failed), k.Name, k.Type)
		g(c.consOldest, k.OldestPendingAge, k.Name, k.Type)
		for _, idx := range k.Indexes {
			g(c.idxLag, k.OldestPendingAge, idx, k.Name)
		}
	}
}
