package projections_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/projections"
)

const file = `
projections:
  - name: customer
    event_types: ["entity.customer.*"]
    aggregate_types: [DDM_ENTITY]
    index: customers
    schema_version: 2
    ignore_on: ["*.viewed"]
    copy_all_of_after: true
    fields:
      - {from: code, to: code, type: keyword}
      - {from: tenant_key, type: keyword}
      - {from: after.credit_limit, to: credit_limit, type: long}
      - {from: actor.principal_id, to: updated_by, type: keyword}
      - {from: "@event_type", to: last_event}
`

func newSet(t *testing.T) *projections.Set {
	t.Helper()
	s := projections.NewSet()
	if err := s.AddFile("test.yaml", []byte(file)); err != nil {
		t.Fatal(err)
	}
	// v1 called the display name "name"; v2 calls it "display_name".
	s.RegisterUpcaster("entity.customer.*", 1, func(p map[string]any) error {
		for _, k := range []string{"before", "after"} {
			if m, ok := p[k].(map[string]any); ok {
				if v, ok := m["name"]; ok {
					m["display_name"] = v
					delete(m, "name")
				}
			}
		}
		return nil
	})
	return s
}

var aggID = uuid.MustParse("9c2d1c3e-0000-4000-8000-000000000001")

func event(typ string, schema int, payload string) *outbox.Event {
	id := aggID
	return &outbox.Event{ID: 7, EventType: typ, SchemaVersion: schema, AggregateType: "DDM_ENTITY", AggregateID: &id, Payload: json.RawMessage(payload)}
}

func project(t *testing.T, s *projections.Set, e *outbox.Event) (*projections.Result, error) {
	t.Helper()
	return s.Project(e, nil, nil)
}

func TestProjectPartialUpdate(t *testing.T) {
	s := newSet(t)
	r, err := project(t, s, event("entity.customer.updated", 1, `{"tenant_key":"public","entity_type":"customer","entity_id":"x","code":"C-1001","version":5,
		"before":{"status":"draft","name":"Old"},"after":{"status":"active","name":"New","credit_limit":"1200"},"actor":{"principal_type":"user","principal_id":"u1"}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"status": "active", "display_name": "New", "credit_limit": json.Number("1200"),
		"code": "C-1001", "tenant_key": "public", "updated_by": "u1", "last_event": "entity.customer.updated"}
	if !reflect.DeepEqual(r.Doc, want) {
		t.Fatalf("doc = %#v\nwant %#v", r.Doc, want)
	}
	if r.Op != projections.OpIndex || !r.Partial || r.Version != 5 || r.ID != aggID.String() || r.Tenant != "public" || r.Index != "customers" {
		t.Fatalf("result = %+v", r)
	}
}

func TestProjectOps(t *testing.T) {
	s := newSet(t)
	for typ, want := range map[string]projections.Op{
		"entity.customer.created": projections.OpIndex,
		"entity.customer.deleted": projections.OpDelete,
		"entity.customer.viewed":  projections.OpIgnore,
	} {
		r, err := project(t, s, event(typ, 2, `{"version":1,"after":{"a":1}}`))
		if err != nil {
			t.Fatal(err)
		}
		if r.Op != want {
			t.Errorf("%s: op %s, want %s", typ, r.Op, want)
		}
		if typ == "entity.customer.created" && r.Partial {
			t.Errorf("created should carry the full state")
		}
	}
	if r, err := project(t, s, event("entity.order.created", 1, `{"version":1}`)); r != nil || err != nil {
		t.Fatalf("unmatched event: %v %v", r, err)
	}
}

func TestPoison(t *testing.T) {
	s := newSet(t)
	cases := map[string]struct {
		schema  int
		payload string
		want    string
	}{
		"missing version":  {1, `{"after":{}}`, `no version at "version"`},
		"string version":   {1, `{"version":"5"}`, `is a string "5", not an integer`},
		"float version":    {1, `{"version":5.5}`, `is 5.5, not an integer`},
		"negative version": {1, `{"version":-1}`, `negative`},
		"schema 99":        {99, `{"version":1}`, `schema_version 99 is newer than any upcaster or projection knows (newest for entity.customer.updated is 2)`},
		// Written by plain SQL (the Go writer turns 0 into the default 1).
		"schema 0":         {0, `{"version":1}`, `schema_version 0 is below 1 (the spec's minimum); fix the producer`},
		"schema -2":        {-2, `{"version":1}`, `schema_version -2 is below 1 (the spec's minimum); fix the producer`},
		"bad long":         {2, `{"version":1,"after":{"credit_limit":"lots"}}`, `field credit_limit (from after.credit_limit): a string "lots" is not a long`},
		"after not object": {2, `{"version":1,"after":[1]}`, `after is an array, not an object`},
	}
	for name, c := range cases {
		_, err := project(t, s, event("entity.customer.updated", c.schema, c.payload))
		var pe *projections.PoisonError
		if !errors.As(err, &pe) {
			t.Errorf("%s: err = %v, want *PoisonError", name, err)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v\nwant it to contain %q", name, err, c.want)
		}
	}
}

func TestUpcasterGap(t *testing.T) {
	s := projections.NewSet()
	if err := s.Add(projections.Projection{Name: "p", EventTypes: []string{"a.b"}, Index: "x", SchemaVersion: 3}); err != nil {
		t.Fatal(err)
	}
	s.RegisterUpcaster("a.b", 2, func(map[string]any) error { return nil })
	_, err := s.Project(event("a.b", 1, `{"version":1}`), nil, nil)
	if err == nil || !strings.Contains(err.Error(), "no upcaster for a.b from schema_version 1 to 2") {
		t.Fatalf("err = %v", err)
	}
}

func TestGoFunc(t *testing.T) {
	s := projections.NewSet()
	s.RegisterFunc("upper", func(in *projections.Input, out *projections.Result) error {
		out.Doc["code"] = strings.ToUpper(in.Payload["code"].(string))
		if in.Payload["archived"] == true {
			out.Op = projections.OpDelete
		}
		return nil
	})
	if err := s.Add(projections.Projection{Name: "p", EventTypes: []string{"a.*"}, Index: "x", Go: "upper", Version: "@id"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	r, err := s.Project(event("a.changed", 1, `{"code":"c-1","archived":true}`), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Doc["code"] != "C-1" || r.Op != projections.OpDelete || r.Version != 7 {
		t.Fatalf("result = %+v", r)
	}
}

func TestParseErrors(t *testing.T) {
	for name, c := range map[string]struct{ src, want string }{
		"unknown key": {"projections:\n  - name: a\n    event_types: [x.y]\n    index: i\n    colour: red\n", "colour"},
		"no index":    {"projections:\n  - name: a\n    event_types: [x.y]\n", `p.yaml:2: projection "a": projections[0].index: is required`},
		"bad type":    {"projections:\n  - name: a\n    event_types: [x.y]\n    index: i\n    fields:\n      - {from: a, type: strng}\n", `p.yaml:6: projection "a": projections[0].fields[0].type: "strng" is not one of`},
		"bad column":  {"projections:\n  - name: a\n    event_types: [x.y]\n    index: i\n    id: '@nope'\n", `p.yaml:5: projection "a": projections[0].id: "@nope" names no event column`},
	} {
		_, err := projections.Parse("p.yaml", []byte(c.src))
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "p.yaml") {
			t.Errorf("%s: err = %v, want %q", name, err, c.want)
		}
	}
}

func TestDeepMerge(t *testing.T) {
	cur := map[string]any{"a": 1, "addr": map[string]any{"city": "X", "zip": "1"}, "tags": []any{"a"}, "keep": true}
	got := projections.DeepMerge(cur, map[string]any{"addr": map[string]any{"city": "Y"}, "tags": []any{"b"}, "a": nil, "new": "n"})
	want := map[string]any{"a": nil, "addr": map[string]any{"city": "Y", "zip": "1"}, "tags": []any{"b"}, "keep": true, "new": "n"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("merge = %#v", got)
	}
}

func TestProperties(t *testing.T) {
	s := projections.NewSet()
	if err := s.Add(projections.Projection{Name: "p", EventTypes: []string{"a.b"}, Index: "x", Fields: []projections.Field{
		{From: "n", To: "name", Type: projections.TypeText, Keyword: true},
		{From: "c", To: "address.city", Type: projections.TypeKeyword},
		{From: "raw"},
	}}); err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(s.Properties("x"))
	want := `{"address":{"properties":{"city":{"type":"keyword"}}},"name":{"fields":{"keyword":{"ignore_above":256,"type":"keyword"}},"type":"text"}}`
	if string(got) != want {
		t.Fatalf("properties %s", got)
	}
}

// The document of a projection without a Go function is built on the
// payload's own After (no copy of it); it must come out as if it were a
// copy: every field reads the payload as decoded, and no part of the
// document is another part of it.
func TestDocumentAsIfCopied(t *testing.T) {
	s := projections.NewSet()
	if err := s.Add(projections.Projection{Name: "p", EventTypes: []string{"a.*"}, Index: "x", Version: "@id", CopyAllOfAfter: true,
		Fields: []projections.Field{
			{From: "after.address", To: "addr"},               // an object of After, under another name
			{From: "after.name", To: "name", Type: "keyword"}, // overwrites after.name in the document…
			{From: "after.name", To: "name_too"},              // …and is read from the payload as it was
			{From: "@event_type", To: "address.zip"},          // into the object that addr copied
			{From: "after.tags", To: "labels", Type: "keyword"},
			{From: "after.missing", To: "name"},
		}}); err != nil {
		t.Fatal(err)
	}
	r, err := s.Project(event("a.changed", 1, `{"after":{"name":7,"address":{"city":"Berlin"},"tags":["x"]}}`), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"name": "7", "name_too": json.Number("7"),
		"address": map[string]any{"city": "Berlin", "zip": "a.changed"},
		"addr":    map[string]any{"city": "Berlin"},
		"tags":    []any{"x"}, "labels": []any{"x"},
	}
	if !reflect.DeepEqual(r.Doc, want) {
		t.Fatalf("doc = %#v\nwant %#v", r.Doc, want)
	}
	r.Doc["tags"].([]any)[0] = "changed"
	if r.Doc["labels"].([]any)[0] != "x" {
		t.Error("labels and tags are one array")
	}
}
