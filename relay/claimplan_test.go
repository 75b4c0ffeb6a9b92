package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/internal/testenv"
)

// TestClaimWalksThePendingIndexWithoutStatistics checks the generic plans
// of the claims (the plans every claim runs, see claimBatch) on an outbox
// that was never analyzed, holding many pending events: they must walk
// ix_outbox_event_claimable in id order and sort nothing (PostgreSQL would
// otherwise read and sort every pending row per claim), and a claim beside
// batches in flight must hash what it leaves out.
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
		"claim":                    {q.all, []any{[]string{}, []string{"a"}, int64(40000), make([]int64, 16)}, false},
		"claim of some partitions": {q.owned, []any{[]int32{0, 1, 2, 3}, []string{"paused"}, []string{"a", "paused"}, int64(40000), make([]int64, 16)}, false},
		"claim beside deliveries":  {q.allBehind, []any{inFlight, []int64{}, []string{}, []string{"a"}, int64(40000), make([]int64, 16)}, true},
		"claim passing delivered":  {q.allBehind, []any{inFlight[:50], passed, []string{}, []string{"a"}, int64(40000), make([]int64, 16)}, true},
	} {
		plan := genericPlan(t, db, c.sql, c.args)
		if strings.Contains(plan, `"Node Type": "Sort"`) || !strings.Contains(plan, `"Index Name": "ix_outbox_event_claimable"`) {
			t.Errorf("%s: the plan sorts or does not walk ix_outbox_event_claimable:\n%s", name, plan)
		}
		// The exclusions are hashed once per claim, not walked per row.
		if c.behind && strings.Count(plan, "hashed SubPlan") < 2 {
			t.Errorf("%s: the exclusions are not hashed subplans:\n%s", name, plan)
		}
	}
}

// genericPlan is the plan PostgreSQL caches for sql as a prepared
// statement under claimBatch's settings, planned without its arguments:
// the plan every claim runs (force_generic_plan).
func genericPlan(t *testing.T, db *testenv.DB, sql string, args []any) string {
	t.Helper()
	ctx := context.Background()
	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "PREPARE generic_claim AS "+sql); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(ctx, "DEALLOCATE generic_claim")
	// EXECUTE takes its arguments as literals (a utility statement has no
	// parameters of its own).
	lits := make([]string, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case []string:
			lits[i] = arrayLiteral(v, "text")
		case []int32:
			lits[i] = arrayLiteral(v, "int")
		case []int64:
			lits[i] = arrayLiteral(v, "bigint")
		case int64:
			lits[i] = strconv.FormatInt(v, 10)
		case [][16]byte:
			ids := make([]uuid.UUID, len(v))
			for j, b := range v {
				ids[j] = b
			}
			lits[i] = arrayLiteral(ids, "uuid")
		default:
			t.Fatalf("no literal for %T", a)
		}
	}
	br := conn.SendBatch(ctx, claimBatch("EXPLAIN (FORMAT JSON) EXECUTE generic_claim("+strings.Join(lits, ", ")+")", nil))
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		t.Fatal(err)
	}
	var plan json.RawMessage
	if err := br.QueryRow().Scan(&plan); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(plan), "$1") {
		t.Fatalf("not a generic plan (no parameter in it):\n%s", plan)
	}
	return string(plan)
}

// arrayLiteral is a PostgreSQL array literal of v's elements, cast to typ[].
func arrayLiteral[T any](v []T, typ string) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprint(x)
	}
	return "'{" + strings.Join(s, ",") + "}'::" + typ + "[]"
}
