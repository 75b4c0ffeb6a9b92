package projections_test

import (
	"strings"
	"testing"

	"github.com/searchsync/searchsync/projections"
)

// relationFile is a relation declaration with one endpoint replaced.
func relationFile(source string) string {
	return `relations:
  - name: contact
    event_types: ["relation.contact.*"]
    fields:
      - {from: after.role, to: role}
    source: ` + source + `
    target: {id: target_id, index: persons}
`
}

func TestRelationDeclarationErrors(t *testing.T) {
	cases := []struct{ name, source, want string }{
		{"no endpoint lists it", `{id: source_id, index: customers}`, `projections t.yaml:6: relation "contact": relations[0].source.field: neither endpoint sets field`},
		{"no index", `{id: source_id, field: contacts}`, `relation "contact": relations[0].source.index: is required`},
		{"no id", `{index: customers, field: contacts}`, "relations[0].source.id: is empty"},
		{"dotted field", `{id: source_id, index: customers, field: a.b}`, `relations[0].source.field: "a.b" must be a top-level key`},
		{"reserved field", `{id: source_id, index: customers, field: _ss}`, `"_ss" must be a top-level key (no dots, not starting with _ or @)`},
		{"copy to a taken key", `{id: source_id, index: customers, field: contacts, other_id: role}`, `relations[0].fields[0].to: "role" is a key searchsync sets in the item`},
		{"bad other field", `{id: source_id, index: customers, field: contacts, other_fields: [{from: "@id"}]}`, `relations[0].source.other_fields[0].from: "@id" is not a dotted document path`},
		{"unknown key", `{id: source_id, index: customers, field: contacts, nope: 1}`, `unknown field "nope"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := projections.NewSet().AddFile("t.yaml", []byte(relationFile(c.source)))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v\nwant it to hold %q", err, c.want)
			}
		})
	}
	// A target's other_fields without its field: nothing to copy them into.
	f := strings.Replace(relationFile(`{id: source_id, index: customers, field: contacts}`),
		"{id: target_id, index: persons}", "{id: target_id, index: persons, other_fields: [{from: name}]}", 1)
	if err := projections.NewSet().AddFile("t.yaml", []byte(f)); err == nil || !strings.Contains(err.Error(), "t.yaml:7: relation \"contact\": relations[0].target.other_fields: needs field") {
		t.Fatalf("other_fields without field: %v", err)
	}
	// A relation named like a projection.
	dup := "projections:\n  - {name: contact, event_types: [x], index: customers}\n" + relationFile(`{id: source_id, index: customers, field: contacts}`)
	if err := projections.NewSet().AddFile("t.yaml", []byte(dup)); err == nil || !strings.Contains(err.Error(), `relation "contact": a projection or relation of that name is declared already`) {
		t.Fatalf("duplicate name: %v", err)
	}
}
