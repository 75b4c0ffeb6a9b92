package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/outbox"
)

func customerEvent(id uuid.UUID, version int) outbox.Event {
	p, _ := json.Marshal(map[string]any{"entity_type": "customer", "entity_id": id, "version": version, "after": map[string]any{"status": "active"}})
	return outbox.Event{EventType: "entity.customer.updated", AggregateType: "DDM_ENTITY", AggregateID: &id, Payload: p}
}

func count(t *testing.T, db *testenv.DB, where string, args ...any) int {
	t.Helper()
	var n int
	if err := db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM aa_outbox_event WHERE "+where, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestWriteCommitsAndRollsBackWithBusinessChange(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE customer (id uuid PRIMARY KEY, name text)`); err != nil {
		t.Fatal(err)
	}
	w := outbox.NewWriter(outbox.WriterConfig{Schema: db.Schema})

	write := func(commit bool) uuid.UUID {
		id := uuid.New()
		err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO customer VALUES ($1, 'Ada')`, id); err != nil {
				return err
			}
			ids, err := w.Write(ctx, tx, customerEvent(id, 1), customerEvent(id, 2))
			if err != nil {
				return err
			}
			if len(ids) != 2 || ids[0] >= ids[1] {
				t.Errorf("ids %v: want two ascending ids", ids)
			}
			if !commit {
				return errors.New("rollback")
			}
			return nil
		})
		if commit && err != nil {
			t.Fatal(err)
		}
		return id
	}
	committed := write(true)
	rolledBack := write(false)

	if n := count(t, db, "aggregate_id = $1", committed); n != 2 {
		t.Errorf("committed: %d events, want 2", n)
	}
	if n := count(t, db, "aggregate_id = $1", rolledBack); n != 0 {
		t.Errorf("rolled back: %d events, want 0", n)
	}
	var st string
	var attempts, sv int
	var by string
	if err := db.Pool.QueryRow(ctx, `SELECT status::text, attempts, schema_version, created_by FROM aa_outbox_event WHERE aggregate_id = $1 LIMIT 1`, committed).Scan(&st, &attempts, &sv, &by); err != nil {
		t.Fatal(err)
	}
	if st != "pending" || attempts != 0 || sv != 1 || by == "" {
		t.Errorf("new row: status %s attempts %d schema_version %d created_by %q", st, attempts, sv, by)
	}
}

func TestWriteRejectsInvalidEventsAndWritesNothing(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	w := outbox.NewWriter(outbox.WriterConfig{Schema: db.Schema})
	good := customerEvent(uuid.New(), 1)
	nilID := uuid.Nil
	cases := []struct {
		name  string
		mod   func(*outbox.Event)
		field string
	}{
		{"no event type", func(e *outbox.Event) { e.EventType = "" }, "event_type"},
		{"one segment", func(e *outbox.Event) { e.EventType = "customer" }, "event_type"},
		{"four segments", func(e *outbox.Event) { e.EventType = "a.b.c.d" }, "event_type"},
		{"upper case", func(e *outbox.Event) { e.EventType = "Entity.Customer.Updated" }, "event_type"},
		{"payload array", func(e *outbox.Event) { e.Payload = json.RawMessage(`[1]`) }, "payload"},
		{"payload invalid", func(e *outbox.Event) { e.Payload = json.RawMessage(`{"a":`) }, "payload"},
		{"payload missing", func(e *outbox.Event) { e.Payload = nil }, "payload"},
		{"schema version", func(e *outbox.Event) { e.SchemaVersion = -1 }, "schema_version"},
		{"aggregate type", func(e *outbox.Event) { e.AggregateType = "" }, "aggregate_type"},
		{"nil aggregate id", func(e *outbox.Event) { e.AggregateID = &nilID }, "aggregate_id"},
	}
	for _, tc := range cases {
		bad := good
		tc.mod(&bad)
		err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			_, err := w.Write(ctx, tx, good, bad)
			return err
		})
		var fe *outbox.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field || fe.Index != 1 {
			t.Errorf("%s: got %v, want a FieldError on %s of event 1", tc.name, err, tc.field)
		}
	}
	if n := count(t, db, "true"); n != 0 {
		t.Errorf("%d rows written, want none", n)
	}
}

// Two transactions on one aggregate: the second writer takes its id only after
// the first committed, so ids agree with commit order.
func TestConcurrentWritersGetIDsInCommitOrder(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	w := outbox.NewWriter(outbox.WriterConfig{Schema: db.Schema})
	agg := uuid.New()

	txA, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	idsA, err := w.Write(ctx, txA, customerEvent(agg, 1))
	if err != nil {
		t.Fatal(err)
	}

	// B starts while A holds the aggregate's lock; it must wait.
	type result struct {
		id  int64
		err error
	}
	done := make(chan result, 1)
	go func() {
		var id int64
		err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			ids, err := w.Write(ctx, tx, customerEvent(agg, 2))
			if err == nil {
				id = ids[0]
			}
			return err
		})
		done <- result{id, err}
	}()
	// Wait until B is blocked on the advisory lock, then check it has no id yet.
	testenv.Eventually(t, 10*time.Second, func() bool {
		var waiting bool
		db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted)`).Scan(&waiting)
		return waiting
	}, "second writer never waited on the aggregate lock")
	select {
	case r := <-done:
		t.Fatalf("second writer finished while the first held the lock: %+v", r)
	default:
	}
	// Something unrelated gets an id in between: B's id must still be larger.
	other := uuid.New()
	pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error { _, err := w.Write(ctx, tx, customerEvent(other, 1)); return err })
	if err := txA.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.id <= idsA[0] {
		t.Fatalf("B committed after A but got id %d <= %d", r.id, idsA[0])
	}
}

// Many concurrent writers on a few aggregates: per aggregate, the payload
// versions (taken under the lock, in commit order) increase with id.
func TestIDOrderEqualsCommitOrderUnderLoad(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	w := outbox.NewWriter(outbox.WriterConfig{Schema: db.Schema})
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE counter (id uuid PRIMARY KEY, v int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	aggs := make([]uuid.UUID, 4)
	for i := range aggs {
		aggs[i] = uuid.New()
		db.Pool.Exec(ctx, `INSERT INTO counter VALUES ($1, 0)`, aggs[i])
	}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				agg := aggs[(g+i)%len(aggs)]
				err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
					// The outbox write comes first, the business row lock after:
					// the version is read under the aggregate lock.
					if _, err := w.Write(ctx, tx, outbox.Event{EventType: "entity.counter.bumped", AggregateType: "COUNTER", AggregateID: &agg, Payload: json.RawMessage(`{"placeholder":true}`)}); err != nil {
						return err
					}
					var v int
					if err := tx.QueryRow(ctx, `UPDATE counter SET v = v + 1 WHERE id = $1 RETURNING v`, agg).Scan(&v); err != nil {
						return err
					}
					_, err := tx.Exec(ctx, `UPDATE aa_outbox_event SET payload = jsonb_build_object('version', $2::int) WHERE id = (SELECT max(id) FROM aa_outbox_event WHERE aggregate_id = $1)`, agg, v)
					return err
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	var bad int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM (
		SELECT (payload->>'version')::int AS v, lag((payload->>'version')::int) OVER (PARTITION BY aggregate_id ORDER BY id) AS prev
		FROM aa_outbox_event) s WHERE v <> prev + 1`).Scan(&bad); err != nil {
		t.Fatal(err)
	}
	if bad != 0 {
		t.Fatalf("%d events whose version does not follow the previous id's", bad)
	}
	if n := count(t, db, "true"); n != 200 {
		t.Fatalf("%d events, want 200", n)
	}
}

// Nullable ids are written as given: set ones as themselves, unset ones NULL.
func TestWriteKeepsNullIDsNull(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	w := outbox.NewWriter(outbox.WriterConfig{Schema: db.Schema})
	tenant, corr, agg := uuid.New(), uuid.New(), uuid.New()
	set := customerEvent(agg, 1)
	set.TenantID, set.CorrelationID = &tenant, &corr
	unset := customerEvent(agg, 2)
	unset.AggregateID = nil
	var ids []int64
	if err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) (err error) {
		ids, err = w.Write(ctx, tx, set, unset)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for i, want := range [][3]*uuid.UUID{{&tenant, &agg, &corr}, {nil, nil, nil}} {
		var got [3]*uuid.UUID
		if err := db.Pool.QueryRow(ctx, `SELECT tenant_id, aggregate_id, correlation_id FROM aa_outbox_event WHERE id = $1`, ids[i]).Scan(&got[0], &got[1], &got[2]); err != nil {
			t.Fatal(err)
		}
		for j := range got {
			if (got[j] == nil) != (want[j] == nil) || (got[j] != nil && *got[j] != *want[j]) {
				t.Errorf("event %d column %d: got %v, want %v", i, j, got[j], want[j])
			}
		}
	}
}
