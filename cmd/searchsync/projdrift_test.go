package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/searchsync/searchsync/dashboard"
	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/config"
	"github.com/searchsync/searchsync/internal/loadgen"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/outbox"
)

// TestProjectionDriftEndToEnd edits a projection (a field added) under a
// running setup of real services: after a restart the relay, `searchsync
// status` and /api/reindex report the drift with its description, start-up
// with indexes.on_drift: fail refuses, and `searchsync reindex` (with the
// edited projections) clears it: the new index records their fingerprint.
func TestProjectionDriftEndToEnd(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	alias := testenv.Name("pdrift")
	defs, projFile := customerIndex(t, alias)
	addr := testenv.FreeAddr(t)
	writeCfg := func(addr, onDrift string) string {
		return writeConfig(t, fmt.Sprintf(`
database: {url: %q, schema: %s}
http: {listen: %q, sample_interval: 200ms, drift_interval: 300ms}
relay: {poll_interval: 200ms}
engine: {urls: [%q]}
indexes: {definitions: %q, projections: [%q], on_drift: %s}
consumers:
  - {name: search, type: search, search: {indexes: [%s]}}
routes:
  - {consumer: search, event_types: ["entity.customer.*"]}
`, db.URL, db.Schema, addr, testenv.EngineURL(t), defs, projFile, onDrift, alias))
	}
	cfgFile := writeCfg(addr, "warn")

	const docs = 50
	gen := loadgen.New(11)
	evs := make([]outbox.Event, docs)
	for i := range evs {
		evs[i] = gen.Create()
	}
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := outbox.NewWriter(outbox.WriterConfig{Schema: db.Schema}).Write(ctx, tx, evs...); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	relay := startRelay(t, cfgFile, addr)
	cfg, err := config.Load(cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := indexer.New(cfg.Engine, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { indexer.Close(eng) })
	testenv.Eventually(t, 120*time.Second, func() bool {
		_ = eng.Refresh(ctx, alias)
		n, err := eng.Count(ctx, alias, nil)
		return err == nil && n == docs
	}, "the relay never indexed the %d documents", docs)

	var row dashboard.ReindexAlias
	testenv.Eventually(t, 30*time.Second, func() bool {
		r, _ := reindexAPI(t, addr)
		row = aliasRow(t, r, alias)
		return row.Drift == dashboard.DriftNone
	}, "no drift check of %s: %+v", alias, row)
	if row.ProjectionsHash == "" || row.ProjectionsHash != row.LiveProjectionsHash || len(row.ProjectionChanges) != 0 {
		t.Fatalf("before the edit: %+v", row)
	}
	oldFP := row.ProjectionsHash

	// The projection gains a field; the relay restarts with it.
	relay.Process.Signal(syscall.SIGTERM)
	relay.Wait()
	b, err := os.ReadFile(projFile)
	if err != nil {
		t.Fatal(err)
	}
	const lastField = `      - {from: "@event_type", to: last_event, type: keyword}` + "\n"
	edited := strings.Replace(string(b), lastField, lastField+"      - {from: after.name, to: full_name, type: text}\n", 1)
	if edited == string(b) {
		t.Fatal("the customer projection changed shape: no last_event field to add a field after")
	}
	if err := os.WriteFile(projFile, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	startRelay(t, cfgFile, addr)

	wantChanges := []string{"projection customer changed: fields added full_name"}
	wantMsg := "reindex required: run searchsync reindex " + alias + " (projection customer changed: fields added full_name)"
	testenv.Eventually(t, 30*time.Second, func() bool {
		r, _ := reindexAPI(t, addr)
		row = aliasRow(t, r, alias)
		return row.Drift == dashboard.DriftDiffers
	}, "the edited projection never showed as drift: %+v", row)
	if !reflect.DeepEqual(row.ProjectionChanges, wantChanges) || row.Message != wantMsg || row.LiveProjectionsHash != oldFP ||
		row.ProjectionsHash == oldFP || row.Hash != row.LiveHash || row.Index != alias+"_v1" {
		t.Fatalf("/api/reindex row: %+v\nwant changes %q, message %q", row, wantChanges, wantMsg)
	}
	_, raw := reindexAPI(t, addr)
	rawRow, _ := json.Marshal(raw["aliases"])
	if !strings.Contains(string(rawRow), `"projection_changes":["projection customer changed: fields added full_name"]`) {
		t.Errorf("/api/reindex JSON lacks projection_changes: %s", rawRow)
	}

	out, stderr, code := runCLI(t, nil, "-c", cfgFile, "status")
	if code != 0 || !strings.Contains(out, "DRIFT: "+wantMsg) {
		t.Fatalf("status (exit %d) lacks the drift line %q:\n%s\n%s", code, wantMsg, out, stderr)
	}
	out, stderr, code = runCLI(t, nil, "-c", cfgFile, "reindex", "--dry-run", alias)
	if code != 0 || !strings.Contains(out, "projections:      projection customer changed: fields added full_name") {
		t.Fatalf("reindex --dry-run (exit %d):\n%s\n%s", code, out, stderr)
	}

	// on_drift: fail refuses to start, saying why.
	failCfg := writeCfg(testenv.FreeAddr(t), "fail")
	_, stderr, code = runCLI(t, []string{"DATABASE_URL="}, "-c", failCfg, "run")
	if code == 0 || !strings.Contains(stderr, wantMsg) || !strings.Contains(stderr, "indexes.on_drift is fail") {
		t.Fatalf("run with on_drift fail: exit %d, stderr:\n%s", code, stderr)
	}

	// The reindex builds the index with the edited projection and records
	// its fingerprint: the drift is gone.
	out, stderr, code = runCLI(t, nil, "-c", cfgFile, "reindex", "--keep-old", "0", alias)
	if code != 0 {
		t.Fatalf("reindex (exit %d):\n%s\n%s", code, out, stderr)
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		r, _ := reindexAPI(t, addr)
		row = aliasRow(t, r, alias)
		return row.Drift == dashboard.DriftNone && row.Index == alias+"_v2"
	}, "the drift did not end with the reindex: %+v", row)
	if row.LiveProjectionsHash != row.ProjectionsHash || row.ProjectionsHash == oldFP {
		t.Fatalf("after the reindex: %+v", row)
	}
	if n, err := eng.Count(ctx, alias, nil); err != nil || n != docs {
		t.Fatalf("documents after the reindex: %d %v, want %d", n, err, docs)
	}
	out, _, _ = runCLI(t, nil, "-c", cfgFile, "status")
	if strings.Contains(out, "DRIFT:") {
		t.Fatalf("status still reports drift after the reindex:\n%s", out)
	}
}
