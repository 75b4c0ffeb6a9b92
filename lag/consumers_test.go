package lag_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/lag"
	"github.com/searchsync/searchsync/routing"
)

// outboxFixture writes events and delivery rows by SQL, the way the relay
// leaves them, and reads snapshots of them.
type outboxFixture struct {
	t   *testing.T
	db  *testenv.DB
	ctx context.Context
	r   *lag.Reader
}

// Two consumers of customer events: the search index and a webhook.
func newFixture(t *testing.T) *outboxFixture {
	t.Helper()
	db := testenv.NewDB(t)
	consumers := []lag.Consumer{
		{Name: "search", Type: "search", Indexes: []string{"customers"}},
		{Name: "crm-hook", Type: "webhook"},
	}
	routes := &routing.Table{Routes: []routing.Route{
		{Consumer: "search", EventTypes: []string{"entity.customer.*"}},
		{Consumer: "crm-hook", EventTypes: []string{"entity.customer.*"}},
	}}
	return &outboxFixture{t: t, db: db, ctx: context.Background(), r: lag.NewReader(db.Pool, db.Schema, consumers, routes)}
}

func (f *outboxFixture) exec(sql string, args ...any) {
	f.t.Helper()
	if _, err := f.db.Pool.Exec(f.ctx, sql, args...); err != nil {
		f.t.Fatalf("%s: %v", sql, err)
	}
}

// liveRelay records a relay instance whose heartbeat is fresh.
func (f *outboxFixture) liveRelay(id string) {
	f.t.Helper()
	f.exec(`INSERT INTO aa_relay_instance (id, hostname, pid, partitions, expires_at) VALUES ($1, 'host', 1, 32, now() + interval '15 seconds')`, id)
}

// TestNoLiveRelay: with no relay heartbeating, every consumer that is not
// paused says "no live relay" instead of running, and the snapshot has the
// last heartbeat of the instance that stopped.
func TestNoLiveRelay(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := uuid.New()
	f.event(&id, "5 seconds", "pending", "")
	s := f.read()
	if s.Relays.Live != 0 || s.Relays.LastHeartbeat != nil {
		t.Errorf("relays %+v, want none ever", s.Relays)
	}
	for _, c := range s.Consumers {
		if c.State != lag.StateNoRelay {
			t.Errorf("%s: state %q, want %q", c.Name, c.State, lag.StateNoRelay)
		}
	}
	// A relay that stopped heartbeating a minute ago.
	f.exec(`INSERT INTO aa_relay_instance (id, hostname, pid, partitions, heartbeat_at, expires_at) VALUES ('gone', 'host', 1, 32, now() - interval '1 minute', now() - interval '45 seconds')`)
	s = f.read()
	if s.Relays.Live != 0 || s.Relays.LastHeartbeat == nil || time.Since(*s.Relays.LastHeartbeat) < 50*time.Second {
		t.Errorf("relays %+v, want none live, the last heartbeat a minute ago", s.Relays)
	}
	f.liveRelay("relay-2")
	if s = f.read(); s.Relays.Live != 1 || consumer(t, s, "search").State != "running" {
		t.Errorf("with a live relay: %+v, search %q", s.Relays, consumer(t, s, "search").State)
	}
}

// event inserts one customer event of agg written age ago (a Postgres
// interval), with the given status, and returns its id. extra is SQL for the
// remaining columns: "attempts = 3, last_error = '…'".
func (f *outboxFixture) event(agg *uuid.UUID, age, status, extra string) int64 {
	f.t.Helper()
	var id int64
	err := f.db.Pool.QueryRow(f.ctx, `
		INSERT INTO aa_outbox_event (event_type, aggregate_type, aggregate_id, payload, status, created_at, available_at)
		VALUES ('entity.customer.updated', 'DDM_ENTITY', $1, '{"version":1}', $2, now() - $3::interval, now() - $3::interval)
		RETURNING id`, agg, status, age).Scan(&id)
	if err != nil {
		f.t.Fatal(err)
	}
	if extra != "" {
		f.exec(`UPDATE aa_outbox_event SET `+extra+` WHERE id = $1`, id)
	}
	return id
}

// delivery writes the delivery row of one consumer for event id.
func (f *outboxFixture) delivery(id int64, consumer, state, extra string) {
	f.t.Helper()
	f.exec(`INSERT INTO aa_outbox_delivery (event_id, consumer, aggregate_type, aggregate_id, state, delivered_at)
		SELECT id, $2, aggregate_type, aggregate_id, $3, CASE WHEN $3 = 'done' THEN now() END FROM aa_outbox_event WHERE id = $1`, id, consumer, state)
	if extra != "" {
		f.exec(`UPDATE aa_outbox_delivery SET `+extra+` WHERE event_id = $1 AND consumer = $2`, id, consumer)
	}
}

func (f *outboxFixture) read() *lag.Snapshot {
	f.t.Helper()
	s, err := f.r.Read(f.ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	// Every pending event a consumer owes is deliverable or held by a cause.
	for _, c := range s.Consumers {
		b := c.Blocked
		if sum := c.Deliverable + b.Failed.Events + b.BackingOff.Events + b.Paused.Events; sum != c.Pending {
			f.t.Errorf("%s: deliverable %d + blocked %d/%d/%d = %d, pending %d", c.Name, c.Deliverable,
				b.Failed.Events, b.BackingOff.Events, b.Paused.Events, sum, c.Pending)
		}
	}
	return s
}

func consumer(t *testing.T, s *lag.Snapshot, name string) lag.ConsumerLag {
	t.Helper()
	for _, c := range s.Consumers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no consumer %s in %+v", name, s.Consumers)
	return lag.ConsumerLag{}
}

func near(got, want, tol float64) bool { return got >= want-tol && got <= want+tol }

// One poison head an hour old among fresh events: the deliverable lag stays
// at the fresh events' age, and the poison shows as blocked{cause=failed}.
func TestLagPoisonHeadDoesNotInflateDeliverableLag(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	poisoned := uuid.New()
	head := f.event(&poisoned, "1 hour", "failed", `attempts = 1, last_error = 'search: mapper_parsing_exception: failed to parse field [age]'`)
	for range 3 {
		f.event(&poisoned, "59 minutes", "pending", "")
	}
	for range 10 {
		id := uuid.New()
		f.event(&id, "5 seconds", "pending", "")
	}
	f.event(nil, "3 seconds", "pending", "")
	f.liveRelay("relay-1")

	s := f.read()
	if s.Relays.Live != 1 {
		t.Errorf("live relays %d, want 1", s.Relays.Live)
	}
	if !near(s.OldestPendingAge, 3540, 30) {
		t.Errorf("oldest pending age %.1f, want the blocked events' 59 min", s.OldestPendingAge)
	}
	if !near(s.DeliverableLag, 5, 3) {
		t.Errorf("snapshot deliverable lag %.1f s, want the fresh events' 5 s", s.DeliverableLag)
	}
	for _, name := range []string{"search", "crm-hook"} {
		c := consumer(t, s, name)
		if !near(c.DeliverableLag, 5, 3) || c.Deliverable != 11 || c.Pending != 14 {
			t.Errorf("%s: deliverable lag %.1f s, deliverable %d, pending %d; want 5 s, 11, 14", name, c.DeliverableLag, c.Deliverable, c.Pending)
		}
		b := c.Blocked.Failed
		if b.Aggregates != 1 || b.Events != 3 || b.HeadID != head || !near(b.Age, 3600, 30) || !strings.HasPrefix(b.Why, "search: mapper_parsing_exception") {
			t.Errorf("%s: blocked{failed} = %+v, want 1 aggregate, 3 events, head %d an hour old", name, b, head)
		}
		if c.Blocked.BackingOff.Aggregates != 0 || c.Blocked.Paused.Aggregates != 0 || c.Failed != 1 || c.State != "running" {
			t.Errorf("%s: %+v", name, c)
		}
	}
	if s.BlockedCount != 1 || len(s.Blocked) != 1 || s.Blocked[0].Waiting != 3 || len(s.Blocked[0].Consumers) != 2 {
		t.Errorf("blocked heads: %d %+v", s.BlockedCount, s.Blocked)
	}

	reg := sample(t, f.r)
	for name, want := range map[string]float64{
		"searchsync_consumer_deliverable_lag_seconds": 5,
		"searchsync_index_deliverable_lag_seconds":    5,
		"searchsync_outbox_deliverable_lag_seconds":   5,
	} {
		if v := testutil.ToFloat64(mustGauge(t, reg, name, map[string]string{})); !near(v, want, 3) {
			t.Errorf("%s = %.1f, want about %.0f", name, v, want)
		}
	}
	if v := testutil.ToFloat64(mustGauge(t, reg, "searchsync_index_lag_seconds", map[string]string{"index": "customers"})); v < 3500 {
		t.Errorf("index_lag_seconds = %.1f: the oldest undelivered event is still reported", v)
	}
	for _, l := range []map[string]string{{"consumer": "search", "cause": "failed"}, {"consumer": "crm-hook", "cause": "failed"}} {
		if v := testutil.ToFloat64(mustGauge(t, reg, "searchsync_consumer_blocked_aggregates", l)); v != 1 {
			t.Errorf("consumer_blocked_aggregates%v = %v, want 1", l, v)
		}
		if v := testutil.ToFloat64(mustGauge(t, reg, "searchsync_consumer_blocked_since_seconds", l)); !near(v, 3600, 30) {
			t.Errorf("consumer_blocked_since_seconds%v = %v, want about 3600", l, v)
		}
	}
	if v := testutil.ToFloat64(mustGauge(t, reg, "searchsync_consumer_blocked_aggregates", map[string]string{"consumer": "search", "cause": "backing_off"})); v != 0 {
		t.Errorf("blocked{backing_off} = %v", v)
	}
	if v := testutil.ToFloat64(mustGauge(t, reg, "searchsync_index_blocked_aggregates", map[string]string{"index": "customers", "cause": "failed"})); v != 1 {
		t.Errorf("index_blocked_aggregates{failed} = %v", v)
	}
	if v := testutil.ToFloat64(mustGauge(t, reg, "searchsync_consumer_failed_events", map[string]string{"consumer": "crm-hook"})); v != 1 {
		t.Errorf("consumer_failed_events = %v", v)
	}
}

// Events whose consumers went different ways count for the consumer that
// still owes them only.
func TestLagSplitEventCountsForTheConsumerThatOwesIt(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	// Aggregate A: e1 went to search, the webhook backs off (for an hour);
	// e2 behind it has no rows yet: search may have it, the webhook not.
	a := uuid.New()
	e1 := f.event(&a, "2 minutes", "pending", `attempts = 2, available_at = now() + interval '1 hour', last_error = 'crm-hook: 500 Internal Server Error'`)
	f.delivery(e1, "search", "done", "")
	f.delivery(e1, "crm-hook", "pending", `attempts = 2, available_at = now() + interval '1 hour', last_error = '500 Internal Server Error'`)
	f.event(&a, "100 seconds", "pending", "")
	// Aggregate B: e3 went to search, the webhook may retry it now.
	b := uuid.New()
	e3 := f.event(&b, "30 seconds", "pending", `attempts = 1`)
	f.delivery(e3, "search", "done", "")
	f.delivery(e3, "crm-hook", "pending", `attempts = 1`)
	// Aggregate C: e4 parked for the webhook, search has it: failed.
	c := uuid.New()
	e4 := f.event(&c, "10 minutes", "failed", `attempts = 1, last_error = 'crm-hook: 400 Bad Request'`)
	f.delivery(e4, "search", "done", "")
	f.delivery(e4, "crm-hook", "failed", `attempts = 1, last_error = '400 Bad Request'`)
	e5 := f.event(&c, "9 minutes", "pending", "")
	// Aggregate D: a fresh event neither has.
	d := uuid.New()
	f.event(&d, "2 seconds", "pending", "")

	s := f.read()
	search := consumer(t, s, "search")
	// search: e2 (100 s), e5 (9 min, behind e4, which it has), the fresh one.
	if search.Deliverable != 3 || search.Pending != 3 || !near(search.DeliverableLag, 540, 10) {
		t.Errorf("search: deliverable %d pending %d lag %.1f; want 3, 3, 540 s", search.Deliverable, search.Pending, search.DeliverableLag)
	}
	if search.Blocked.Failed.Aggregates+search.Blocked.BackingOff.Aggregates != 0 || search.Failed != 0 {
		t.Errorf("search is held by the webhook's rows: %+v", search)
	}
	hook := consumer(t, s, "crm-hook")
	// crm-hook: e3 (retry due) and the fresh one; e1 backs off with e2
	// behind it; e4 parked with e5 behind it.
	if hook.Deliverable != 2 || !near(hook.DeliverableLag, 30, 5) || hook.Pending != 5 || hook.Failed != 1 {
		t.Errorf("crm-hook: deliverable %d lag %.1f pending %d failed %d; want 2, 30 s, 5, 1", hook.Deliverable, hook.DeliverableLag, hook.Pending, hook.Failed)
	}
	bo := hook.Blocked.BackingOff
	if bo.Aggregates != 1 || bo.Events != 2 || bo.HeadID != e1 || bo.Why != "500 Internal Server Error" || !near(bo.Age, 120, 10) {
		t.Errorf("crm-hook blocked{backing_off} = %+v", bo)
	}
	fa := hook.Blocked.Failed
	if fa.Aggregates != 1 || fa.Events != 1 || fa.HeadID != e4 || fa.Why != "400 Bad Request" {
		t.Errorf("crm-hook blocked{failed} = %+v", fa)
	}
	for _, bl := range s.Blocked {
		if bl.Consumer != "crm-hook" || len(bl.Consumers) != 1 || bl.Consumers[0] != "crm-hook" {
			t.Errorf("blocked head %+v should hold back crm-hook only", bl)
		}
	}

	// The webhook takes e3: its row is done, the event dispatched.
	f.exec(`UPDATE aa_outbox_event SET status = 'dispatched', dispatched_at = now() WHERE id = $1`, e3)
	f.exec(`DELETE FROM aa_outbox_delivery WHERE event_id = $1`, e3)
	if hook := consumer(t, f.read(), "crm-hook"); hook.Deliverable != 1 || !near(hook.DeliverableLag, 2, 3) {
		t.Errorf("after e3: crm-hook deliverable %d lag %.1f", hook.Deliverable, hook.DeliverableLag)
	}
	_ = e5
}

// A paused consumer's backlog is paused, not deliverable, and the other
// consumers' figures do not move.
func TestLagPausedConsumerBacklogIsPaused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for i := range 4 {
		id := uuid.New()
		for range i + 1 {
			f.event(&id, "20 seconds", "pending", "")
		}
	}
	f.event(nil, "15 seconds", "pending", "")
	// The webhook got the first event of one aggregate while search did
	// not yet: a split event the webhook is done with.
	var first int64
	f.db.Pool.QueryRow(f.ctx, `SELECT min(id) FROM aa_outbox_event`).Scan(&first)
	f.delivery(first, "crm-hook", "done", "")
	f.delivery(first, "search", "pending", "")
	before := consumer(t, f.read(), "search")

	f.exec(`INSERT INTO aa_outbox_consumer (consumer, state, paused_at, reason, probes, probe_at)
		VALUES ('crm-hook', 'paused', now() - interval '90 seconds',
		        'Post "https://ops:hunter2@hooks.example.net/crm?token=abc": dial tcp 10.0.0.7:443: connect: connection refused', 4, now() + interval '8 seconds')`)
	s := f.read()
	hook := consumer(t, s, "crm-hook")
	if hook.State != "paused" || hook.Paused == nil || hook.Paused.Probes != 4 || !near(hook.Paused.Age, 90, 5) {
		t.Fatalf("crm-hook pause: %s %+v", hook.State, hook.Paused)
	}
	if hook.Deliverable != 0 || hook.DeliverableLag != 0 {
		t.Errorf("paused crm-hook: deliverable %d lag %.1f, want 0", hook.Deliverable, hook.DeliverableLag)
	}
	p := hook.Blocked.Paused
	// 11 events of 4 aggregates and one without, less the one it has (the
	// only event of its aggregate).
	if p.Events != 10 || p.Aggregates != 4 || !near(p.Age, 90, 5) || !strings.Contains(p.Why, "connection refused") || strings.Contains(p.Why, "hunter2") {
		t.Errorf("crm-hook blocked{paused} = %+v, want 10 events of 4 aggregates, 90 s", p)
	}
	if search := consumer(t, s, "search"); search.Deliverable != before.Deliverable || search.Deliverable != 11 ||
		!near(search.DeliverableLag, 20, 3) || search.Paused != nil || search.Blocked.Paused.Events != 0 {
		t.Errorf("search moved while crm-hook is paused: before %+v, now %+v", before, search)
	}
	if !near(s.DeliverableLag, 20, 3) {
		t.Errorf("snapshot deliverable lag %.1f, want search's 20 s", s.DeliverableLag)
	}

	reg := sample(t, f.r)
	if v := testutil.ToFloat64(mustGauge(t, reg, "searchsync_consumer_paused", map[string]string{"consumer": "crm-hook"})); v != 1 {
		t.Errorf("consumer_paused{crm-hook} = %v", v)
	}
	if v := testutil.ToFloat64(mustGauge(t, reg, "searchsync_consumer_paused", map[string]string{"consumer": "search"})); v != 0 {
		t.Errorf("consumer_paused{search} = %v", v)
	}
	if v := testutil.ToFloat64(mustGauge(t, reg, "searchsync_consumer_blocked_aggregates", map[string]string{"consumer": "crm-hook", "cause": "paused"})); v != 4 {
		t.Errorf("consumer_blocked_aggregates{crm-hook,paused} = %v", v)
	}
	if v := testutil.ToFloat64(mustGauge(t, reg, "searchsync_consumer_deliverable_lag_seconds", map[string]string{"consumer": "crm-hook"})); v != 0 {
		t.Errorf("consumer_deliverable_lag_seconds{crm-hook} = %v", v)
	}
	reason := label(t, reg, "searchsync_consumer_pause_info", "crm-hook", "reason")
	if r := label(t, reg, "searchsync_consumer_pause_info", "search", "reason"); r != "" {
		t.Errorf("pause_info of the running consumer has reason %q", r)
	}
	if strings.Contains(reason, "hunter2") || strings.Contains(reason, "token") || strings.Contains(reason, "ops") || !strings.Contains(reason, "connection refused") {
		t.Errorf("pause_info reason %q", reason)
	}

	// The probe succeeds: the backlog is deliverable again.
	f.exec(`UPDATE aa_outbox_consumer SET state = 'running', paused_at = NULL, reason = NULL, probes = 0`)
	if hook := consumer(t, f.read(), "crm-hook"); hook.Deliverable != 10 || hook.Paused != nil || !near(hook.DeliverableLag, 20, 3) {
		t.Errorf("resumed crm-hook: %+v", hook)
	}
}

func TestLagRedact(t *testing.T) {
	for in, want := range map[string]string{
		`Post "https://u:p@h.example/x?sig=1": EOF`:      `Post "https://h.example/x": EOF`,
		`nats: authorization violation token=s3cr3t`:     `nats: authorization violation token=[redacted]`,
		`engine: 503 Service Unavailable`:                `engine: 503 Service Unavailable`,
		`http://h:9200/_bulk: Authorization: Basic YQ==`: `http://h:9200/_bulk: Authorization: [redacted]`,
	} {
		if got := lag.Redact(in, 200); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
	if got := lag.Redact(strings.Repeat("x", 300), 10); got != "xxxxxxxxx…" {
		t.Errorf("truncated: %q", got)
	}
}

// sample takes one sample and returns a registry with the collector over it.
func sample(t *testing.T, r *lag.Reader) *prometheus.Registry {
	t.Helper()
	smp := lag.NewSampler(r, lag.SamplerConfig{}, nil)
	if _, err := smp.Sample(context.Background()); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(lag.NewCollector(smp))
	return reg
}

// label returns the value of one label of a consumer's series of a metric.
func label(t *testing.T, reg *prometheus.Registry, name, consumer, key string) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			if v, ok := labels[key]; ok && labels["consumer"] == consumer {
				return v
			}
		}
	}
	t.Fatalf("no series of %s for %s with label %s", name, consumer, key)
	return ""
}
