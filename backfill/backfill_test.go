package backfill_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/backfill"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/outbox"
)

// customerSource is the source of the tests: customer rows of the test's
// schema as entity.customer.snapshot events.
func customerSource(schema string) backfill.Source {
	return backfill.Source{
		Name: "customers",
		Query: `SELECT c.id AS aggregate_id, 'entity.customer.snapshot' AS event_type, c.tenant_id,
       jsonb_build_object('entity_type', 'customer', 'entity_id', c.id, 'version', c.version,
                          'after', jsonb_build_object('name', c.name)) AS payload
FROM ` + schema + `.customer c`,
		ChunkSize: 100,
	}
}

func seedCustomers(t *testing.T, db *testenv.DB, n int) {
	t.Helper()
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE customer (id uuid PRIMARY KEY, tenant_id uuid, name text NOT NULL, version bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO customer SELECT gen_random_uuid(), NULL, 'customer ' || g, 1 FROM generate_series(1, $1) g`, n); err != nil {
		t.Fatal(err)
	}
}

func TestBackfillWritesOneSnapshotPerRowAndResumes(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	seedCustomers(t, db, 1050)
	src := customerSource(db.Schema)

	// A run interrupted after three chunks…
	runCtx, cancel := context.WithCancel(ctx)
	chunks := 0
	_, err := backfill.Run(runCtx, backfill.Config{Pool: db.Pool, Schema: db.Schema, Source: src, OnProgress: func(p backfill.Progress) {
		if p.Chunks > int64(chunks) {
			chunks = int(p.Chunks)
			if chunks == 3 {
				cancel()
			}
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted run: %v", err)
	}
	jobs, err := backfill.List(ctx, db.Pool, "customers", 5, time.Minute)
	if err != nil || len(jobs) != 1 || jobs[0].State != backfill.StateInterrupted || jobs[0].Progress.Rows != 300 {
		t.Fatalf("after the interrupt: %+v %v", jobs, err)
	}
	// …is resumed by the next one, which reads no chunk twice.
	res, err := backfill.Run(ctx, backfill.Config{Pool: db.Pool, Schema: db.Schema, Source: src})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Resumed || res.Rows != 1050 || res.Chunks != 11 {
		t.Fatalf("resumed run: %+v", res)
	}
	var events, distinct, wrongType int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT aggregate_id), count(*) FILTER (WHERE event_type <> 'entity.customer.snapshot' OR correlation_id IS NULL)
FROM aa_outbox_event`).Scan(&events, &distinct, &wrongType); err != nil {
		t.Fatal(err)
	}
	if events != 1050 || distinct != 1050 || wrongType != 0 {
		t.Fatalf("events %d, aggregates %d, wrong %d; want 1050, 1050, 0", events, distinct, wrongType)
	}
	jobs, _ = backfill.List(ctx, db.Pool, "customers", 5, time.Minute)
	if jobs[0].State != backfill.StateSucceeded || jobs[0].Progress.Phase != backfill.PhaseDone {
		t.Fatalf("finished job: %+v", jobs[0])
	}
	latest, err := backfill.Latest(ctx, db.Pool, time.Minute)
	if err != nil || len(latest) != 1 || latest[0].ID != jobs[0].ID || latest[0].State != backfill.StateSucceeded {
		t.Fatalf("latest jobs: %+v %v", latest, err)
	}
}

func TestBackfillBadRowStopsWithItsKeyAndLosesNothing(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	seedCustomers(t, db, 250)
	src := customerSource(db.Schema)
	// Row 150 in key order yields a bad event type.
	src.Query = strings.Replace(src.Query, `'entity.customer.snapshot' AS event_type`,
		`CASE WHEN c.name = 'customer 150' THEN 'Customer Snapshot' ELSE 'entity.customer.snapshot' END AS event_type`, 1)
	var badID uuid.UUID
	if err := db.Pool.QueryRow(ctx, `SELECT id FROM customer WHERE name = 'customer 150'`).Scan(&badID); err != nil {
		t.Fatal(err)
	}
	_, err := backfill.Run(ctx, backfill.Config{Pool: db.Pool, Schema: db.Schema, Source: src})
	var rowErr *backfill.RowError
	if !errors.As(err, &rowErr) || rowErr.Key != badID.String() || !strings.Contains(err.Error(), "event_type") {
		t.Fatalf("want a RowError naming key %s and event_type, got %v", badID, err)
	}
	// Every chunk before the bad row is written, the bad row's chunk is not.
	var events, before int
	_ = db.Pool.QueryRow(ctx, `SELECT count(*) FROM aa_outbox_event`).Scan(&events)
	_ = db.Pool.QueryRow(ctx, `SELECT count(*) FROM customer WHERE id < $1`, badID).Scan(&before)
	if want := before / 100 * 100; events != want {
		t.Fatalf("%d events written, want the %d of the chunks before the bad row", events, want)
	}
	jobs, _ := backfill.List(ctx, db.Pool, "customers", 1, time.Minute)
	if len(jobs) != 1 || jobs[0].State != backfill.StateInterrupted || !strings.Contains(jobs[0].Progress.Error, badID.String()) {
		t.Fatalf("job after a bad row: %+v", jobs)
	}
}

func TestOpenNamesTheMissingColumn(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	seedCustomers(t, db, 1)
	src := customerSource(db.Schema)
	src.Query = `SELECT c.id AS aggregate_id, c.name AS payload FROM ` + db.Schema + `.customer c`
	_, err := backfill.Open(context.Background(), db.Pool, src)
	if err == nil || !strings.Contains(err.Error(), "backfill source customers: query: yields no column event_type") {
		t.Fatalf("got %v", err)
	}
	src.Key = "nope"
	src.Query = customerSource(db.Schema).Query
	if _, err := backfill.Open(context.Background(), db.Pool, src); err == nil || !strings.Contains(err.Error(), "key: the query yields no column nope") {
		t.Fatalf("got %v", err)
	}
}

// A change committed by a producer while a chunk holds its aggregates'
// locks comes after the snapshot in id order, and a change committed before
// the lock is in the snapshot: the snapshot never carries a state older
// than an event before it.
func TestSnapshotOrdersWithProducersThroughTheLock(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	seedCustomers(t, db, 1)
	var id uuid.UUID
	if err := db.Pool.QueryRow(ctx, `SELECT id FROM customer`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	w := outbox.NewWriter(outbox.WriterConfig{Schema: db.Schema})
	// A producer updates the row (version 2) and holds its lock, uncommitted.
	ptx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ptx.Rollback(ctx) //nolint:errcheck
	if _, err := ptx.Exec(ctx, `UPDATE customer SET name = 'renamed', version = 2 WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	p, _ := json.Marshal(map[string]any{"version": 2, "after": map[string]any{"name": "renamed"}})
	if _, err := w.Write(ctx, ptx, outbox.Event{EventType: "entity.customer.updated", AggregateType: "DDM_ENTITY", AggregateID: &id, Payload: p}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := backfill.Run(ctx, backfill.Config{Pool: db.Pool, Schema: db.Schema, Source: customerSource(db.Schema)})
		done <- err
	}()
	// The backfill waits for the producer's lock; once it commits, the
	// snapshot reads version 2 and comes after the update.
	testenv.Eventually(t, 30*time.Second, func() bool {
		var waiting bool
		_ = db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted)`).Scan(&waiting)
		return waiting
	}, "the backfill waits for the producer's aggregate lock")
	select {
	case err := <-done:
		t.Fatalf("the backfill did not wait for the producer's lock: %v", err)
	default:
	}
	if err := ptx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	rows, err := db.Pool.Query(ctx, `SELECT event_type, (payload->>'version')::int FROM aa_outbox_event ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var et string
		var v int
		_ = rows.Scan(&et, &v)
		got = append(got, et+"@"+string(rune('0'+v)))
	}
	if strings.Join(got, " ") != "entity.customer.updated@2 entity.customer.snapshot@2" {
		t.Fatalf("events in id order: %v", got)
	}
}
