package projections_test

import (
	"testing"

	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/projections"
)

// The console's error classes select these reasons by the patterns the
// package defines (dashboard.ErrorClasses); last_error keeps the text.
func TestReasonPatterns(t *testing.T) {
	s := newSet(t)
	for name, c := range map[string]struct {
		schema        int
		payload       string
		schemaVersion bool
	}{
		"missing version": {1, `{"after":{}}`, false},
		"bad long":        {2, `{"version":1,"after":{"credit_limit":"lots"}}`, false},
		"schema 99":       {99, `{"version":1}`, true},
		"schema 0":        {0, `{"version":1}`, true},
	} {
		_, err := project(t, s, event("entity.customer.updated", c.schema, c.payload))
		if err == nil {
			t.Fatalf("%s: no error", name)
		}
		if !testenv.MatchesError(projections.PoisonPattern, err.Error()) {
			t.Errorf("%s: %q is not selected by PoisonPattern %q", name, err, projections.PoisonPattern)
		}
		if got := testenv.MatchesError(projections.SchemaVersionPattern, err.Error()); got != c.schemaVersion {
			t.Errorf("%s: %q selected by SchemaVersionPattern %q: %v, want %v", name, err, projections.SchemaVersionPattern, got, c.schemaVersion)
		}
	}
	gap := projections.NewSet()
	if err := gap.Add(projections.Projection{Name: "p", EventTypes: []string{"a.b"}, Index: "x", SchemaVersion: 3}); err != nil {
		t.Fatal(err)
	}
	gap.RegisterUpcaster("a.b", 2, func(map[string]any) error { return nil })
	if _, err := gap.Project(event("a.b", 1, `{"version":1}`), nil, nil); err == nil || !testenv.MatchesError(projections.SchemaVersionPattern, err.Error()) {
		t.Errorf("no upcaster: %v is not selected by SchemaVersionPattern", err)
	}
}
