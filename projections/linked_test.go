package projections

import (
	"testing"
)

// contactEnd is the endpoint of the contact relation whose items the tests fold.
var contactEnd = &Endpoint{ID: "source_id", Index: "customers", Field: "contacts", OtherID: "person_id",
	OtherFields: []OtherField{{From: "display_name", To: "name"}}}

func entity(op Op, version, eventID int64, doc map[string]any, partial bool) *Result {
	return &Result{Op: op, Version: version, EventID: eventID, Doc: doc, Partial: partial}
}

func item(op Op, rel string, version, eventID int64, doc map[string]any) *Result {
	return &Result{Op: op, Version: version, EventID: eventID, Doc: doc, Partial: false,
		Link: &Link{Kind: LinkItem, Relation: rel, Field: "contacts", OtherID: "p1", OtherIndex: "persons", Endpoint: contactEnd}}
}

func fold(t *testing.T, rules Rules, doc map[string]any, steps ...*Result) (map[string]any, []Step) {
	t.Helper()
	others := func(index, id string) (int64, map[string]any) {
		return 4, map[string]any{"display_name": "Ada"}
	}
	f, err := NewLinkedFold(rules, []string{"contacts"}, doc, 0, others)
	if err != nil {
		t.Fatal(err)
	}
	var st []Step
	for _, s := range steps {
		st = append(st, f.Apply(s))
	}
	return f.Doc(), st
}

func contacts(doc map[string]any) []any { a, _ := doc["contacts"].([]any); return a }

func TestLinkedFoldRules(t *testing.T) {
	soft := Rules{TombstoneField: "deleted"}
	// A relation before its entity: a document that is not live holds it.
	doc, _ := fold(t, soft, nil, item(OpIndex, "r1", 1, 10, map[string]any{"role": "billing"}))
	if doc[LiveKey] != false || len(contacts(doc)) != 1 {
		t.Fatalf("relation first: %v", doc)
	}
	// The entity comes: live, with the item and the other's name.
	doc, _ = fold(t, soft, doc, entity(OpIndex, 1, 5, map[string]any{"display_name": "ACME"}, false))
	it := contacts(doc)[0].(map[string]any)
	if doc[LiveKey] != true || doc["display_name"] != "ACME" || it["name"] != "Ada" || it["role"] != "billing" || it["person_id"] != "p1" {
		t.Fatalf("entity after relation: %v", doc)
	}
	// An older event of the relation, redelivered: stale; the same again: stale.
	_, st := fold(t, soft, doc, item(OpIndex, "r1", 1, 10, map[string]any{"role": "sales"}))
	if st[0] != Stale {
		t.Fatalf("redelivered relation event: %v", st)
	}
	// The relation deleted: the item goes; its older create, late: stale.
	doc, _ = fold(t, soft, doc, item(OpDelete, "r1", 2, 20, nil))
	if len(contacts(doc)) != 0 {
		t.Fatalf("after the relation's delete: %v", doc)
	}
	if _, st = fold(t, soft, doc, item(OpIndex, "r1", 1, 10, map[string]any{"role": "x"})); st[0] != Stale {
		t.Fatalf("late create after delete: %v", st)
	}
	// A second relation, then the entity deleted and re-created: the old
	// relation stays out, even when its event comes late.
	doc, _ = fold(t, soft, doc, item(OpIndex, "r2", 1, 30, nil))
	doc, _ = fold(t, soft, doc, entity(OpDelete, 2, 40, nil, false), entity(OpIndex, 3, 50, map[string]any{"display_name": "ACME 2"}, false))
	if doc[LiveKey] != true || len(contacts(doc)) != 0 || doc["deleted"] != false {
		t.Fatalf("re-created entity: %v", doc)
	}
	if _, st = fold(t, soft, doc, item(OpIndex, "r2", 2, 35, map[string]any{"role": "old"})); st[0] != Stale {
		t.Fatalf("an earlier life's relation event: %v", st)
	}
	// A relation of the new life, older entity event redelivered: stale.
	doc, st = fold(t, soft, doc, item(OpIndex, "r3", 1, 60, nil), entity(OpIndex, 2, 41, map[string]any{"display_name": "old"}, true))
	if st[0] != Applied || st[1] != Stale || len(contacts(doc)) != 1 || doc["display_name"] != "ACME 2" {
		t.Fatalf("new life: %v %v", st, doc)
	}
	// Applying every step again changes nothing, byte for byte.
	b1, _ := Encode(doc)
	again, _ := fold(t, soft, doc, item(OpIndex, "r3", 1, 60, nil), entity(OpIndex, 3, 50, map[string]any{"display_name": "ACME 2"}, false))
	if b2, _ := Encode(again); string(b1) != string(b2) {
		t.Fatalf("replay changed the document:\n%s\n%s", b1, b2)
	}
}

func TestLinkedFoldHardDeleteKeepsAHolder(t *testing.T) {
	hard := Rules{}
	doc, _ := fold(t, hard, nil, entity(OpIndex, 1, 1, map[string]any{"display_name": "ACME"}, false), item(OpIndex, "r1", 1, 2, nil))
	doc, _ = fold(t, hard, doc, entity(OpDelete, 2, 3, nil, false))
	if doc[LiveKey] != false || doc["display_name"] != nil || len(contacts(doc)) != 0 || doc[MetaKey] == nil {
		t.Fatalf("hard delete: %v", doc)
	}
	// The holder keeps the delete: an older partial update is stale.
	if _, st := fold(t, hard, doc, entity(OpIndex, 1, 1, map[string]any{"x": 1}, true)); st[0] != Stale {
		t.Fatalf("older event after the delete: %v", st)
	}
}

func TestLinkedFoldAdoptsADocumentWithoutVersions(t *testing.T) {
	// Written before the index had relations: the entity at the engine's version.
	f, err := NewLinkedFold(Rules{TombstoneField: "deleted"}, []string{"contacts"}, map[string]any{"display_name": "ACME", "deleted": false}, 7, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st := f.Apply(entity(OpIndex, 7, 1, map[string]any{"display_name": "old"}, false)); st != Stale {
		t.Fatalf("event at the engine's version: %v", st)
	}
	if st := f.Apply(entity(OpIndex, 8, 2, map[string]any{"status": "active"}, true)); st != Applied {
		t.Fatalf("newer event: %v", st)
	}
	if d := f.Doc(); d["display_name"] != "ACME" || d["status"] != "active" || d[LiveKey] != true {
		t.Fatalf("adopted: %v", d)
	}
}
