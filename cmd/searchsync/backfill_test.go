package main

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/searchsync/searchsync/internal/testenv"
)

// The customer example's backfill source, on a copy of its sample table in
// the test's schema: dry run, run, status, and the errors of a command
// that names an unknown source or aborts what does not run.
func TestBackfillCommandsOnTheCustomerExample(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	sqlText, err := os.ReadFile("../../examples/customer/app.sql")
	if err != nil {
		t.Fatal(err)
	}
	setup := strings.ReplaceAll(strings.Replace(string(sqlText), "CREATE SCHEMA IF NOT EXISTS app;", "", 1), "app.customer", db.Schema+".customer")
	if _, err := db.Pool.Exec(ctx, setup); err != nil {
		t.Fatalf("examples/customer/app.sql: %v", err)
	}
	cfgText, err := os.ReadFile("../../examples/customer/searchsync.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.ReplaceAll(strings.Replace(string(cfgText), "schema: mdm", "schema: "+db.Schema, 1), "app.customer", db.Schema+".customer")
	// No relay delivers here: the backlog bound must not pause the backfill.
	cfg = strings.Replace(cfg, "key: aggregate_id", "key: aggregate_id\n      max_backlog: 20000", 1)
	file := writeConfig(t, cfg)
	env := []string{"DATABASE_URL=" + db.URL}

	out, errOut, code := runCLI(t, env, "-c", file, "backfill", "customers", "--dry-run", "--sample", "1")
	if code != 0 || !strings.Contains(out, "rows now:     10000") || !strings.Contains(out, "entity.customer.snapshot") || !strings.Contains(out, "→ consumers [search]") ||
		!strings.Contains(out, "search: projection customer → customers/") || !strings.Contains(out, "full state: {") {
		t.Fatalf("dry run (exit %d):\n%s%s", code, out, errOut)
	}
	if n := count(t, db, "SELECT count(*) FROM aa_outbox_event"); n != 0 {
		t.Fatalf("the dry run wrote %d events", n)
	}
	out, errOut, code = runCLI(t, env, "-c", file, "backfill", "customers")
	if code != 0 || !strings.Contains(out, "backfilled customers: 10000 rows") || !strings.Contains(errOut, "done  10000/10000 rows (100%)") {
		t.Fatalf("backfill (exit %d):\n%s%s", code, out, errOut)
	}
	if n := count(t, db, "SELECT count(DISTINCT aggregate_id) FROM aa_outbox_event WHERE event_type = 'entity.customer.snapshot' AND schema_version = 2"); n != 10000 {
		t.Fatalf("%d customers have a snapshot event, want 10000", n)
	}
	out, _, code = runCLI(t, env, "-c", file, "backfill", "status")
	if code != 0 || !strings.Contains(out, "customers    succeeded") {
		t.Fatalf("status (exit %d):\n%s", code, out)
	}
	_, errOut, code = runCLI(t, env, "-c", file, "backfill", "abort", "customers")
	if code != 1 || !strings.Contains(errOut, "no backfill of customers is running or interrupted") {
		t.Fatalf("abort without a job (exit %d):\n%s", code, errOut)
	}
	_, errOut, code = runCLI(t, env, "-c", file, "backfill", "customer")
	if code != 1 || !strings.Contains(errOut, `no backfill source "customer" (did you mean "customers"?)`) {
		t.Fatalf("unknown source (exit %d):\n%s", code, errOut)
	}
}

func count(t *testing.T, db *testenv.DB, q string) int {
	t.Helper()
	var n int
	if err := db.Pool.QueryRow(context.Background(), q).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
