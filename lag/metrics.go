package lag

import (
	"github.com/prometheus/client_golang/prometheus"
)

// maxReasonLabel bounds the pause reason in searchsync_consumer_pause_info.
const maxReasonLabel = 120

// Collector exports the Sampler's latest snapshot as Prometheus gauges. It
// reads what the sampler has (no query per scrape), so /metrics, the dashboard
// and `searchsync status` show the same figures.
//
// Per consumer (labels consumer, type) and per index of a search consumer
// (labels index, consumer) it exports the deliverable lag and backlog (what
// "behind" means), blocked aggregates and events by cause with the age of the
// oldest blocking head, failed events and the pause state (what "stuck"
// means): alert on each separately.
type Collector struct {
	s *Sampler

	pending, ready, failed, oldest, blocked, rate, deliverable *prometheus.Desc
	typePending, typeFailed, typeOldest                        *prometheus.Desc
	consPending, consFailed, consOldest, idxLag                *prometheus.Desc

	consDelivLag, consDeliv, consBlocked, consBlockedEvents, consBlockedSince *prometheus.Desc
	consPaused, consPauseProbes, consPauseInfo                                *prometheus.Desc
	idxDelivLag, idxDeliv, idxBlocked, idxBlockedSince, idxFailed, idxPaused  *prometheus.Desc
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
		oldest:      d("outbox_oldest_pending_age_seconds", "Age of the oldest pending event, blocked or not (grows without bound behind a failed head)."),
		deliverable: d("outbox_deliverable_lag_seconds", "Highest deliverable lag of the consumers: age of the oldest event a running consumer could be given now."),
		blocked:     d("outbox_blocked_aggregates", "Aggregates whose head event is failed or backing off (for every consumer or for one)."),
		rate:        d("outbox_delivered_per_second", "Events handled (dispatched or skipped) per second, all relays."),
		typePending: d("aggregate_type_pending_events", "Pending events per aggregate_type.", "aggregate_type"),
		typeFailed:  d("aggregate_type_failed_events", "Failed events per aggregate_type.", "aggregate_type"),
		typeOldest:  d("aggregate_type_oldest_pending_age_seconds", "Age of the oldest pending event per aggregate_type.", "aggregate_type"),
		consPending: d("consumer_backlog_events", "Pending events a consumer still has to deliver (deliverable, blocked or paused).", "consumer", "type"),
		consFailed:  d("consumer_failed_events", "Events parked (failed) for a consumer.", "consumer", "type"),
		consOldest:  d("consumer_lag_seconds", "Age of the oldest pending event a consumer still has to deliver, blocked or not.", "consumer", "type"),
		idxLag:      d("index_lag_seconds", "Age of the oldest pending event bound for an index, blocked or not.", "index", "consumer"),

		consDelivLag:      d("consumer_deliverable_lag_seconds", "Age of the oldest event a consumer could be given now (0 when none, and while paused).", "consumer", "type"),
		consDeliv:         d("consumer_deliverable_events", "Events a consumer could be given now.", "consumer", "type"),
		consBlocked:       d("consumer_blocked_aggregates", "Aggregates blocked for a consumer, by cause (failed, backing_off, paused).", "consumer", "type", "cause"),
		consBlockedEvents: d("consumer_blocked_events", "Pending events a consumer cannot be given now, by cause (failed, backing_off, paused).", "consumer", "type", "cause"),
		consBlockedSince:  d("consumer_blocked_since_seconds", "Age of the oldest blocking head of a consumer by cause (for paused: time since it was paused); 0 when none.", "consumer", "type", "cause"),
		consPaused:        d("consumer_paused", "1 while a consumer is paused (its engine, endpoint or server unavailable), else 0.", "consumer", "type"),
		consPauseProbes:   d("consumer_pause_probes", "Failed probes of a paused consumer since it was paused.", "consumer", "type"),
		consPauseInfo:     d("consumer_pause_info", "1 while a consumer is paused, with reason = the pause reason without URL credentials, queries or tokens, truncated; 0 with reason \"\" while it runs.", "consumer", "type", "reason"),
		idxDelivLag:       d("index_deliverable_lag_seconds", "Age of the oldest event bound for an index that could be delivered now.", "index", "consumer"),
		idxDeliv:          d("index_deliverable_events", "Events bound for an index that could be delivered now.", "index", "consumer"),
		idxBlocked:        d("index_blocked_aggregates", "Aggregates blocked for an index, by cause (failed, backing_off, paused).", "index", "consumer", "cause"),
		idxBlockedSince:   d("index_blocked_since_seconds", "Age of the oldest blocking head for an index by cause; 0 when none.", "index", "consumer", "cause"),
		idxFailed:         d("index_failed_events", "Events parked (failed) for an index.", "index", "consumer"),
		idxPaused:         d("index_paused", "1 while the consumer writing an index is paused, else 0.", "index", "consumer"),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.pending, c.ready, c.failed, c.oldest, c.deliverable, c.blocked, c.rate,
		c.typePending, c.typeFailed, c.typeOldest, c.consPending, c.consFailed, c.consOldest, c.idxLag,
		c.consDelivLag, c.consDeliv, c.consBlocked, c.consBlockedEvents, c.consBlockedSince,
		c.consPaused, c.consPauseProbes, c.consPauseInfo,
		c.idxDelivLag, c.idxDeliv, c.idxBlocked, c.idxBlockedSince, c.idxFailed, c.idxPaused} {
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
	g(c.deliverable, s.DeliverableLag)
	g(c.blocked, float64(s.BlockedCount))
	g(c.rate, s.DeliveredRate)
	for _, a := range s.AggregateTypes {
		g(c.typePending, float64(a.Pending), a.AggregateType)
		g(c.typeFailed, float64(a.Failed), a.AggregateType)
		g(c.typeOldest, a.OldestPendingAge, a.AggregateType)
	}
	for _, k := range s.Consumers {
		paused := 0.0
		if k.Paused != nil {
			paused = 1
		}
		g(c.consPending, float64(k.Pending), k.Name, k.Type)
		g(c.consFailed, float64(k.Failed), k.Name, k.Type)
		g(c.consOldest, k.OldestPendingAge, k.Name, k.Type)
		g(c.consDelivLag, k.DeliverableLag, k.Name, k.Type)
		g(c.consDeliv, float64(k.Deliverable), k.Name, k.Type)
		g(c.consPaused, paused, k.Name, k.Type)
		if k.Paused != nil {
			g(c.consPauseProbes, float64(k.Paused.Probes), k.Name, k.Type)
			g(c.consPauseInfo, 1, k.Name, k.Type, Redact(k.Paused.Reason, maxReasonLabel))
		} else {
			// The series stays (reason "", 0) so that queries and the
			// dashboard check find it while nothing is paused.
			g(c.consPauseProbes, 0, k.Name, k.Type)
			g(c.consPauseInfo, 0, k.Name, k.Type, "")
		}
		for _, cause := range Causes {
			f := k.Blocked.Cause(cause)
			g(c.consBlocked, float64(f.Aggregates), k.Name, k.Type, cause)
			g(c.consBlockedEvents, float64(f.Events), k.Name, k.Type, cause)
			g(c.consBlockedSince, f.Age, k.Name, k.Type, cause)
		}
		for _, idx := range k.Indexes {
			g(c.idxLag, k.OldestPendingAge, idx, k.Name)
			g(c.idxDelivLag, k.DeliverableLag, idx, k.Name)
			g(c.idxDeliv, float64(k.Deliverable), idx, k.Name)
			g(c.idxFailed, float64(k.Failed), idx, k.Name)
			g(c.idxPaused, paused, idx, k.Name)
			for _, cause := range Causes {
				f := k.Blocked.Cause(cause)
				g(c.idxBlocked, float64(f.Aggregates), idx, k.Name, cause)
				g(c.idxBlockedSince, f.Age, idx, k.Name, cause)
			}
		}
	}
}
