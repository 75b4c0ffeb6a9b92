package relay

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/searchsync/searchsync/internal/testenv"
)

// TestReleaseWorkIsLinearInTheHeldRows runs the statements that end an
// outage (the release of held events, and the sweep for orphaned held rows)
// on a backlog held for a paused consumer whose tables were never analyzed,
// as right after an outage began, and counts the rows every plan node
// produced or filtered out (times its loops). The work must grow with the
// rows, not with their square: a join with a CTE planned as a nested loop
// over it read 9 million rows for 3,000 held events (4 s, with every held
// row locked meanwhile, so acks waited and leases expired).
func TestReleaseWorkIsLinearInTheHeldRows(t *testing.T) {
	t.Parallel()
	const n = 2000
	db := testenv.NewDB(t)
	ctx := context.Background()
	for _, stmt := range []string{
		`INSERT INTO aa_outbox_event (event_type, aggregate_type, aggregate_id, payload, status, dispatched_at)
		 SELECT 'entity.customer.updated', 'DDM_ENTITY', md5((g % 500)::text)::uuid, '{}', 'dispatched', now()
		 FROM generate_series(1, 3000) g`,
		`INSERT INTO aa_outbox_event (event_type, aggregate_type, aggregate_id, payload, available_at)
		 SELECT 'entity.customer.updated', 'DDM_ENTITY', md5((g % 500)::text)::uuid, '{}', '9999-12-31 00:00:00+00'
		 FROM generate_series(1, 2000) g`,
		`INSERT INTO aa_outbox_delivery (event_id, consumer, aggregate_type, aggregate_id, state, available_at)
		 SELECT id, c, aggregate_type, aggregate_id, CASE WHEN c = 'search' THEN 'pending' ELSE 'done' END,
		        CASE WHEN c = 'search' THEN '9999-12-31 00:00:00+00'::timestamptz ELSE now() END
		 FROM aa_outbox_event, unnest(ARRAY['search', 'hook', 'queue']) c WHERE status = 'pending'`,
	} {
		if _, err := db.Pool.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	q := newQueries(db.Schema, 16, 500, 500)
	for name, c := range map[string]struct {
		sql  string
		args []any
	}{
		"release":      {q.releaseHeld, []any{"search", releaseChunk}},
		"orphan sweep": {q.unholdOrphans, []any{releaseChunk}},
	} {
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var plan []struct {
			Plan planNode `json:"Plan"`
		}
		err = tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+c.sql, c.args...).Scan(&plan)
		tx.Rollback(ctx)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if work := plan[0].Plan.work(); work > 20*n {
			t.Errorf("%s of %d held events: its plan nodes handled %.0f rows (more than 20 per event):\n%s",
				name, n, work, plan[0].Plan.String())
		}
	}
}

// planNode is a node of EXPLAIN (ANALYZE, FORMAT JSON).
type planNode struct {
	Type     string     `json:"Node Type"`
	Rows     float64    `json:"Actual Rows"`
	Loops    float64    `json:"Actual Loops"`
	Filtered float64    `json:"Rows Removed by Filter"`
	Joined   float64    `json:"Rows Removed by Join Filter"`
	Index    string     `json:"Index Name"`
	Plans    []planNode `json:"Plans"`
}

// work is the rows the node and those below it produced or filtered out,
// over all their loops.
func (p planNode) work() float64 {
	w := (p.Rows + p.Filtered + p.Joined) * max(p.Loops, 1)
	for _, c := range p.Plans {
		w += c.work()
	}
	return w
}

func (p planNode) String() string {
	b, _ := json.MarshalIndent(p, "", "  ")
	return string(b)
}
