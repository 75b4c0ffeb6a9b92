package customer_test

import (
	"os"
	"testing"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/examples/customer"
	"github.com/searchsync/searchsync/internal/config"
	"github.com/searchsync/searchsync/mapping"
	"github.com/searchsync/searchsync/projections"
)

// The example's files load: the configuration, the projection (with its
// upcaster) and the index definition it writes to.
func TestExampleLoads(t *testing.T) {
	data, err := os.ReadFile("searchsync.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse("searchsync.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	// As searchsync run loads them: the example's registration, then the
	// projection files, and the definitions directory over the embedded ones.
	set := projections.NewSet()
	if err := customer.Register(set); err != nil {
		t.Fatal(err)
	}
	for _, p := range cfg.Indexes.Projections {
		if err := set.LoadFiles(cfg.Path(p)); err != nil {
			t.Fatal(err)
		}
	}
	defs, err := mapping.Load(cfg.Path(cfg.Indexes.Definitions))
	if err != nil {
		t.Fatal(err)
	}
	for _, ix := range set.Indexes() {
		if defs[ix] == nil {
			t.Fatalf("projection writes %s, which has no index definition", ix)
		}
	}
	id := uuid.New()
	e := customer.Updated(customer.Change{ID: id, Version: 3, Schema: 1, After: map[string]any{"name": "Ada"}})
	r, err := set.Project(&e, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Doc["display_name"] != "Ada" || r.Version != 3 || r.ID != id.String() || !r.Partial {
		t.Fatalf("result %+v", r)
	}
}
