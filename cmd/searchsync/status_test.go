package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/searchsync/searchsync/dashboard/dashboardtest"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/lag"
	"github.com/searchsync/searchsync/outbox"
)

func TestStatusJSONAgreesWithTheDatabase(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	w := outbox.NewWriter(outbox.WriterConfig{Schema: db.Schema})
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		var evs []outbox.Event
		for i := 0; i < 30; i++ {
			id := uuid.New()
			for v := 1; v <= 2; v++ {
				evs = append(evs, outbox.Event{EventType: "entity.customer.updated", AggregateType: "DDM_ENTITY", AggregateID: &id,
					Payload: json.RawMessage(fmt.Sprintf(`{"version":%d}`, v))})
			}
		}
		_, err := w.Write(ctx, tx, evs...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	db.Pool.Exec(ctx, `UPDATE aa_outbox_event SET status='dispatched', dispatched_at=now() WHERE id <= 20`)
	db.Pool.Exec(ctx, `UPDATE aa_outbox_event SET status='failed', attempts=3, last_error='hook: 400' WHERE id IN (21, 23)`)

	cfg := writeConfig(t, fmt.Sprintf(`
database: {url: %q, schema: %s}
consumers:
  - {name: hook, type: webhook, webhook: {url: "http://127.0.0.1:1/x", secret: s}}
routes:
  - {consumer: hook, event_types: ["entity.customer.*"]}
`, db.URL, db.Schema))
	out, stderr, code := runCLI(t, []string{"DATABASE_URL="}, "-c", cfg, "status", "--json")
	if code != 0 {
		t.Fatalf("status exited %d: %s", code, stderr)
	}
	var s lag.Snapshot
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	var pending, failed, blocked int64
	var oldest float64
	db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status='pending'), count(*) FILTER (WHERE status='failed'),
		coalesce(extract(epoch FROM now() - min(created_at) FILTER (WHERE status='pending')), 0) FROM aa_outbox_event`).Scan(&pending, &failed, &oldest)
	db.Pool.QueryRow(ctx, `SELECT count(DISTINCT aggregate_id) FROM aa_outbox_event WHERE status='failed'`).Scan(&blocked)
	if s.Pending != pending || s.Failed != failed || s.BlockedCount != blocked {
		t.Errorf("status says pending %d failed %d blocked %d; database says %d %d %d", s.Pending, s.Failed, s.BlockedCount, pending, failed, blocked)
	}
	if d := s.OldestPendingAge - oldest; d < -2 || d > 2 {
		t.Errorf("oldest pending age: status %.2f, database %.2f", s.OldestPendingAge, oldest)
	}
	if len(s.Consumers) != 1 || s.Consumers[0].Pending != pending || s.Consumers[0].Failed != failed {
		t.Errorf("consumer figures: %+v", s.Consumers)
	}

	// The table form names the same figures.
	out, _, code = runCLI(t, []string{"DATABASE_URL="}, "-c", cfg, "status")
	if code != 0 || !contains(out, fmt.Sprintf("%d pending", pending), fmt.Sprintf("%d failed", failed), "hook") {
		t.Errorf("status table:\n%s", out)
	}
}

func contains(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// TestStatusSeparatesLagFromWhatHoldsIt: one poison head and a paused
// webhook; status shows the search consumer's deliverable lag at the fresh
// events' age, the poison as blocked{failed} and the webhook's backlog as
// paused, in JSON and in the table.
func TestStatusSeparatesLagFromWhatHoldsIt(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	dashboardtest.Stuck{PoisonError: "search: mapper_parsing_exception: failed to parse field [age] of type [long]", Fresh: 5, FreshAge: "4 seconds",
		Paused: "hook", PausedFor: "3 minutes", PauseReason: `Post "https://user:pw@hooks.example.net/in": dial tcp: connection refused`, Probes: 7}.Seed(t, db)

	cfg := writeConfig(t, fmt.Sprintf(`
database: {url: %q, schema: %s}
consumers:
  - {name: hook, type: webhook, webhook: {url: "http://127.0.0.1:1/x", secret: s}}
  - {name: search, type: search, search: {indexes: [customers]}}
routes:
  - {consumer: hook, event_types: ["entity.customer.*"]}
  - {consumer: search, event_types: ["entity.customer.*"]}
`, db.URL, db.Schema))
	// An event a relay delivered after a later one of its aggregate.
	if _, err := db.Pool.Exec(t.Context(), `INSERT INTO aa_outbox_overtaken (event_id, aggregate_type, aggregate_id, after_event_id, instance)
		VALUES (41, 'DDM_ENTITY', '0b5e0a2c-5c1e-4d7e-9a3b-1d2f3e4a5b6c', 42, 'relay-1')`); err != nil {
		t.Fatal(err)
	}
	out, stderr, code := runCLI(t, []string{"DATABASE_URL="}, "-c", cfg, "status", "--json")
	if code != 0 {
		t.Fatalf("status exited %d: %s", code, stderr)
	}
	var s lag.Snapshot
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	byName := map[string]lag.ConsumerLag{}
	for _, c := range s.Consumers {
		byName[c.Name] = c
	}
	search, hook := byName["search"], byName["hook"]
	if search.DeliverableLag < 3 || search.DeliverableLag > 15 || search.Deliverable != 5 || search.Pending != 6 {
		t.Errorf("search: deliverable lag %.1f s, deliverable %d, backlog %d; want about 4 s, 5, 6", search.DeliverableLag, search.Deliverable, search.Pending)
	}
	if f := search.Blocked.Failed; f.Aggregates != 1 || f.Events != 1 || f.Age < 7100 || !strings.Contains(f.Why, "mapper_parsing_exception") {
		t.Errorf("search blocked{failed}: %+v", f)
	}
	if search.OldestPendingAge < 7100 {
		t.Errorf("search oldest pending %.1f s: the blocked event is still the oldest", search.OldestPendingAge)
	}
	if hook.State != "paused" || hook.Paused == nil || hook.Paused.Probes != 7 || hook.Deliverable != 0 || hook.Blocked.Paused.Events != 5 || hook.Blocked.Paused.Aggregates != 5 {
		t.Errorf("hook: %+v paused %+v", hook, hook.Paused)
	}
	if strings.Contains(out, "pw@") {
		t.Errorf("status --json shows the credentials of the pause reason:\n%s", out)
	}
	if o := s.OutOfOrder; o.Last24h != 1 || o.Latest == nil || o.Latest.EventID != 41 || o.Latest.AfterEventID != 42 {
		t.Errorf("out of order: %+v %+v, want event 41 after 42", o, o.Latest)
	}
	// No relay runs: down, and each consumer too.
	if s.Health.State != lag.HealthDown || search.Health != lag.HealthDown || hook.Health != lag.HealthDown {
		t.Errorf("health %+v, search %s, hook %s; want down (no live relay)", s.Health, search.Health, hook.Health)
	}
	if s.DeliverableLag != search.DeliverableLag {
		t.Errorf("snapshot deliverable lag %.1f, search %.1f", s.DeliverableLag, search.DeliverableLag)
	}

	out, _, code = runCLI(t, []string{"DATABASE_URL="}, "-c", cfg, "status")
	if code != 0 || !contains(out, "deliverable lag", "HELD BACK", "paused 3m", "mapper_parsing_exception", "connection refused (7 failed probes)",
		"out of id order: 1 events", "NO LIVE RELAY: no relay has run against this schema yet", "no live relay", "event 41 of DDM_ENTITY/0b5e0a2c-5c1e-4d7e-9a3b-1d2f3e4a5b6c after event 42",
		"health: down\n  - no live relay: nothing is delivered") {
		t.Errorf("status table:\n%s", out)
	}
	t.Logf("status:\n%s", out)
}
