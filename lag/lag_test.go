package lag_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/lag"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/routing"
)

func TestLagSnapshotAgreesWithTheTable(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	w := outbox.NewWriter(outbox.WriterConfig{Schema: db.Schema})
	var aggs []uuid.UUID
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		var evs []outbox.Event
		for i := 0; i < 6; i++ {
			id := uuid.New()
			aggs = append(aggs, id)
			for v := 1; v <= 3; v++ {
				evs = append(evs, outbox.Event{EventType: "entity.customer.updated", AggregateType: "DDM_ENTITY", AggregateID: &id, Payload: json.RawMessage(`{"version":1}`)})
			}
		}
		evs = append(evs, outbox.Event{EventType: "role.granted", AggregateType: "AA_ROLE", Payload: json.RawMessage(`{}`)})
		_, err := w.Write(ctx, tx, evs...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	exec := func(sql string, args ...any) {
		if _, err := db.Pool.Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	// aggregate 0: all dispatched; 1: head failed; 2: head backing off; rest pending.
	exec(`UPDATE aa_outbox_event SET status='dispatched', dispatched_at=now() WHERE aggregate_id=$1`, aggs[0])
	exec(`UPDATE aa_outbox_event SET status='failed', attempts=10, last_error='hook: 400 Bad Request' WHERE id=(SELECT min(id) FROM aa_outbox_event WHERE aggregate_id=$1)`, aggs[1])
	exec(`UPDATE aa_outbox_event SET attempts=1, last_error='hook: 503', available_at=now()+interval '1 hour' WHERE id=(SELECT min(id) FROM aa_outbox_event WHERE aggregate_id=$1)`, aggs[2])
	exec(`UPDATE aa_outbox_event SET created_at = now() - interval '42 seconds' WHERE id=(SELECT min(id) FROM aa_outbox_event WHERE status='pending')`)

	consumers := []lag.Consumer{
		{Name: "search", Type: "search", Indexes: []string{"customers"}},
		{Name: "roles-hook", Type: "webhook"},
	}
	routes := &routing.Table{Routes: []routing.Route{
		{Consumer: "search", EventTypes: []string{"entity.customer.*"}},
		{Consumer: "roles-hook", AggregateTypes: []string{"AA_ROLE"}},
	}}
	r := lag.NewReader(db.Pool, db.Schema, consumers, routes)
	s, err := r.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// 19 events: 3 dispatched, 1 failed, 15 pending (1 of them not yet available).
	if s.Pending != 15 || s.Ready != 14 || s.Failed != 1 || s.LastID != 19 {
		t.Errorf("totals: pending %d ready %d failed %d last id %d", s.Pending, s.Ready, s.Failed, s.LastID)
	}
	if s.OldestPendingAge < 42 || s.OldestPendingAge > 60 {
		t.Errorf("oldest pending age %.1f, want about 42 s", s.OldestPendingAge)
	}
	if s.BlockedCount != 2 || len(s.Blocked) != 2 {
		t.Fatalf("blocked: %d %+v, want aggregates 1 and 2", s.BlockedCount, s.Blocked)
	}
	for _, b := range s.Blocked {
		if b.Waiting != 2 {
			t.Errorf("blocked %v: %d waiting, want 2", b.AggregateID, b.Waiting)
		}
		if b.AggregateID == aggs[1] && (b.Status != "failed" || b.LastError != "hook: 400 Bad Request") {
			t.Errorf("blocked head: %+v", b)
		}
	}
	if len(s.Failures) != 1 || s.Failures[0].Attempts != 10 {
		t.Errorf("failures: %+v", s.Failures)
	}
	want := map[string][2]int64{"search": {14, 1}, "roles-hook": {1, 0}}
	for _, c := range s.Consumers {
		if got := [2]int64{c.Pending, c.Failed}; got != want[c.Name] {
			t.Errorf("consumer %s: pending, failed = %v, want %v", c.Name, got, want[c.Name])
		}
	}

	// The Prometheus collector reports the same figures.
	smp := lag.NewSampler(r, lag.SamplerConfig{}, nil)
	if _, err := smp.Sample(ctx); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(lag.NewCollector(smp))
	if v := testutil.ToFloat64(mustGauge(t, reg, "searchsync_outbox_pending_events", nil)); v != 15 {
		t.Errorf("metric pending = %v", v)
	}
	if v := testutil.ToFloat64(mustGauge(t, reg, "searchsync_consumer_backlog_events", map[string]string{"consumer": "search"})); v != 14 {
		t.Errorf("metric consumer backlog = %v", v)
	}

	// Delivering some events shows as a delivery rate in the next sample:
	// the acks' per-second counts (two connections in one second, and one
	// second that is not over yet and not counted).
	exec(`UPDATE aa_outbox_event SET status='dispatched', dispatched_at=now() WHERE aggregate_id=$1`, aggs[3])
	exec(`INSERT INTO aa_consumer_throughput (second, consumer, backend, events)
		SELECT date_trunc('second', now()) - interval '3 seconds', c, b, 2 FROM unnest('{*,search}'::text[]) c, unnest('{1,2}'::int[]) b
		UNION ALL SELECT date_trunc('second', now()), '*', 1, 100`)
	s2, err := r.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s2.DeliveredRate != 0.4 || s2.Pending != 12 || s2.RateUntil.Sub(s2.RateFrom) != 10*time.Second {
		t.Errorf("after delivering 4: rate %.2f over %s, pending %d", s2.DeliveredRate, s2.RateUntil.Sub(s2.RateFrom), s2.Pending)
	}
	for _, c := range s2.Consumers {
		if want := map[string]float64{"search": 0.4}[c.Name]; c.DeliveredRate != want {
			t.Errorf("consumer %s delivered %.2f/s, want %.2f", c.Name, c.DeliveredRate, want)
		}
	}
}

// mustGauge gathers the registry and returns the one metric with the name and labels.
func mustGauge(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for k, v := range labels {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == k && lp.GetValue() == v {
						found = true
					}
				}
				if !found {
					continue next
				}
			}
			return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "x"}, func() float64 { return m.GetGauge().GetValue() })
		}
	}
	t.Fatalf("metric %s %v not found", name, labels)
	return nil
}
