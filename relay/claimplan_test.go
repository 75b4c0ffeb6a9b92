package relay

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/internal/testenv"
)

// TestClaimWalksThePendingIndexWithoutStatistics checks the plans of both
// claims on an outbox that was never analyzed, holding many pending events:
// they must walk ix_outbox_event_claimable in id order and sort nothing
// (PostgreSQL would otherwise read and sort every pending row per claim).
func TestClaimWalksThePendingIndexWithoutStatistics(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `INSERT INTO aa_outbox_event (event_type, aggregate_type, aggregate_id, payload)
		SELECT 'entity.customer.updated', 'DDM_ENTITY', md5(g::text)::uuid, jsonb_build_object('version', g)
		FROM generate_series(1, 50000) g`); err != nil {
		t.Fatal(err)
	}
	q := newQueries(db.Schema, 16, 500, 500).claims[0]
	inFlight := make([][16]byte, 500)
	for i := range inFlight {
		inFlight[i] = uuid.New()
	}
	passed := make([]int64, 2000)
	for i := range passed {
		passed[i] = int64(i + 1)
	}
	for name, c := range map[string]struct {
		sql    string
		args   []any
		behind bool
	}{
		"claim":                    {q.all, []any{[]string{}, []string{"a"}}, false},
		"claim of some partitions": {q.owned, []any{[]int32{0, 1, 2, 3}, []string{"paused"}, []string{"a", "paused"}}, false},
		"claim beside deliveries":  {q.allBehind, []any{inFlight, []int64{}, []string{}, []string{"a"}}, true},
		"claim passing delivered":  {q.allBehind, []any{inFlight[:50], passed, []string{}, []string{"a"}}, true},
	} {
		br := db.Pool.SendBatch(ctx, claimBatch("EXPLAIN (FORMAT JSON) "+c.sql, c.args, c.behind))
		if _, err := br.Exec(); err != nil {
			br.Close()
			t.Fatal(err)
		}
		var plan json.RawMessage
		err := br.QueryRow().Scan(&plan)
		br.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		p := string(plan)
		if strings.Contains(p, `"Node Type": "Sort"`) || !strings.Contains(p, `"Index Name": "ix_outbox_event_claimable"`) {
			t.Errorf("%s: the plan sorts or does not walk ix_outbox_event_claimable:\n%s", name, p)
		}
	}
}
