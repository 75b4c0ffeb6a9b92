package relay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/delivery"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/relay"
)

// keeper records a copy of every event it is handed.
type keeper struct {
	mu     sync.Mutex
	events map[int64]outbox.Event
}

func (k *keeper) Name() string { return "keeper" }

func (k *keeper) Deliver(_ context.Context, events []*outbox.Event) []delivery.Outcome {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]delivery.Outcome, len(events))
	for i, e := range events {
		k.events[e.ID] = *e
		out[i] = delivery.Ok()
	}
	return out
}

// The relay hands every column of an event as the outbox holds it: NULLs
// and values, uuids, texts, times, a retried event's attempts and error,
// across more rows than one claim's first allocation and the scan's uuid
// slabs hold, so that no row shares (or is overwritten through) another's
// memory.
func TestHandsEveryColumnOfTheEvent(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	tenant, corr := uuid.New(), uuid.New()
	var evs []outbox.Event
	for i := range 700 {
		agg := uuid.New()
		e := outbox.Event{EventType: fmt.Sprintf("entity.customer.t%d", i%5), AggregateType: fmt.Sprintf("AGG_%d", i%3),
			Payload: json.RawMessage(fmt.Sprintf(`{"n": %d, "version": 1, "name": "c%d"}`, i, i))}
		if i%4 != 0 {
			e.AggregateID = &agg
		}
		if i%2 == 0 {
			e.TenantID = &tenant
		}
		if i%3 == 0 {
			e.CorrelationID = &corr
		}
		evs = append(evs, e)
	}
	write(t, db, evs...)
	// Columns the writer leaves at their defaults, set as other producers
	// and a retry would.
	var audit int64
	if err := db.Pool.QueryRow(ctx, `INSERT INTO aa_audit_log (action) VALUES ('test') RETURNING id`).Scan(&audit); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE aa_outbox_event SET created_by = 'producer-' || (id % 7), audit_log_id = CASE WHEN id % 5 = 0 THEN $1::bigint END,
		attempts = CASE WHEN id % 6 = 0 THEN 2 ELSE 0 END, last_error = CASE WHEN id % 6 = 0 THEN 'hook: HTTP 503 on ' || id END,
		available_at = created_at - interval '1 second'`, audit); err != nil {
		t.Fatal(err)
	}
	want := map[int64]outbox.Event{}
	rows, err := db.Pool.Query(ctx, `SELECT id, tenant_id, event_type, schema_version, aggregate_type, aggregate_id, audit_log_id,
		correlation_id, payload, attempts, last_error, available_at, created_at, created_by FROM aa_outbox_event`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var e outbox.Event
		var payload []byte
		if err := rows.Scan(&e.ID, &e.TenantID, &e.EventType, &e.SchemaVersion, &e.AggregateType, &e.AggregateID, &e.AuditLogID,
			&e.CorrelationID, &payload, &e.Attempts, &e.LastError, &e.AvailableAt, &e.CreatedAt, &e.CreatedBy); err != nil {
			t.Fatal(err)
		}
		e.Payload, e.Status = payload, outbox.StatusPending
		want[e.ID] = e
	}
	if rows.Err() != nil || len(want) != len(evs) {
		t.Fatalf("read %d of %d events: %v", len(want), len(evs), rows.Err())
	}

	k := &keeper{events: map[int64]outbox.Event{}}
	cfg := fast()
	cfg.BatchSize = 300 // claims of up to 4 × 300 rows, past the first 256
	cfg.Routes = []relay.Route{{Consumer: k, Match: func(string, string) bool { return true }}}
	start(t, db, cfg)
	testenv.Eventually(t, 30*time.Second, func() bool { return countStatus(t, db, "pending") == 0 }, "every event delivered")

	k.mu.Lock()
	defer k.mu.Unlock()
	bad := 0
	for id, w := range want {
		got, ok := k.events[id]
		if !ok {
			t.Errorf("event %d was not handed", id)
			bad++
		} else if !reflect.DeepEqual(got, w) {
			t.Errorf("event %d handed as\n  %+v\nthe outbox holds\n  %+v", id, got, w)
			bad++
		}
		if bad > 5 {
			t.Fatal("too many differences")
		}
	}
}
