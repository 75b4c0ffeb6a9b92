package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunReportsEveryConfigProblemAtOnce: typos of every stage of loading
// the configuration — an unknown key and a duration without a unit
// (decoding), a route to a misspelt consumer (validation), a misspelt index
// of a search consumer, a bad index definition file and a bad projection
// file (the index stage) — come out of one `searchsync run`, each with its
// file and line, in order, before anything connects.
func TestRunReportsEveryConfigProblemAtOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, text string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("defs/orders.yaml", "alias: orders\nmapings: {}\n")
	write("projections/orders.yaml", "projections:\n  - name: orders\n    event_types: [entity.order.*]\n    indx: orders\n")
	cfg := write("searchsync.yaml", `database:
  url: postgres://u@127.0.0.1:1/db
relay:
  batch_sise: 100
  poll_interval: 5
consumers:
  - name: search
    type: search
    search:
      indexes: [customer, orders]
routes:
  - consumer: serch
indexes:
  definitions: defs
  projections: [projections]
  examples: [customer]
`)
	_, stderr, code := runCLI(t, []string{"DATABASE_URL="}, "-c", cfg, "run")
	if code != 1 {
		t.Fatalf("exit %d, want 1:\n%s", code, stderr)
	}
	want := []string{
		"searchsync: " + cfg + `:4: relay.batch_sise: unknown field "batch_sise" (did you mean "batch_size"?)`,
		cfg + `:5: relay.poll_interval: "5" is not a duration: write one with its unit, such as 500ms, 10s or 5m`,
		cfg + `:10: consumers[0].search.indexes[0]: names unknown index "customer" (did you mean "customers"?): the index definitions are customers, persons`,
		cfg + `:12: routes[0].consumer: names unknown consumer "serch" (did you mean "search"?)`,
		filepath.Join(dir, "defs/orders.yaml") + `:2: unknown field "mapings"`,
		filepath.Join(dir, "projections/orders.yaml") + `:4: unknown field "indx"`,
	}
	if got := strings.TrimSpace(stderr); got != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", got, strings.Join(want, "\n"))
	}
}
