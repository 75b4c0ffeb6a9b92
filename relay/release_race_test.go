package relay

import (
	"context"
	"testing"
	"time"

	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/outbox"
)

// TestReleaseAfterAConcurrentAckLeavesNoOrphan stages the race that left an
// outbox row held with no held delivery row (the orphans the sweep logs as
// a bug). An ack records that the other consumer has event 1 and that hook,
// paused, still owes it: hook's delivery row stays held, so the outbox row
// becomes held too. Meanwhile another relay resumes hook, and its release
// waits for the ack's lock on hook's row. Its statement began before the
// ack committed: read with that statement's snapshot the outbox row was
// still available, so a release that chose the outbox rows to free by
// "available_at is the held time" skipped it and freed only the delivery
// row, leaving the outbox row held for no consumer until the sweep (and,
// before the held-row rule, letting hook's later events overtake it).
func TestReleaseAfterAConcurrentAckLeavesNoOrphan(t *testing.T) {
	db := testenv.NewDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	q := newQueries(db.Schema, 8, 100, 100)

	var id int64
	if err := db.Pool.QueryRow(ctx, `INSERT INTO aa_outbox_event (event_type, aggregate_type, aggregate_id, payload)
VALUES ('entity.customer.updated', 'DDM_ENTITY', gen_random_uuid(), '{"version": 1}') RETURNING id`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	// The consumers went different ways: search may take event 1 now, hook
	// is paused and its row held; the outbox row is available (search).
	if _, err := db.Pool.Exec(ctx, `INSERT INTO aa_outbox_delivery (event_id, consumer, aggregate_type, aggregate_id, state, available_at)
SELECT id, c, aggregate_type, aggregate_id, 'pending', CASE WHEN c = 'hook' THEN `+outbox.HeldSQL+` ELSE now() END
FROM aa_outbox_event, unnest(ARRAY['hook', 'search']) c WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}

	// The ack (as ackSQL writes it): search has event 1, hook's row is
	// written again held, the outbox row is held. Not committed yet.
	ack, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ack.Rollback(context.Background())
	for _, stmt := range []string{
		`UPDATE aa_outbox_delivery SET state = 'done', delivered_at = now(), updated_at = now() WHERE event_id = $1 AND consumer = 'search'`,
		`UPDATE aa_outbox_delivery SET available_at = ` + outbox.HeldSQL + `, updated_at = now() WHERE event_id = $1 AND consumer = 'hook'`,
		`UPDATE aa_outbox_event SET available_at = ` + outbox.HeldSQL + `, attempts = attempts + 1 WHERE id = $1`,
	} {
		if _, err := ack.Exec(ctx, stmt, id); err != nil {
			t.Fatal(err)
		}
	}

	// The release of hook's held rows, from another connection: it waits
	// for the ack's lock on hook's row.
	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	var pid int32
	if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	type result struct {
		n   int
		err error
	}
	released := make(chan result, 1)
	go func() {
		var r result
		r.err = conn.QueryRow(ctx, q.releaseHeld, "hook", 100).Scan(&r.n)
		released <- r
	}()
	testenv.Eventually(t, 20*time.Second, func() bool {
		var waiting bool
		err := db.Pool.QueryRow(ctx, `SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&waiting)
		return err == nil && waiting
	}, "the release waits for the ack's lock")
	if err := ack.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-released
	if r.err != nil || r.n != 1 {
		t.Fatalf("release: %d rows, %v; want hook's one row", r.n, r.err)
	}

	var outboxHeld, hookHeld bool
	if err := db.Pool.QueryRow(ctx, `SELECT e.available_at = `+outbox.HeldSQL+`, d.available_at = `+outbox.HeldSQL+`
FROM aa_outbox_event e JOIN aa_outbox_delivery d ON d.event_id = e.id AND d.consumer = 'hook' WHERE e.id = $1`, id).Scan(&outboxHeld, &hookHeld); err != nil {
		t.Fatal(err)
	}
	if hookHeld {
		t.Fatal("hook's row is still held after the release")
	}
	if outboxHeld {
		t.Fatal("the outbox row stayed held while no delivery row holds it: the release read it with a snapshot from before the ack")
	}

	// An event that search retries later and hook may have once released:
	// its outbox row is available now (its first pending consumer is), and
	// search's row keeps its own time.
	var retried int64
	if err := db.Pool.QueryRow(ctx, `WITH e AS (
	INSERT INTO aa_outbox_event (event_type, aggregate_type, aggregate_id, payload, available_at)
	VALUES ('entity.customer.updated', 'DDM_ENTITY', gen_random_uuid(), '{"version": 1}', now() + interval '1 hour') RETURNING *)
INSERT INTO aa_outbox_delivery (event_id, consumer, aggregate_type, aggregate_id, state, available_at)
SELECT id, c, aggregate_type, aggregate_id, 'pending', CASE WHEN c = 'hook' THEN `+outbox.HeldSQL+` ELSE now() + interval '1 hour' END
FROM e, unnest(ARRAY['hook', 'search']) c RETURNING event_id`).Scan(&retried); err != nil {
		t.Fatal(err)
	}
	if err := db.Pool.QueryRow(ctx, q.releaseHeld, "hook", 100).Scan(&r.n); err != nil || r.n != 1 {
		t.Fatalf("release: %d rows, %v", r.n, err)
	}
	var outboxNow, searchLater bool
	if err := db.Pool.QueryRow(ctx, `SELECT e.available_at <= now(), d.available_at > now()
FROM aa_outbox_event e JOIN aa_outbox_delivery d ON d.event_id = e.id AND d.consumer = 'search' WHERE e.id = $1`, retried).Scan(&outboxNow, &searchLater); err != nil {
		t.Fatal(err)
	}
	if !outboxNow || !searchLater {
		t.Fatalf("after hook's release: outbox row available now %v (want true), search's row still later %v (want true)", outboxNow, searchLater)
	}
}
