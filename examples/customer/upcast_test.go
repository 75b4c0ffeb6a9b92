package customer_test

import (
	"reflect"
	"testing"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/examples/customer"
	"github.com/searchsync/searchsync/internal/loadgen"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/projections"
)

// goSet is the example as it was before projections.yaml declared the
// upcaster: the file's projection and the Go upcaster customer.UpcastV1.
func goSet(t *testing.T) *projections.Set {
	t.Helper()
	f, err := projections.ParseFile("projections.yaml", customer.ProjectionFile())
	if err != nil {
		t.Fatal(err)
	}
	set := projections.NewSet()
	if err := set.Add(f.Projections...); err != nil {
		t.Fatal(err)
	}
	set.RegisterUpcaster("entity.customer.*", 1, customer.UpcastV1)
	return set
}

// The declared upcaster (projections.yaml) gives the documents the Go
// upcaster gave, for schema_version 1 and 2 payloads: the spec's shapes, the
// corners (no before, null before, name absent) and the realistic workload's
// 40,000 events (schema_version 1, `name`).
func TestDeclaredUpcasterLikeGo(t *testing.T) {
	decl := projections.NewSet()
	if err := customer.Register(decl); err != nil {
		t.Fatal(err)
	}
	old := goSet(t)
	id := uuid.New()
	var evs []outbox.Event
	for _, schema := range []int{1, 2} {
		name := "name"
		if schema == 2 {
			name = "display_name"
		}
		evs = append(evs,
			customer.Created(customer.Change{ID: id, Version: 1, Schema: schema, After: map[string]any{name: "Ada", "status": "draft", "nested": map[string]any{"name": "kept"}}}),
			customer.Updated(customer.Change{ID: id, Version: 2, Schema: schema, Before: map[string]any{name: "Ada"}, After: map[string]any{name: "Grace"}}),
			customer.Updated(customer.Change{ID: id, Version: 3, Schema: schema, After: map[string]any{"status": "active"}}),
			customer.Updated(customer.Change{ID: id, Version: 4, Schema: schema, After: map[string]any{name: nil}}),
			customer.Deleted(customer.Change{ID: id, Version: 5, Schema: schema}),
		)
	}
	nullBefore := customer.Updated(customer.Change{ID: id, Version: 6, Schema: 1, After: map[string]any{"name": "Ada"}})
	nullBefore.Payload = []byte(`{"tenant_key":"public","code":"C-1","version":6,"before":null,"after":{"name":"Ada"}}`)
	noBefore := nullBefore
	noBefore.Payload = []byte(`{"tenant_key":"public","code":"C-1","version":6,"after":{"name":"Ada"}}`)
	evs = append(evs, nullBefore, noBefore)
	for _, e := range loadgen.Realistic().Make() {
		e.SchemaVersion = max(e.SchemaVersion, 1)
		evs = append(evs, e)
	}
	for i := range evs {
		e := &evs[i]
		e.ID = int64(i + 1)
		want, err := old.Project(e, nil, nil)
		if err != nil {
			t.Fatalf("event %d (Go upcaster): %v", i, err)
		}
		got, err := decl.Project(e, nil, nil)
		if err != nil {
			t.Fatalf("event %d (declared upcaster): %v", i, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("event %d %s schema_version %d:\n declared %+v\n Go       %+v", i, e.EventType, e.SchemaVersion, got, want)
		}
	}
	// And a schema_version 1 payload projects as its schema_version 2 twin.
	v1, _ := decl.Project(&evs[1], nil, nil)
	v2, _ := decl.Project(&evs[6], nil, nil)
	v1.EventID, v2.EventID = 0, 0 // two events
	if !reflect.DeepEqual(v1, v2) || v1.Doc["display_name"] != "Grace" {
		t.Fatalf("v1 %+v\nv2 %+v", v1, v2)
	}
}
