package search_test

import (
	"strings"
	"testing"

	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/mapping"
	"github.com/searchsync/searchsync/projections"
	"github.com/searchsync/searchsync/sink/search"
)

// A projection field type that does not fit the index mapping stops
// start-up with the projection, field and index named.
func TestNewRejectsTypeMismatch(t *testing.T) {
	t.Parallel()
	defs, _ := mapping.Load("")
	set := projections.NewSet()
	if err := set.Add(projections.Projection{Name: "c", EventTypes: []string{"entity.customer.*"}, Index: "customers",
		Fields: []projections.Field{{From: "after.limit", To: "credit_limit", Type: projections.TypeDate}}}); err != nil {
		t.Fatal(err)
	}
	eng, _ := indexer.New(indexer.Config{URLs: []string{testenv.EngineURL(t)}}, nil)
	_, err := search.New(search.Config{Engine: eng, Projections: set, Defs: defs})
	if err == nil || !strings.Contains(err.Error(), "projection c: field credit_limit is declared date but index customers maps it as long") {
		t.Fatalf("err = %v", err)
	}
}
