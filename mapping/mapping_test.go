package mapping_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/mapping"
)

func engine(t *testing.T) indexer.Engine {
	t.Helper()
	eng, err := indexer.New(indexer.Config{URLs: []string{testenv.EngineURL(t)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

// testDef is the embedded customers definition under a unique alias; its
// physical indexes are deleted at cleanup.
func testDef(t *testing.T, eng indexer.Engine) *mapping.Def {
	t.Helper()
	defs, err := mapping.Load("")
	if err != nil {
		t.Fatal(err)
	}
	d := *defs["customers"]
	d.Alias = testenv.Name("map")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for n := 1; n <= 3; n++ {
			_ = eng.DeleteIndex(ctx, mapping.PhysicalName(d.Alias, n))
		}
	})
	return &d
}

func TestLoadOverride(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "customers.yaml"), []byte("delete_mode: hard\nsettings: {number_of_shards: 2}\nmappings: {properties: {code: {type: keyword}}}\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "orders.json"), []byte(`{"tenancy":{"mode":"per_tenant"},"mappings":{"properties":{"total":{"type":"double"}}}}`), 0o644)
	defs, err := mapping.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if c := defs["customers"]; c.DeleteMode != mapping.DeleteHard || !strings.HasSuffix(c.Source, "customers.yaml") || c.SearchFilter() != nil {
		t.Fatalf("customers not overridden: %+v", c)
	}
	if o := defs["orders"]; o == nil || o.Tenancy.Mode != mapping.TenancyPerTenant || o.DeleteMode != mapping.DeleteSoft {
		t.Fatalf("orders: %+v", o)
	}
	os.WriteFile(filepath.Join(dir, "bad.json"), []byte(`{"delete_mode":"sometimes"}`), 0o644)
	if _, err := mapping.Load(dir); err == nil || !strings.Contains(err.Error(), `bad.json: delete_mode: "sometimes" is not one of soft, hard`) {
		t.Fatalf("err = %v", err)
	}
}

func TestTenantAlias(t *testing.T) {
	t.Parallel()
	d := &mapping.Def{Alias: "customers", Tenancy: mapping.Tenancy{Mode: mapping.TenancyPerTenant}}
	if a, err := d.TenantAlias("ACME"); err != nil || a != "customers_acme" {
		t.Fatalf("%q %v", a, err)
	}
	for _, bad := range []string{"", "a b", "x/y", "acme_v2", strings.Repeat("a", 60)} {
		if _, err := d.TenantAlias(bad); err == nil {
			t.Errorf("tenant %q accepted", bad)
		}
	}
}

// Ensure creates the index and alias once, is idempotent, and reports a
// changed definition as drift without touching the live index.
func TestEnsureAndDrift(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	eng := engine(t)
	def := testDef(t, eng)

	st, err := mapping.Ensure(ctx, eng, def)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Created || st.Index != def.Alias+"_v1" || st.Drift {
		t.Fatalf("first ensure: %+v", st)
	}
	st, err = mapping.Ensure(ctx, eng, def)
	if err != nil || st.Created || st.Drift || st.LiveHash != def.Hash() {
		t.Fatalf("second ensure: %+v %v", st, err)
	}
	info, err := eng.GetIndex(ctx, st.Index)
	if err != nil || !strings.Contains(string(info.Mappings), def.Hash()) || !strings.Contains(string(info.Mappings), `"deleted"`) {
		t.Fatalf("live mappings %s %v", info.Mappings, err)
	}

	changed := *def
	changed.Mappings = map[string]any{"properties": map[string]any{"code": map[string]any{"type": "text"}}}
	changed.Source = "customers.json"
	st, err = mapping.Ensure(ctx, eng, &changed)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Drift || st.Created || st.Index != def.Alias+"_v1" {
		t.Fatalf("drift not reported: %+v", st)
	}
	if msg := st.Message(); !strings.Contains(msg, "reindex required: run searchsync reindex "+def.Alias) || !strings.Contains(msg, "customers.json") {
		t.Fatalf("message %q", msg)
	}
	// Nothing was applied: the live index still has the old hash.
	info, _ = eng.GetIndex(ctx, st.Index)
	if mapping.LiveHash(info.Mappings) != def.Hash() {
		t.Fatalf("live index changed")
	}
	if n, _ := mapping.NextFree(ctx, eng, def.Alias); n != def.Alias+"_v2" {
		t.Fatalf("next free %s", n)
	}
}

// Two processes starting at once create one index.
func TestEnsureConcurrent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	eng := engine(t)
	def := testDef(t, eng)
	errs := make(chan error, 3)
	for range 3 {
		go func() { _, err := mapping.Ensure(ctx, eng, def); errs <- err }()
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	targets, err := eng.AliasTargets(ctx, def.Alias)
	if err != nil || len(targets) != 1 || targets[0] != def.Alias+"_v1" {
		t.Fatalf("targets %v %v", targets, err)
	}
}

func TestCheckFieldType(t *testing.T) {
	t.Parallel()
	defs, err := mapping.Load("")
	if err != nil {
		t.Fatal(err)
	}
	d := defs["customers"]
	for path, want := range map[string]string{"code": "keyword", "credit_limit": "long", "address.city": "keyword",
		"address": "object", "deleted": "boolean", "unmapped": "long", "updated_at": "date"} {
		if err := d.CheckFieldType(path, want); err != nil {
			t.Errorf("%s %s: %v", path, want, err)
		}
	}
	if err := d.CheckFieldType("credit_limit", "date"); err == nil || !strings.Contains(err.Error(), "field credit_limit is declared date but index customers maps it as long") {
		t.Fatalf("err = %v", err)
	}
}
