package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/searchsync/searchsync/examples/customer"
	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/config"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/mapping"
)

// A configuration with its own definitions directory and projection file:
// start-up creates the index; a changed definition is drift, logged as
// "reindex required" (on_drift warn) or stopping start-up (on_drift fail),
// and never applied.
func TestSearchFromConfigDrift(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	alias := testenv.Name("cfg")
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "defs"), 0o755)
	writeDef := func(extra string) {
		def := `{"alias": "` + alias + `", "settings": {"number_of_shards": 1, "number_of_replicas": 0},
			"mappings": {"properties": {"code": {"type": "keyword"}, "status": {"type": "keyword"}` + extra + `}}}`
		if err := os.WriteFile(filepath.Join(dir, "defs", alias+".json"), []byte(def), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeDef("")
	proj := strings.Replace(string(customer.ProjectionFile()), "index: customers", "index: "+alias, 1)
	os.WriteFile(filepath.Join(dir, "projections.yaml"), []byte(proj), 0o644)
	load := func(onDrift string) *config.Config {
		y := fmt.Sprintf(`database: {url: %q}
engine: {urls: [%q]}
indexes: {definitions: defs, projections: [projections.yaml], on_drift: %s}
consumers: [{name: search, type: search, search: {indexes: [%s]}}]
routes: [{consumer: search, event_types: ["entity.customer.*"]}]
`, testenv.DatabaseURL(t), testenv.EngineURL(t), onDrift, alias)
		file := filepath.Join(dir, "searchsync.yaml")
		os.WriteFile(file, []byte(y), 0o644)
		cfg, err := config.Parse(file, []byte(y))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	eng, _ := indexer.New(indexer.Config{URLs: []string{testenv.EngineURL(t)}}, nil)
	t.Cleanup(func() { eng.DeleteIndex(context.Background(), mapping.PhysicalName(alias, 1)) })

	cfg := load("fail")
	if _, err := searchFromConfig(ctx, cfg, cfg.Consumers[0], searchOptions{}); err != nil {
		t.Fatal(err)
	}
	if targets, _ := eng.AliasTargets(ctx, alias); len(targets) != 1 {
		t.Fatalf("alias targets %v", targets)
	}

	writeDef(`, "email": {"type": "keyword"}`)
	_, err := searchFromConfig(ctx, cfg, cfg.Consumers[0], searchOptions{})
	if err == nil || !strings.Contains(err.Error(), "reindex required: run searchsync reindex "+alias) {
		t.Fatalf("on_drift fail: err = %v", err)
	}

	var logs bytes.Buffer
	cfg = load("warn")
	if _, err := searchFromConfig(ctx, cfg, cfg.Consumers[0], searchOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil))}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "reindex required") {
		t.Fatalf("drift not logged: %s", logs.String())
	}
	info, _ := eng.GetIndex(ctx, mapping.PhysicalName(alias, 1))
	if strings.Contains(string(info.Mappings), "email") {
		t.Fatalf("drift applied silently: %s", info.Mappings)
	}

	// A search consumer whose index no projection writes stops start-up.
	cfg.Consumers[0].Search.Indexes = []string{"orders"}
	if _, err := searchFromConfig(ctx, cfg, cfg.Consumers[0], searchOptions{}); err == nil || !strings.Contains(err.Error(), `no projection writes index "orders"`) {
		t.Fatalf("err = %v", err)
	}
}
