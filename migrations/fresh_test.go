package migrations_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/migrations"
)

// TestCreateFreshEqualsUp: a schema made by CreateFresh (every test's, via
// testenv.NewDB) has the catalog of one migrated by Up, object by object,
// and the same applied versions; Up, Status and Check take it as current.
func TestCreateFreshEqualsUp(t *testing.T) {
	t.Parallel()
	url, up := upSchema(t)
	fresh := testenv.NewDB(t)
	ctx := context.Background()
	pool := testenv.Pool(t, url, "")

	want, got := catalog(t, pool, up), catalog(t, pool, fresh.Schema)
	if len(want) < 40 {
		t.Fatalf("the catalog of %s has %d lines; the comparison would prove little:\n%s", up, len(want), strings.Join(want, "\n"))
	}
	if w, g := strings.Join(want, "\n"), strings.Join(got, "\n"); w != g {
		t.Errorf("catalogs differ\nUp:\n%s\n\nCreateFresh:\n%s", w, g)
	}

	m, err := migrations.New(ctx, url, fresh.Schema, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Check(ctx); err != nil {
		t.Errorf("check: %v", err)
	}
	if applied, err := m.Up(ctx); err != nil || len(applied) != 0 {
		t.Errorf("up: applied %v, err %v; want nothing", applied, err)
	}
	st, err := m.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		if !s.Applied {
			t.Errorf("status: %s not applied", s.Name)
		}
	}
}

// catalog lists what a schema holds, with its name replaced by S: every
// relation (kind), column (type, default, not null, identity), constraint,
// index, type (enum labels), sequence, function and trigger, and the
// versions recorded as applied.
func catalog(t *testing.T, pool interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, schema string) []string {
	t.Helper()
	queries := []string{
		`SELECT 'rel ' || c.relname || ' ' || c.relkind::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 ORDER BY 1`,
		`SELECT 'col ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod) || ' default ' || coalesce(pg_get_expr(d.adbin, d.adrelid), '-') ||
			' notnull ' || a.attnotnull || ' identity ' || a.attidentity::text || ' #' || a.attnum
		 FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		 LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		 WHERE n.nspname = $1 AND c.relkind IN ('r', 'v', 'm', 'p') AND a.attnum > 0 AND NOT a.attisdropped ORDER BY 1`,
		`SELECT 'con ' || c.relname || ' ' || con.conname || ' ' || pg_get_constraintdef(con.oid)
		 FROM pg_constraint con JOIN pg_class c ON c.oid = con.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 ORDER BY 1`,
		`SELECT 'idx ' || indexname || ' ' || indexdef FROM pg_indexes WHERE schemaname = $1 ORDER BY 1`,
		`SELECT 'type ' || ty.typname || ' ' || ty.typtype::text || coalesce(' ' || (SELECT string_agg(e.enumlabel, ',' ORDER BY e.enumsortorder) FROM pg_enum e WHERE e.enumtypid = ty.oid), '')
		 FROM pg_type ty JOIN pg_namespace n ON n.oid = ty.typnamespace WHERE n.nspname = $1 AND ty.typtype <> 'c' AND ty.typname NOT LIKE '\_%' ORDER BY 1`,
		`SELECT 'seq ' || sequencename || ' ' || data_type::text || ' ' || start_value || ' ' || increment_by FROM pg_sequences WHERE schemaname = $1 ORDER BY 1`,
		`SELECT 'fn ' || p.proname || ' ' || pg_get_function_identity_arguments(p.oid) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1 ORDER BY 1`,
		`SELECT 'trigger ' || c.relname || ' ' || pg_get_triggerdef(tg.oid) FROM pg_trigger tg JOIN pg_class c ON c.oid = tg.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		 WHERE n.nspname = $1 AND NOT tg.tgisinternal ORDER BY 1`,
		fmt.Sprintf(`SELECT 'version ' || version_id || ' ' || is_applied FROM %s.%s WHERE $1 <> '' ORDER BY id`,
			pgx.Identifier{schema}.Sanitize(), migrations.VersionTable),
	}
	var out []string
	for _, q := range queries {
		rows, err := pool.Query(context.Background(), q, schema)
		if err != nil {
			t.Fatalf("%v\n%s", err, q)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("%v\n%s", err, q)
		}
		for _, l := range lines {
			out = append(out, strings.ReplaceAll(l, schema, "S"))
		}
	}
	return out
}
