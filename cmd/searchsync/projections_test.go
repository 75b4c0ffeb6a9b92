package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/examples/customer"
	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/config"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/mapping"
	"github.com/searchsync/searchsync/projections/dryrun"
)

// customerConfig is the customer example's search consumer with a webhook
// beside it (database.url as given; "" for none).
func customerConfig(t *testing.T, dbURL, schema string) string {
	t.Helper()
	db := ""
	if dbURL != "" {
		db = fmt.Sprintf("database: {url: %q, schema: %s}\n", dbURL, schema)
	}
	return writeConfig(t, db+`indexes: {examples: [customer]}
consumers:
  - {name: search, type: search, search: {indexes: [customers]}}
  - {name: crm-hook, type: webhook, webhook: {url: "http://127.0.0.1:1/hook", secret: whsec_c2VjcmV0}}
routes:
  - {consumer: search, event_types: ["entity.customer.*"], aggregate_types: [DDM_ENTITY]}
  - {consumer: crm-hook, event_types: ["entity.*"]}
`)
}

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(f, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

const customerAgg = "11111111-1111-1111-1111-111111111111"

// `searchsync projections test` on files: a schema_version 1 row (upcast)
// and a bare schema_version 2 payload, a poison one (exit 1, the path), a
// merge onto --current (the engine's GET answer), a soft delete, a stale
// version, and input it refuses with the file and the reason.
func TestProjectionsTestCommandOnFiles(t *testing.T) {
	t.Parallel()
	cfg := customerConfig(t, "", "")
	env := []string{"DATABASE_URL="}
	run := func(args ...string) (string, string, int) {
		t.Helper()
		return runCLI(t, env, append([]string{"-c", cfg, "projections", "test"}, args...)...)
	}
	v1 := writeFile(t, "v1.json", `{"id": 0, "event_type": "entity.customer.updated", "aggregate_type": "DDM_ENTITY", "aggregate_id": "`+customerAgg+`",
		"schema_version": 1, "payload": {"tenant_key": "public", "code": "C-1", "version": 5, "after": {"name": "Ada"}}}`)
	out, errOut, code := run("--event", v1)
	if code != 0 || !strings.Contains(out, "routed to: search, crm-hook") || !strings.Contains(out, "upcast: schema_version 1 → 2") ||
		!strings.Contains(out, `"after":{"display_name":"Ada"}`) || !strings.Contains(out, "op index  partial") ||
		!strings.Contains(out, "write: index customers/"+customerAgg+" version 5") || !strings.Contains(out, "which was not given") {
		t.Fatalf("schema_version 1 (exit %d):\n%s%s", code, out, errOut)
	}

	v2 := writeFile(t, "v2.json", `{"tenant_key": "public", "code": "C-1", "version": 6, "after": {"display_name": "Ada L."}}`)
	out, errOut, code = run("--event", v2, "--event-type", "entity.customer.updated", "--aggregate-type", "DDM_ENTITY",
		"--aggregate-id", customerAgg, "--schema-version", "2", "--json")
	var rep dryrun.Report
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil || len(rep.Consumers) != 1 {
		t.Fatalf("bare schema_version 2 --json (exit %d, %v):\n%s%s", code, err, out, errOut)
	}
	if c := rep.Consumers[0]; c.Upcast.From != 2 || c.Upcast.To != 2 || c.Result.Version != 6 || c.Write.Doc["display_name"] != "Ada L." || c.Write.Doc["tenant_key"] != "public" {
		t.Fatalf("bare schema_version 2: %s", out)
	}

	poison := writeFile(t, "poison.json", `{"event_type": "entity.customer.updated", "aggregate_type": "DDM_ENTITY", "aggregate_id": "`+customerAgg+`",
		"schema_version": 2, "payload": {"version": 7, "actor": {"principal_id": {"id": 1}}}}`)
	out, errOut, code = run("--event", poison)
	if code != 1 || !strings.Contains(out, "POISON at actor.principal_id (project)") || !strings.Contains(out, "field updated_by (from actor.principal_id)") ||
		!strings.Contains(errOut, "projections test: search: poison at actor.principal_id") {
		t.Fatalf("poison (exit %d):\n%s%s", code, out, errOut)
	}

	current := writeFile(t, "current.json", `{"_index": "customers_v1", "_id": "`+customerAgg+`", "_version": 5, "found": true,
		"_source": {"tenant_key": "public", "code": "C-1", "display_name": "Ada", "status": "active", "deleted": false}}`)
	upd := writeFile(t, "upd.json", `{"event_type": "entity.customer.updated", "aggregate_type": "DDM_ENTITY", "aggregate_id": "`+customerAgg+`",
		"schema_version": 2, "payload": {"tenant_key": "public", "version": 6, "after": {"city": "Berlin"}}}`)
	out, errOut, code = run("--event", upd, "--current", current, "--json")
	rep = dryrun.Report{}
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil {
		t.Fatalf("--current (exit %d, %v):\n%s%s", code, err, out, errOut)
	}
	if c := rep.Consumers[0]; c.Current.Version != 5 || c.Write.Doc["city"] != "Berlin" || c.Write.Doc["status"] != "active" || c.Write.Doc["display_name"] != "Ada" || c.Write.Version != 6 {
		t.Fatalf("merge onto --current: %s", out)
	}
	out, errOut, code = run("--event", upd, "--current", current, "--schema-version", "2", "--event-type", "entity.customer.deleted")
	if code != 0 || !strings.Contains(out, "op delete") || !strings.Contains(out, `"deleted":true`) || !strings.Contains(out, `"status":"active"`) {
		t.Fatalf("soft delete onto --current (exit %d):\n%s%s", code, out, errOut)
	}
	bare := writeFile(t, "bare-current.json", `{"code": "C-1"}`)
	out, errOut, code = run("--event", upd, "--current", bare, "--current-version", "6")
	if code != 0 || !strings.Contains(out, "write: nothing (stale)") || !strings.Contains(out, "version 6 is not above the version 6") {
		t.Fatalf("stale against --current-version (exit %d):\n%s%s", code, out, errOut)
	}

	for _, tc := range []struct {
		name, text string
		args       []string
		want       string
	}{
		{"notjson.json", "{not json", nil, "--event notjson.json: not a JSON object"},
		{"notype.json", `{"version": 1}`, nil, "--event notype.json: no event_type: give it in the file"},
		{"badrow.json", `{"event_type": "entity.customer.updated", "payload": [1]}`, nil, "--event badrow.json: payload is not a JSON object"},
		{"badid.json", `{"version": 1}`, []string{"--event-type", "entity.customer.updated", "--aggregate-id", "nope"}, `--aggregate-id "nope": not a UUID`},
	} {
		f := writeFile(t, tc.name, tc.text)
		_, errOut, code := runCLI(t, env, append([]string{"-c", cfg, "projections", "test", "--event", f}, tc.args...)...)
		if code != 1 || !strings.Contains(errOut, strings.Replace(tc.want, tc.name, f, 1)) {
			t.Errorf("%s: exit %d: %s", tc.name, code, errOut)
		}
	}
	if _, errOut, code := run(); code != 1 || !strings.Contains(errOut, "give the event: --event FILE") {
		t.Errorf("no event: exit %d: %s", code, errOut)
	}
}

// `searchsync projections test --id N` reads the event from the outbox: a
// failed poison one, and one it projects; an unknown id is an error.
func TestProjectionsTestCommandFromTheOutbox(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	cfg := customerConfig(t, db.URL, db.Schema)
	ids := map[string]int64{}
	for name, payload := range map[string]string{
		"poison": `{"tenant_key": "public", "after": {"display_name": "Ada"}}`,
		"good":   `{"tenant_key": "public", "version": 3, "after": {"name": "Ada"}}`,
	} {
		var id int64
		if err := db.Pool.QueryRow(context.Background(), `INSERT INTO aa_outbox_event (event_type, aggregate_type, aggregate_id, schema_version, payload, status, last_error)
			VALUES ('entity.customer.updated', 'DDM_ENTITY', $1, $2, $3, 'failed', 'search: poison') RETURNING id`,
			uuid.New(), map[string]int{"poison": 2, "good": 1}[name], payload).Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids[name] = id
	}
	env := []string{"DATABASE_URL=", "SEARCHSYNC_SCHEMA="}
	out, errOut, code := runCLI(t, env, "-c", cfg, "projections", "test", "--id", strconv.FormatInt(ids["poison"], 10))
	if code != 1 || !strings.Contains(out, fmt.Sprintf("event %d  entity.customer.updated", ids["poison"])) ||
		!strings.Contains(out, `POISON at version (project)`) || !strings.Contains(out, fmt.Sprintf("event %d (entity.customer.updated): payload has no version", ids["poison"])) {
		t.Fatalf("--id poison (exit %d):\n%s%s", code, out, errOut)
	}
	out, errOut, code = runCLI(t, env, "-c", cfg, "projections", "test", "--id", strconv.FormatInt(ids["good"], 10), "--json")
	var rep dryrun.Report
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil || rep.Event.ID != ids["good"] || rep.Consumers[0].Upcast.From != 1 ||
		rep.Consumers[0].Write.Doc["display_name"] != "Ada" {
		t.Fatalf("--id good (exit %d, %v):\n%s%s", code, err, out, errOut)
	}
	if _, errOut, code := runCLI(t, env, "-c", cfg, "projections", "test", "--id", "999999"); code != 1 || !strings.Contains(errOut, "--id 999999: no such event in the outbox") {
		t.Fatalf("--id unknown (exit %d): %s", code, errOut)
	}
}

// --current-from-index reads the document and its version with the
// consumer's read path: a partial event merges onto it, an older one is
// stale.
func TestProjectionsTestCommandCurrentFromIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	alias := testenv.Name("dryrun")
	dir := t.TempDir()
	def, err := os.ReadFile("../../mapping/defs/customers.json")
	if err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(dir, "defs"), 0o755)
	os.WriteFile(filepath.Join(dir, "defs", alias+".json"), []byte(strings.Replace(string(def), `"alias": "customers"`, `"alias": "`+alias+`"`, 1)), 0o644)
	os.WriteFile(filepath.Join(dir, "projections.yaml"), []byte(strings.Replace(string(customer.ProjectionFile()), "index: customers", "index: "+alias, 1)), 0o644)
	y := fmt.Sprintf(`engine: {urls: [%q]}
indexes: {definitions: defs, projections: [projections.yaml]}
consumers: [{name: search, type: search, search: {indexes: [%s]}}]
routes: [{consumer: search, event_types: ["entity.customer.*"]}]
`, testenv.EngineURL(t), alias)
	file := filepath.Join(dir, "searchsync.yaml")
	os.WriteFile(file, []byte(y), 0o644)
	cfg, err := config.Parse(file, []byte("database: {url: "+strconv.Quote(testenv.DatabaseURL(t))+"}\n"+y))
	if err != nil {
		t.Fatal(err)
	}
	eng, _ := indexer.New(indexer.Config{URLs: []string{testenv.EngineURL(t)}}, nil)
	t.Cleanup(func() { eng.DeleteIndex(context.Background(), mapping.PhysicalName(alias, 1)) })
	if _, err := searchFromConfig(ctx, cfg, cfg.Consumers[0], searchOptions{Engine: eng}); err != nil {
		t.Fatal(err)
	}
	res, err := eng.Bulk(ctx, []indexer.BulkOp{{Type: indexer.OpIndex, Index: alias, ID: customerAgg, Version: 4, RequireAlias: true,
		Doc: json.RawMessage(`{"tenant_key": "public", "code": "C-1", "display_name": "Ada", "status": "active", "deleted": false}`)}})
	if err != nil || res[0].Status >= 300 {
		t.Fatalf("seed the document: %v %+v", err, res)
	}
	ev := func(version int) string {
		return writeFile(t, "ev.json", fmt.Sprintf(`{"event_type": "entity.customer.updated", "aggregate_type": "DDM_ENTITY", "aggregate_id": %q,
			"schema_version": 2, "payload": {"tenant_key": "public", "version": %d, "after": {"city": "Berlin"}}}`, customerAgg, version))
	}
	env := []string{"DATABASE_URL=", "SEARCHSYNC_ENGINE_URL="}
	out, errOut, code := runCLI(t, env, "-c", file, "projections", "test", "--event", ev(5), "--current-from-index", "--json")
	var rep dryrun.Report
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil {
		t.Fatalf("--current-from-index (exit %d, %v):\n%s%s", code, err, out, errOut)
	}
	c := rep.Consumers[0]
	if c.Current == nil || !c.Current.Found || c.Current.Version != 4 || c.Current.From != "index "+alias ||
		c.Write.Doc["status"] != "active" || c.Write.Doc["city"] != "Berlin" || c.Write.Version != 5 {
		t.Fatalf("merge onto the index's document: %s", out)
	}
	out, errOut, code = runCLI(t, env, "-c", file, "projections", "test", "--event", ev(3), "--current-from-index")
	if code != 0 || !strings.Contains(out, "current (index "+alias+"): version 4") || !strings.Contains(out, "write: nothing (stale)") {
		t.Fatalf("stale against the index (exit %d):\n%s%s", code, out, errOut)
	}
}
