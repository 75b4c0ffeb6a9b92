package backfill_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/searchsync/searchsync/backfill"
	"github.com/searchsync/searchsync/internal/testenv"
)

// Each bad row stops its chunk with its key and the reason, whether the
// chunk's events are written in the database (a jsonb or json payload) or
// through searchsync (a text payload), and nothing of the chunk is written.
func TestBackfillBadRowsNameKeyAndReason(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	seedCustomers(t, db, 30)
	cases := []struct {
		name, col, expr, reason string
	}{
		{"event type pattern", "event_type", `'Customer Snapshot'`, "event_type"},
		{"not a snapshot", "event_type", `'entity.customer.updated'`, `does not end in ".snapshot"`},
		{"payload array", "payload", `'[1]'::jsonb`, "payload: must be a JSON object"},
		{"payload null", "payload", `NULL::jsonb`, "payload: is required"},
		{"payload json array", "payload", `'[1]'::json`, "payload: must be a JSON object"},
		{"payload text invalid", "payload", `'{"a":'::text`, "payload: is not valid JSON"},
		{"schema version", "schema_version", `-1`, "schema_version"},
		{"aggregate type", "aggregate_type", `'not a type'`, "aggregate_type"},
		{"nil aggregate id", "aggregate_id", `'00000000-0000-0000-0000-000000000000'::uuid`, "aggregate_id: is the nil UUID"},
		{"null aggregate id", "aggregate_id", `NULL::uuid`, "aggregate_id is NULL"},
	}
	for _, tc := range cases {
		good := map[string]string{
			"aggregate_id":   "c.id",
			"event_type":     `'entity.customer.snapshot'`,
			"payload":        `jsonb_build_object('version', c.version)`,
			"schema_version": "1",
			"aggregate_type": `'DDM_ENTITY'`,
		}
		for _, typ := range []string{"::text", "::json"} {
			if tc.col == "payload" && strings.HasSuffix(tc.expr, typ) {
				good["payload"] += typ
			}
		}
		good[tc.col] = `CASE WHEN c.name = 'customer 17' THEN ` + tc.expr + ` ELSE ` + good[tc.col] + ` END`
		var cols []string
		for _, c := range []string{"aggregate_id", "event_type", "payload", "schema_version", "aggregate_type"} {
			cols = append(cols, good[c]+" AS "+c)
		}
		src := customerSource(db.Schema)
		src.Name = "bad-" + strings.ReplaceAll(tc.name, " ", "-")
		src.Key, src.ChunkSize = "k", 10
		src.Query = `SELECT ` + strings.Join(cols, ", ") + `, c.name AS k FROM ` + db.Schema + `.customer c WHERE c.name LIKE 'customer 1_'`
		_, err := backfill.Run(ctx, backfill.Config{Pool: db.Pool, Schema: db.Schema, Source: src})
		var rowErr *backfill.RowError
		if !errors.As(err, &rowErr) || rowErr.Key != "customer 17" || !strings.Contains(rowErr.Reason, tc.reason) {
			t.Errorf("%s: want a RowError naming key customer 17 and %q, got %v", tc.name, tc.reason, err)
		}
	}
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM aa_outbox_event`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d events written (%v), want none", n, err)
	}
}

// The events carry the job's correlation id and the backfill as their
// author; a schema_version of 0 is the default, 1, and a NULL tenant stays NULL.
func TestBackfillEventColumns(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	seedCustomers(t, db, 5)
	for _, payload := range []string{"jsonb", "text"} {
		src := customerSource(db.Schema)
		src.Name = "cols-" + payload
		src.Query = strings.Replace(src.Query, "c.tenant_id,", "c.tenant_id, 0 AS schema_version,", 1)
		src.Query = strings.Replace(src.Query, ") AS payload", ")::"+payload+" AS payload", 1)
		if _, err := backfill.Run(ctx, backfill.Config{Pool: db.Pool, Schema: db.Schema, Source: src}); err != nil {
			t.Fatal(err)
		}
		var n, corrs int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT correlation_id) FROM aa_outbox_event
			WHERE created_by = $1 AND schema_version = 1 AND tenant_id IS NULL AND correlation_id IS NOT NULL
			  AND audit_log_id IS NULL AND payload->>'entity_type' = 'customer'`, "searchsync backfill "+src.Name).Scan(&n, &corrs); err != nil {
			t.Fatal(err)
		}
		if n != 5 || corrs != 1 {
			t.Errorf("%s payload: %d events as expected with %d correlation ids, want 5 and 1", payload, n, corrs)
		}
	}
}
