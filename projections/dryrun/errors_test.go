package dryrun

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/projections"
)

// pathsFile declares a projection per kind of reason TestErrorPaths makes
// (a.*: fields, after, tenant; c.*: id and version paths; g.*: a Go
// function; u.* and v.*: Go upcasters; d.* and e.*: declared upcasters).
const pathsFile = `
projections:
  - name: a
    event_types: ["a.*"]
    index: idx
    version: version
    schema_version: 2
    copy_all_of_after: true
    fields:
      - {from: actor.principal_id, to: updated_by, type: keyword}
  - name: c
    event_types: ["c.*"]
    index: idx
    id: code
    version: meta.version
    tenant: "-"
  - name: g
    event_types: ["g.*"]
    index: idx
    tenant: "-"
    go: enrich
  - name: u
    event_types: ["u.*", "v.*", "d.*", "e.*"]
    index: idx
    tenant: "-"
    schema_version: 2
upcasters:
  - event_types: ["d.*"]
    from: 1
    steps:
      - {rename: name, to: display_name, in: [after]}
  - event_types: ["e.*"]
    from: 1
    steps:
      - {rename: name, to: display_name}
`

func pathsSet(t *testing.T) *projections.Set {
	t.Helper()
	set := projections.NewSet()
	set.RegisterFunc("enrich", func(*projections.Input, *projections.Result) error { return errors.New("no such customer") })
	set.RegisterUpcaster("u.*", 1, func(map[string]any) error { return errors.New("boom") })
	set.RegisterUpcaster("v.*", 1, func(map[string]any) error {
		return &projections.PoisonError{Path: "after.x", Reason: "field x (from after.x): bad"}
	})
	if err := set.AddFile("paths.yaml", []byte(pathsFile)); err != nil {
		t.Fatal(err)
	}
	return set
}

// TestErrorPaths holds the Path of the poison errors of package projections
// (and so the dry run's Error.Path) to the path their reason names.
func TestErrorPaths(t *testing.T) {
	t.Parallel()
	set := pathsSet(t)
	id := uuid.MustParse("11111111-1111-1111-1111-111111111111")
	for _, tc := range []struct {
		eventType     string
		schemaVersion int
		noID          bool
		payload       string
		reason, path  string
	}{
		{"a.x", 2, false, `{"version": 1, "actor": {"principal_id": {"k": 1}}}`, "field updated_by (from actor.principal_id): an object", "actor.principal_id"},
		{"a.x", 2, true, `{"version": 1}`, "no document id at @aggregate_id", "@aggregate_id"},
		{"c.x", 1, false, `{"code": true}`, "document id at code is a boolean, not a string or number", "code"},
		{"c.x", 1, false, `{"code": ""}`, "document id at code is empty", "code"},
		{"a.x", 2, false, `{"version": 1, "tenant_key": {}}`, "tenant at tenant_key is an object, not a string", "tenant_key"},
		{"c.x", 1, false, `{"code": "C"}`, `payload has no version at "meta.version"`, "meta.version"},
		{"a.x", 2, false, `{"version": 1, "after": "s"}`, "after is a string, not an object", "after"},
		{"a.x", 2, false, `[1]`, "payload is not a JSON object", "payload"},
		{"a.x", 0, false, `{}`, "schema_version 0 is below 1", "@schema_version"},
		{"a.x", 9, false, `{}`, "schema_version 9 is newer", "@schema_version"},
		{"a.x", 1, false, `{}`, "no upcaster for a.x from schema_version 1 to 2", "@schema_version"},
		{"u.x", 1, false, `{}`, "upcaster u.x 1→2: boom", "@schema_version"},
		{"v.x", 1, false, `{}`, "upcaster v.x 1→2: projection: event 0 (): field x (from after.x): bad", "after.x"},
		{"d.x", 1, false, `{"after": "s"}`, "after is a string, not an object", "after"},
		{"e.x", 1, false, `{"name": 1, "display_name": 2}`, "display_name is already present", "@schema_version"},
		{"g.x", 1, false, `{"version": 1}`, "go function enrich: no such customer", ""},
	} {
		e := &outbox.Event{ID: 7, EventType: tc.eventType, SchemaVersion: tc.schemaVersion, Payload: json.RawMessage(tc.payload)}
		if !tc.noID {
			e.AggregateID = &id
		}
		_, err := set.Project(e, nil, nil)
		pe, ok := errors.AsType[*projections.PoisonError](err)
		if !ok || !strings.Contains(pe.Reason, tc.reason) || pe.Path != tc.path {
			t.Errorf("%s %s: %#v, want a reason with %q and Path %q", tc.eventType, tc.payload, err, tc.reason, tc.path)
			continue
		}
		if out := poisonError("project", err); out.Path != tc.path || out.Reason != pe.Reason || out.Message != err.Error() {
			t.Errorf("%s %s: dry-run error %+v", tc.eventType, tc.payload, out)
		}
	}
}
