package migrations_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/migrations"
)

type column struct {
	name, typ, def string
	notNull        bool
}

// The spec's table, column by column (docs/outbox.md, "The schema").
var wantColumns = []column{
	{"id", "bigint", "nextval('%aa_outbox_event_id_seq'::regclass)", true},
	{"tenant_id", "uuid", "", false},
	{"event_type", "text", "", true},
	{"schema_version", "integer", "1", true},
	{"aggregate_type", "text", "", true},
	{"aggregate_id", "uuid", "", false},
	{"audit_log_id", "bigint", "", false},
	{"correlation_id", "uuid", "", false},
	{"payload", "jsonb", "", true},
	{"status", "%outbox_status", "'pending'::%outbox_status", true},
	{"attempts", "integer", "0", true},
	{"last_error", "text", "", false},
	{"available_at", "timestamp with time zone", "now()", true},
	{"dispatched_at", "timestamp with time zone", "", false},
	{"created_at", "timestamp with time zone", "now()", true},
	{"created_by", "text", "CURRENT_USER", true},
}

var wantConstraints = map[string]string{
	"aa_outbox_event_pkey":               "PRIMARY KEY (id)",
	"outbox_event_payload_is_object_chk": "CHECK ((jsonb_typeof(payload) = 'object'::text))",
	"outbox_event_attempts_chk":          "CHECK ((attempts >= 0))",
	"outbox_event_audit_log_fk":          "FOREIGN KEY (audit_log_id) REFERENCES %aa_audit_log(id)",
}

var wantIndexes = map[string]string{
	"aa_outbox_event_pkey":        "USING btree (id)",
	"ix_outbox_event_pending":     "USING btree (status, available_at, id) WHERE (status = 'pending'::%outbox_status)",
	"ix_outbox_event_aggregate":   "USING btree (aggregate_type, aggregate_id, id)",
	"ix_outbox_event_correlation": "USING btree (correlation_id) WHERE (correlation_id IS NOT NULL)",
	// Added by 00003_relay for the relay's claim (see the relay package doc).
	"ix_outbox_event_failed": "USING btree (aggregate_type, aggregate_id, id) WHERE (status = 'failed'::%outbox_status)",
	// 00004_consumer: the claim's walk without events held for a paused
	// consumer (replaces 00003's ix_outbox_event_pending_id).
	"ix_outbox_event_claimable": "USING btree (id) WHERE ((status = 'pending'::%outbox_status) AND (available_at < '9999-12-31 00:00:00+00'::timestamp with time zone))",
}

// like matches s against a pattern whose only wildcard is a leading-% part in
// front of schema-qualified names ("%outbox_status" matches "t_ab.outbox_status").
func like(pattern, s, schema string) bool {
	return strings.ReplaceAll(pattern, "%", schema+".") == s || strings.ReplaceAll(pattern, "%", "") == s
}

func TestMigrateYieldsSpecSchema(t *testing.T) {
	t.Parallel()
	url, schema := upSchema(t)
	pool := testenv.Pool(t, url, schema)
	ctx := context.Background()
	assertCatalog(t, ctx, pool, schema)

	// Running it again changes nothing.
	m, err := migrations.New(ctx, url, schema, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	applied, err := m.Up(ctx)
	if err != nil || len(applied) != 0 {
		t.Fatalf("second up: applied %v, err %v; want nothing", applied, err)
	}
	if err := m.Check(ctx); err != nil {
		t.Fatalf("check after up: %v", err)
	}
	assertCatalog(t, ctx, pool, schema)
}

// upSchema migrates a new schema with Up (goose), dropped at cleanup.
func upSchema(t *testing.T) (url, schema string) {
	t.Helper()
	url, schema = testenv.DatabaseURL(t), testenv.Name("t")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m, err := migrations.New(ctx, url, schema, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	t.Cleanup(func() {
		testenv.Pool(t, url, "").Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	})
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	return url, schema
}

func assertCatalog(t *testing.T, ctx context.Context, pool interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, schema string) {
	t.Helper()
	rows, err := pool.Query(ctx, `
		SELECT a.attname, format_type(a.atttypid, a.atttypmod), coalesce(pg_get_expr(d.adbin, d.adrelid), ''), a.attnotnull
		FROM pg_attribute a
		JOIN pg_class c ON c.oid = a.attrelid
		JOIN pg_namespace n ON n.oid = c.relnamespace
		LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		WHERE n.nspname = $1 AND c.relname = 'aa_outbox_event' AND a.attnum > 0 AND NOT a.attisdropped
		ORDER BY a.attnum`, schema)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (column, error) {
		var c column
		return c, r.Scan(&c.name, &c.typ, &c.def, &c.notNull)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(wantColumns) {
		t.Fatalf("columns: got %d %v, want %d", len(got), got, len(wantColumns))
	}
	for i, w := range wantColumns {
		g := got[i]
		if g.name != w.name || !like(w.typ, g.typ, schema) || !like(w.def, g.def, schema) || g.notNull != w.notNull {
			t.Errorf("column %d: got %+v, want %+v", i, g, w)
		}
	}

	rows, err = pool.Query(ctx, `
		SELECT con.conname, pg_get_constraintdef(con.oid)
		FROM pg_constraint con JOIN pg_class c ON c.oid = con.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = 'aa_outbox_event'`, schema)
	if err != nil {
		t.Fatal(err)
	}
	cons := map[string]string{}
	for rows.Next() {
		var name, def string
		if err := rows.Scan(&name, &def); err != nil {
			t.Fatal(err)
		}
		cons[name] = def
	}
	if len(cons) != len(wantConstraints) {
		t.Errorf("constraints: got %v, want %v", cons, wantConstraints)
	}
	for name, def := range wantConstraints {
		if !like(def, cons[name], schema) {
			t.Errorf("constraint %s: got %q, want %q", name, cons[name], def)
		}
	}

	rows, err = pool.Query(ctx, `SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = $1 AND tablename = 'aa_outbox_event'`, schema)
	if err != nil {
		t.Fatal(err)
	}
	idx := map[string]string{}
	for rows.Next() {
		var name, def string
		if err := rows.Scan(&name, &def); err != nil {
			t.Fatal(err)
		}
		_, after, _ := strings.Cut(def, " ON "+schema+".aa_outbox_event ")
		idx[name] = after
	}
	if len(idx) != len(wantIndexes) {
		t.Errorf("indexes: got %v, want %v", idx, wantIndexes)
	}
	for name, def := range wantIndexes {
		if !like(def, idx[name], schema) {
			t.Errorf("index %s: got %q, want %q", name, idx[name], def)
		}
	}

	var enum []string
	r := pool.Query
	rows, err = r(ctx, `SELECT e.enumlabel FROM pg_enum e JOIN pg_type ty ON ty.oid = e.enumtypid JOIN pg_namespace n ON n.oid = ty.typnamespace
		WHERE n.nspname = $1 AND ty.typname = 'outbox_status' ORDER BY e.enumsortorder`, schema)
	if err != nil {
		t.Fatal(err)
	}
	enum, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(enum, ",") != "pending,dispatched,failed,skipped" {
		t.Errorf("enum outbox_status: got %v", enum)
	}

	var triggers int
	rows, err = r(ctx, `SELECT count(*) FROM pg_trigger tg JOIN pg_class c ON c.oid = tg.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = 'aa_outbox_event' AND NOT tg.tgisinternal`, schema)
	if err != nil {
		t.Fatal(err)
	}
	counts, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		t.Fatal(err)
	}
	triggers = counts[0]
	if triggers != 0 {
		t.Errorf("triggers: got %d, want none", triggers)
	}
}

func TestMigrateRefusesNewerDatabase(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m, err := migrations.New(ctx, db.URL, db.Schema, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	// A newer searchsync applied a migration this binary does not know.
	if _, err := db.Pool.Exec(ctx, `INSERT INTO `+migrations.VersionTable+` (version_id, is_applied) VALUES ($1, true)`, m.Latest()+1); err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]func() error{
		"up":     func() error { _, err := m.Up(ctx); return err },
		"status": func() error { _, err := m.Status(ctx); return err },
		"check":  func() error { return m.Check(ctx) },
	} {
		if err := f(); !errors.Is(err, migrations.ErrNewerSchema) {
			t.Errorf("%s on a newer schema: got %v, want ErrNewerSchema", name, err)
		}
	}
}

func TestCheckReportsPendingMigrations(t *testing.T) {
	t.Parallel()
	url := testenv.DatabaseURL(t)
	schema := testenv.Name("t")
	ctx := context.Background()
	m, err := migrations.New(ctx, url, schema, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	pool := testenv.Pool(t, url, schema)
	t.Cleanup(func() { pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
	if err := m.Check(ctx); err == nil || !strings.Contains(err.Error(), "searchsync migrate up") {
		t.Fatalf("check on an empty schema: got %v, want a hint to run migrate up", err)
	}
}

// An install beside the platform: the platform's AA_AUDIT_LOG exists before
// searchsync migrates; it is kept as it is and the outbox references it.
func TestMigrateKeepsThePlatformsAuditLog(t *testing.T) {
	t.Parallel()
	url := testenv.DatabaseURL(t)
	schema := testenv.Name("t")
	ctx := context.Background()
	pool := testenv.Pool(t, url, "")
	t.Cleanup(func() { pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
	if _, err := pool.Exec(ctx, `CREATE SCHEMA `+schema+`;
		CREATE TABLE `+schema+`.aa_audit_log (id bigint PRIMARY KEY, occurred_at timestamptz NOT NULL, principal text NOT NULL, entity text);
		INSERT INTO `+schema+`.aa_audit_log VALUES (41, now(), 'platform', 'customer')`); err != nil {
		t.Fatal(err)
	}
	m, err := migrations.New(ctx, url, schema, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	var cols string
	if err := pool.QueryRow(ctx, `SELECT string_agg(column_name, ',' ORDER BY ordinal_position) FROM information_schema.columns
		WHERE table_schema = $1 AND table_name = 'aa_audit_log'`, schema).Scan(&cols); err != nil {
		t.Fatal(err)
	}
	if cols != "id,occurred_at,principal,entity" {
		t.Errorf("the platform's aa_audit_log was changed: columns %s", cols)
	}
	// The foreign key points to the platform's rows.
	if _, err := pool.Exec(ctx, `INSERT INTO `+schema+`.aa_outbox_event (event_type, aggregate_type, payload, audit_log_id) VALUES ('entity.customer.updated', 'DDM_ENTITY', '{}', 41)`); err != nil {
		t.Errorf("an event referencing the platform's audit row: %v", err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO `+schema+`.aa_outbox_event (event_type, aggregate_type, payload, audit_log_id) VALUES ('entity.customer.updated', 'DDM_ENTITY', '{}', 42)`); err == nil {
		t.Error("an event referencing a missing audit row was accepted")
	}
}
