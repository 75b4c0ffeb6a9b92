package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/searchsync/searchsync/internal/config"
)

// The alias names a definition, or a tenant's alias of a per_tenant one;
// the replay takes the routes of the search consumers of the alias.
func TestReindexDefAndRoutes(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "orders.json"), []byte(`{"tenancy":{"mode":"per_tenant"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(filepath.Join(dir, "searchsync.yaml"), []byte(`
database: {url: "postgres://x@127.0.0.1/x"}
indexes: {definitions: `+dir+`}
consumers:
  - {name: search, type: search, search: {indexes: [customers]}}
  - {name: hook, type: webhook, webhook: {url: "http://127.0.0.1:1/", secret: s}}
routes:
  - {consumer: search, event_types: ["entity.customer.*"], aggregate_types: [DDM_ENTITY]}
  - {consumer: hook, event_types: ["entity.order.*"]}
`))
	if err != nil {
		t.Fatal(err)
	}
	d, tenant, err := reindexDef(cfg, "customers")
	if err != nil || d.Alias != "customers" || tenant != "" {
		t.Fatalf("customers: %v %q %v", d, tenant, err)
	}
	d, tenant, err = reindexDef(cfg, "orders_acme")
	if err != nil || d.Alias != "orders" || tenant != "acme" {
		t.Fatalf("orders_acme: %v %q %v", d, tenant, err)
	}
	if _, _, err := reindexDef(cfg, "nothing"); err == nil {
		t.Fatal("unknown alias accepted")
	}
	wants := searchRoutes(cfg, "customers")
	if !wants("entity.customer.updated", "DDM_ENTITY") || wants("entity.order.created", "DDM_ENTITY") || wants("entity.customer.updated", "OTHER") {
		t.Fatal("routes of the search consumer not applied")
	}
	if searchRoutes(cfg, "orders") != nil {
		t.Fatal("an alias no search consumer writes must replay every projected event")
	}
}
