package lag

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/migrations"
	"github.com/searchsync/searchsync/routing"
)

// BenchmarkLagExplainQueries seeds a busy outbox and prints EXPLAIN ANALYZE
// of every lag query and the time of whole snapshots (a measurement, so a
// benchmark: it runs only when asked for). SEARCHSYNC_LAG_PENDING sets the
// pending events, default 200000; SEARCHSYNC_LAG_SPLIT the events search has
// and the webhook not, default 5000; SEARCHSYNC_LAG_PAUSED=1 pauses the
// webhook:
//
//	go test ./lag -run '^$' -bench LagExplainQueries -benchtime 1x -v
func BenchmarkLagExplainQueries(t *testing.B) {
	pending, split := 200000, 5000
	if n, err := strconv.Atoi(os.Getenv("SEARCHSYNC_LAG_PENDING")); err == nil {
		pending = n
	}
	if n, err := strconv.Atoi(os.Getenv("SEARCHSYNC_LAG_SPLIT")); err == nil {
		split = n
	}
	ctx := context.Background()
	var db *testenv.DB
	if keep := os.Getenv("SEARCHSYNC_LAG_KEEP"); keep != "" {
		// Keep the seeded schema (named keep) for hand-made EXPLAINs.
		url := testenv.DatabaseURL(t)
		m, err := migrations.New(ctx, url, keep, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Up(ctx); err != nil {
			t.Fatal(err)
		}
		m.Close()
		db = &testenv.DB{URL: url, Schema: keep, Pool: testenv.Pool(t, url, keep)}
	} else {
		db = testenv.NewDB(t)
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		start := time.Now()
		if _, err := db.Pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		t.Logf("seed %.1fs: %.60s", time.Since(start).Seconds(), strings.Join(strings.Fields(sql), " "))
	}
	// 500k delivered events of history, then the pending backlog over 50k
	// aggregates (4 events each on average), a few events without an
	// aggregate, in id order of creation.
	exec(`INSERT INTO aa_outbox_event (event_type, aggregate_type, aggregate_id, payload, status, dispatched_at, created_at, available_at)
		SELECT 'entity.customer.updated', 'DDM_ENTITY', md5((g % 100000)::text)::uuid, '{"version":1}', 'dispatched', now(),
		       now() - interval '2 hours' + g * interval '10 ms', now() - interval '2 hours' + g * interval '10 ms'
		FROM generate_series(1, 500000) g`)
	exec(`INSERT INTO aa_outbox_event (event_type, aggregate_type, aggregate_id, payload, created_at, available_at)
		SELECT CASE WHEN g % 10 = 0 THEN 'entity.customer.created' ELSE 'entity.customer.updated' END, 'DDM_ENTITY',
		       CASE WHEN g % 1000 = 0 THEN NULL ELSE md5((100000 + g % 50000)::text)::uuid END, '{"version":1}',
		       now() - interval '10 minutes' + g * ($1::float8 / $2) * interval '1 s', now() - interval '10 minutes' + g * ($1::float8 / $2) * interval '1 s'
		FROM generate_series(1, $2::int) g`, 590.0, pending)
	// 300 failed heads (poison), 200 heads backing off.
	exec(`UPDATE aa_outbox_event SET status = 'failed', attempts = 1, last_error = 'search: mapper_parsing_exception'
		WHERE id IN (SELECT min(id) FROM aa_outbox_event WHERE status = 'pending' AND aggregate_id IS NOT NULL GROUP BY aggregate_id ORDER BY aggregate_id LIMIT 300)`)
	exec(`UPDATE aa_outbox_event SET attempts = 2, available_at = now() + interval '5 minutes', last_error = 'crm-hook: 503'
		WHERE id IN (SELECT min(id) FROM aa_outbox_event WHERE status = 'pending' AND aggregate_id IS NOT NULL GROUP BY aggregate_id ORDER BY aggregate_id DESC LIMIT 200)`)
	// 5000 split events (SEARCHSYNC_LAG_SPLIT): search has them, the
	// webhook not (1 in 50 of those backs off, 1 in 100 is parked for it).
	exec(`WITH s AS (SELECT id, aggregate_type, aggregate_id FROM aa_outbox_event WHERE status = 'pending' AND aggregate_id IS NOT NULL ORDER BY id LIMIT $1)
		INSERT INTO aa_outbox_delivery (event_id, consumer, aggregate_type, aggregate_id, state, available_at)
		SELECT id, c, aggregate_type, aggregate_id, CASE WHEN c = 'search' THEN 'done' WHEN id % 100 = 0 THEN 'failed' ELSE 'pending' END,
		       CASE WHEN c = 'crm-hook' AND id % 50 = 0 THEN now() + interval '1 minute' ELSE now() END
		FROM s, unnest(ARRAY['search', 'crm-hook']) c`, split)
	if os.Getenv("SEARCHSYNC_LAG_PAUSED") != "" {
		exec(`INSERT INTO aa_outbox_consumer (consumer, state, paused_at, reason) VALUES ('crm-hook', 'paused', now(), 'connection refused')`)
	}
	exec(`ANALYZE aa_outbox_event`)
	exec(`ANALYZE aa_outbox_delivery`)

	consumers := []Consumer{
		{Name: "search", Type: "search", Indexes: []string{"customers"}},
		{Name: "crm-hook", Type: "webhook"},
	}
	routes := &routing.Table{Routes: []routing.Route{
		{Consumer: "search", EventTypes: []string{"entity.customer.*"}},
		{Consumer: "crm-hook", EventTypes: []string{"entity.customer.*"}},
	}}
	r := NewReader(db.Pool, db.Schema, consumers, routes)

	var rw raw
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		var err error
		rw, err = r.query(ctx, tx)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	args := headArgs(rw.heads)
	// As Read runs them: JIT off. The timing is the query's own (best of
	// 5 runs) beside the plan of the last run.
	explain := func(name, sql string, args ...any) {
		t.Helper()
		var lines []string
		best := time.Hour
		err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL jit = off`); err != nil {
				return err
			}
			for range 5 {
				start := time.Now()
				rows, err := tx.Query(ctx, sql, args...)
				if err != nil {
					return err
				}
				rows.Close()
				if rows.Err() != nil {
					return rows.Err()
				}
				best = min(best, time.Since(start))
			}
			rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS) "+sql, args...)
			if err != nil {
				return err
			}
			lines, err = pgx.CollectRows(rows, pgx.RowTo[string])
			return err
		})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		t.Logf("%s: %s\n%s", name, best.Round(100*time.Microsecond), strings.Join(lines, "\n"))
	}
	explain("heads", r.q.heads)
	explain("pending", r.q.pending, args...)
	explain("deliveryRows", r.q.deliveryRows, args...)
	explain("failedGroups", r.q.failedGroups)
	explain("failures", r.q.failures, 20)
	explain("pauses", r.q.pauses)
	explain("pausedAggregates", r.q.pausedAggregates, append(args, []string{"DDM_ENTITY", "DDM_ENTITY"},
		[]string{"entity.customer.created", "entity.customer.updated"}, "crm-hook")...)

	// Before: the pending and blocked queries this package ran until the
	// per-consumer figures, for comparison.
	explain("before: pendingGroups", `SELECT aggregate_type, event_type, count(*), count(*) FILTER (WHERE available_at <= now()), min(created_at)
		FROM aa_outbox_event WHERE status = 'pending' GROUP BY aggregate_type, event_type`)
	explain("before: blocked", `WITH heads AS (
			SELECT DISTINCT ON (aggregate_type, aggregate_id) aggregate_type, aggregate_id, id, status::text AS status, attempts,
			       coalesce(last_error, '') AS last_error, available_at
			FROM aa_outbox_event WHERE status IN ('pending', 'failed') AND aggregate_id IS NOT NULL
			ORDER BY aggregate_type, aggregate_id, id),
		b AS (SELECT * FROM heads WHERE status = 'failed' OR available_at > now())
		SELECT b.aggregate_type, b.aggregate_id, b.id, b.status, b.attempts, b.last_error, b.available_at,
		       (SELECT count(*) FROM aa_outbox_event w WHERE w.aggregate_type = b.aggregate_type AND w.aggregate_id = b.aggregate_id
		            AND w.id > b.id AND w.status = 'pending'), count(*) OVER ()
		FROM b ORDER BY b.id LIMIT 20`)

	var times []string
	for range 5 {
		start := time.Now()
		s, err := r.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		times = append(times, time.Since(start).Round(time.Millisecond).String())
		if len(times) == 1 {
			for _, c := range s.Consumers {
				t.Logf("%s: pending %d deliverable %d lag %.1fs failed %d blocked %+v paused %+v", c.Name, c.Pending, c.Deliverable,
					c.DeliverableLag, c.Failed, c.Blocked, c.Paused)
			}
		}
	}
	t.Logf("Read with %d pending, %d heads: %s", pending, len(rw.heads), strings.Join(times, " "))
}
