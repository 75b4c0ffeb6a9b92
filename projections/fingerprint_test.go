package projections_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/searchsync/searchsync/projections"
)

const fpFile = `
projections:
  - name: customer
    event_types: ["entity.customer.*"]
    index: customers
    schema_version: 2
    copy_all_of_after: true
    fields:
      - {from: code, to: code, type: keyword}
      - {from: after.name, to: name, type: text}
  - name: order
    event_types: ["entity.order.*"]
    index: orders
    fields:
      - {from: total, type: double}
`

// The same projections: other key order, flow vs block style, comments,
// whitespace, explicit defaults.
const fpFileReformatted = `
# the customers
projections:
  - index: customers          # alias
    name: customer
    copy_all_of_after: true
    schema_version: 2
    event_types:
      - entity.customer.*
    id: "@aggregate_id"       # the default, written out
    delete_on: ["*.deleted"]  # the default too
    fields:
      - type: keyword
        from: code
        to: code

      - {to: name, type: text, from: after.name}
  - {name: order, index: orders, event_types: [entity.order.*], fields: [{from: total, type: double}]}
`

func fpSet(t *testing.T, yaml string, upcasters ...string) *projections.Set {
	t.Helper()
	s := projections.NewSet()
	if err := s.AddFile("fp.yaml", []byte(yaml)); err != nil {
		t.Fatal(err)
	}
	for _, pat := range upcasters {
		s.RegisterUpcaster(pat, 1, func(map[string]any) error { return nil })
	}
	return s
}

func TestFingerprintStableAcrossFormatting(t *testing.T) {
	t.Parallel()
	a := fpSet(t, fpFile).Fingerprint("customers")
	b := fpSet(t, fpFileReformatted).Fingerprint("customers")
	if a.Hash != b.Hash || !reflect.DeepEqual(a, b) {
		t.Fatalf("reformatted YAML changed the fingerprint:\n%+v\n%+v", a, b)
	}
	if again := fpSet(t, fpFile).Fingerprint("customers"); !reflect.DeepEqual(a, again) {
		t.Fatalf("fingerprint not deterministic:\n%+v\n%+v", a, again)
	}
	if c := a.Changes(b); c != nil {
		t.Fatalf("Changes of equal fingerprints = %q", c)
	}
	// Kept in _meta as JSON and read back: equal.
	raw, _ := json.Marshal(a)
	var back projections.Fingerprint
	if err := json.Unmarshal(raw, &back); err != nil || !reflect.DeepEqual(a, &back) {
		t.Fatalf("round trip: %v\n%+v\n%+v", err, a, &back)
	}
}

func TestFingerprintChangesOnAFieldChange(t *testing.T) {
	t.Parallel()
	old := fpSet(t, fpFile).Fingerprint("customers")
	edited := strings.Replace(fpFile, "      - {from: after.name, to: name, type: text}\n",
		"      - {from: after.name, to: full_name, type: text}\n      - {from: code, to: code, type: text}\n", 1)
	edited = strings.Replace(edited, "      - {from: code, to: code, type: keyword}\n", "", 1)
	now := fpSet(t, edited).Fingerprint("customers")
	if now.Hash == old.Hash {
		t.Fatal("a field change did not change the fingerprint")
	}
	got := now.Changes(old)
	want := []string{"projection customer changed: fields added full_name; removed name; changed code"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Changes = %q, want %q", got, want)
	}

	other := strings.Replace(fpFile, "    schema_version: 2\n", "    schema_version: 2\n    ignore_on: [\"*.viewed\"]\n", 1)
	if got := fpSet(t, other).Fingerprint("customers").Changes(old); !reflect.DeepEqual(got, []string{"projection customer changed: ignore_on changed"}) {
		t.Fatalf("Changes after ignore_on = %q", got)
	}
}

func TestFingerprintChangesOnAnUpcasterChange(t *testing.T) {
	t.Parallel()
	old := fpSet(t, fpFile).Fingerprint("customers")
	now := fpSet(t, fpFile, "entity.customer.*").Fingerprint("customers")
	if now.Hash == old.Hash {
		t.Fatal("an upcaster did not change the fingerprint")
	}
	if got, want := now.Changes(old), []string{"projection customer changed: upcaster entity.customer.* from 1 added"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Changes = %q, want %q", got, want)
	}
	// An upcaster of another aggregate's events does not apply.
	if fp := fpSet(t, fpFile, "entity.order.*").Fingerprint("customers"); fp.Hash != old.Hash {
		t.Fatalf("an upcaster of entity.order.* changed the customers fingerprint: %q", fp.Changes(old))
	}
	// Patterns that overlap without being equal do.
	for _, pat := range []string{"*", "entity.*.created", "entity.cust?mer.*", "entity.[c]ustomer.updated"} {
		if fp := fpSet(t, fpFile, pat).Fingerprint("customers"); fp.Hash == old.Hash {
			t.Errorf("upcaster %q does not count for entity.customer.*", pat)
		}
	}
}

func TestFingerprintIgnoresOtherIndexes(t *testing.T) {
	t.Parallel()
	old := fpSet(t, fpFile)
	edited := strings.Replace(fpFile, "      - {from: total, type: double}\n", "      - {from: total, type: double}\n      - {from: currency, type: keyword}\n", 1)
	now := fpSet(t, edited)
	if old.Fingerprint("customers").Hash != now.Fingerprint("customers").Hash {
		t.Fatal("a change of the orders projection changed the customers fingerprint")
	}
	if old.Fingerprint("orders").Hash == now.Fingerprint("orders").Hash {
		t.Fatal("a change of the orders projection did not change its fingerprint")
	}
	if got := now.Fingerprint("orders").Changes(old.Fingerprint("orders")); !reflect.DeepEqual(got, []string{"projection order changed: fields added currency"}) {
		t.Fatalf("Changes = %q", got)
	}
}

func TestFingerprintAddedRemovedReordered(t *testing.T) {
	t.Parallel()
	two := fpFile + `
  - name: customer_notes
    event_types: ["entity.note.*"]
    index: customers
`
	one := fpSet(t, fpFile).Fingerprint("customers")
	both := fpSet(t, two).Fingerprint("customers")
	if got := both.Changes(one); !reflect.DeepEqual(got, []string{"projection customer_notes added"}) {
		t.Fatalf("added: %q", got)
	}
	if got := one.Changes(both); !reflect.DeepEqual(got, []string{"projection customer_notes removed"}) {
		t.Fatalf("removed: %q", got)
	}
	s := projections.NewSet()
	ps, err := projections.Parse("two.yaml", []byte(two))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Add(ps[2], ps[0], ps[1]); err != nil {
		t.Fatal(err)
	}
	if got := s.Fingerprint("customers").Changes(both); !reflect.DeepEqual(got, []string{"projections reordered (the first projection that matches an event wins)"}) {
		t.Fatalf("reordered: %q", got)
	}
	if empty := projections.NewSet().Fingerprint("customers"); empty.Hash == "" || empty.Hash == one.Hash {
		t.Fatalf("fingerprint of no projection: %+v", empty)
	}
}

// A declared upcaster counts by its declaration: a changed step changes the
// fingerprint of the projections it applies to; its name and layout do not.
func TestFingerprintDeclaredUpcaster(t *testing.T) {
	t.Parallel()
	withUp := func(up string) *projections.Fingerprint {
		return fpSet(t, fpFile+"upcasters:\n"+up).Fingerprint("customers")
	}
	base := withUp("  - {name: rename, event_types: [\"entity.customer.*\"], from: 1, steps: [{rename: name, to: display_name, in: [before, after]}]}\n")
	same := withUp(`  - event_types:
      - entity.customer.*       # another layout, no name
    from: 1
    steps:
      - in: [before, after]
        to: display_name
        rename: name
`)
	if base.Hash != same.Hash {
		t.Fatalf("layout or name changed the fingerprint: %q", same.Changes(base))
	}
	changed := withUp("  - {name: rename, event_types: [\"entity.customer.*\"], from: 1, steps: [{rename: name, to: full_name, in: [before, after]}]}\n")
	if got, want := changed.Changes(base), []string{"projection customer changed: upcaster entity.customer.* from 1 changed"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Changes = %q, want %q", got, want)
	}
	if got := base.Projections["customer"].Upcasters["entity.customer.* from 1"]; got == "" || got == "go" {
		t.Fatalf("declared upcaster summarised as %q", got)
	}
	// Not the orders projection's business.
	plain := fpSet(t, fpFile).Fingerprint("orders")
	if o := fpSet(t, fpFile+"upcasters:\n  - {event_types: [\"entity.customer.*\"], from: 1, steps: [{drop: x}]}\n").Fingerprint("orders"); o.Hash != plain.Hash {
		t.Fatal("a customer upcaster changed the orders fingerprint")
	}
}
