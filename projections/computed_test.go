package projections_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/searchsync/searchsync/projections"
)

const computedFile = `
projections:
  - name: person
    event_types: ["person.*"]
    index: people
    delete_when: 'has(payload.after.status) && payload.after.status == "archived"'
    ignore_when: 'payload.?draft.orValue(false)'
    fields:
      - {from: after.first, to: first}
      - to: full_name
        expr: 'payload.after.first + " " + payload.after.last'
        when: 'has(payload.after.first) || has(payload.after.last)'
        type: text
      - to: phone
        expr: 'payload.after.phone.replace(" ", "").replace("-", "").replace("(", "").replace(")", "")'
        when: 'has(payload.after.phone)'
        type: keyword
      - to: status_label
        expr: '{"draft": "Draft", "active": "Active"}[payload.after.status]'
        when: 'has(payload.after.status)'
      - {to: score2, expr: 'payload.after.?score.orValue(0) * 2', type: long}
      - {to: kind, expr: 'event.event_type.split(".")[1]'}
`

func computedSet(t testing.TB) *projections.Set {
	t.Helper()
	s := projections.NewSet()
	if err := s.AddFile("c.yaml", []byte(computedFile)); err != nil {
		t.Fatal(err)
	}
	return s
}

// Computed fields: from others, a normalised phone number, a status mapped
// to a label, a number, an event column; `when` false leaves a field out.
func TestComputedFields(t *testing.T) {
	s := computedSet(t)
	r, err := s.Project(event("person.created", 1, `{"version":3,"after":{"first":"Ada","last":"Lovelace","phone":"+49 (30) 123-456","status":"active","score":21}}`), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"first": "Ada", "full_name": "Ada Lovelace", "phone": "+4930123456", "status_label": "Active", "score2": "42", "kind": "created"}
	for k, v := range want {
		if fmtValue(r.Doc[k]) != v {
			t.Errorf("%s = %#v, want %q", k, r.Doc[k], v)
		}
	}
	r, err = s.Project(event("person.updated", 1, `{"version":4,"after":{"score":1}}`), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"first", "full_name", "phone", "status_label"} {
		if v, ok := r.Doc[k]; ok {
			t.Errorf("%s = %v, want it left out (not mentioned)", k, v)
		}
	}
}

// delete_when and ignore_when decide by the payload.
func TestConditions(t *testing.T) {
	s := computedSet(t)
	cases := map[string]projections.Op{
		`{"version":1,"after":{"status":"archived"}}`:              projections.OpDelete,
		`{"version":1,"after":{"status":"active"}}`:                projections.OpIndex,
		`{"version":1,"after":{}}`:                                 projections.OpIndex,
		`{"version":1,"draft":true,"after":{"status":"archived"}}`: projections.OpIgnore,
	}
	for payload, want := range cases {
		r, err := s.Project(event("person.updated", 1, payload), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.Op != want {
			t.Errorf("%s: op %s, want %s", payload, r.Op, want)
		}
	}
}

// A computed field or condition failing on a payload is poison naming the
// projection, the field (or key) and the path; an invalid one is a compile
// error naming the file, line and key.
func TestComputedErrors(t *testing.T) {
	proj := func(extra string) string {
		return "projections:\n  - name: p\n    event_types: [\"a.*\"]\n    index: ix\n" + extra
	}
	run := []struct{ name, decl, payload, want string }{
		{"missing field", "    fields:\n      - {to: full, expr: 'payload.after.first + payload.after.last'}\n", `{"version":1,"after":{"first":"A"}}`,
			`field full (expr): expression "payload.after.first + payload.after.last": no such key: last at payload.after.last`},
		{"wrong type", "    fields:\n      - {to: n, expr: 'payload.after.first * 2'}\n", `{"version":1,"after":{"first":"A"}}`,
			`field n (expr): expression "payload.after.first * 2": no such overload for * (column 21)`},
		{"result type clash", "    fields:\n      - {to: n, expr: 'payload.after.first', type: long}\n", `{"version":1,"after":{"first":"A"}}`,
			`field n (expr "payload.after.first"): a string "A" is not a long`},
		{"when on a missing field", "    fields:\n      - {to: n, expr: '1', when: 'payload.after.flag'}\n", `{"version":1,"after":{}}`,
			`field n (when): expression "payload.after.flag": no such key: flag at payload.after.flag`},
		{"delete_when on a missing field", "    delete_when: 'payload.after.status == \"archived\"'\n", `{"version":1,"after":{}}`,
			`delete_when: expression "payload.after.status == \"archived\"": no such key: status at payload.after.status (test it with has(payload.after.status), or read it with payload.after.?status.orValue(""))`},
		{"ignore_when not a boolean", "    ignore_when: 'payload.after.status'\n", `{"version":1,"after":{"status":"x"}}`,
			`ignore_when: condition "payload.after.status" is string, not a boolean`},
		{"result not JSON", "    fields:\n      - {to: n, expr: 'duration(\"1s\") + timestamp(\"2020-01-01T00:00:00Z\")', type: long}\n", `{"version":1,"after":{}}`,
			`field n (expr "duration(\"1s\") + timestamp(\"2020-01-01T00:00:00Z\")"): a string "2020-01-01T00:00:01Z" is not a long`},
	}
	for _, c := range run {
		t.Run(c.name, func(t *testing.T) {
			s := projections.NewSet()
			if err := s.AddFile("p.yaml", []byte(proj(c.decl))); err != nil {
				t.Fatal(err)
			}
			_, err := s.Project(event("a.updated", 1, c.payload), nil, nil)
			var pe *projections.PoisonError
			if !errors.As(err, &pe) {
				t.Fatalf("got %v, want poison", err)
			}
			if pe.Projection != "p" || !strings.Contains(pe.Reason, c.want) {
				t.Fatalf("poison %q (projection %q)\nwant it to hold %q", pe.Reason, pe.Projection, c.want)
			}
		})
	}
	compile := []struct{ name, decl, want string }{
		{"unknown variable", "    fields:\n      - {to: n, expr: 'paylod.after.x'}\n", `p.yaml:6: projection "p": projections[0].fields[0].expr: at 1:1: undeclared reference to 'paylod' (did you mean 'payload'?)`},
		{"type error", "    fields:\n      - {to: n, expr: '\"a\" - 1'}\n", `p.yaml:6: projection "p": projections[0].fields[0].expr: at 1:5: found no matching overload for '_-_' applied to '(string, int)'`},
		{"from and expr", "    fields:\n      - {from: a, to: n, expr: '1'}\n", `p.yaml:6: projection "p": projections[0].fields[0]: names exactly one of from and expr`},
		{"expr without to", "    fields:\n      - {expr: '1'}\n", `fields[0].to: is required for a computed field`},
		{"when not a condition", "    fields:\n      - {to: n, expr: '1', when: '1 + 1'}\n", `fields[0].when: condition "1 + 1" is an int, not a bool`},
		{"delete_when not a condition", "    delete_when: '\"archived\"'\n", `p.yaml:5: projection "p": projections[0].delete_when: condition "\"archived\"" is a string, not a bool`},
		{"ignore_when syntax", "    ignore_when: 'payload.after.'\n", `p.yaml:5: projection "p": projections[0].ignore_when: at 1:15: Syntax error`},
	}
	for _, c := range compile {
		t.Run(c.name, func(t *testing.T) {
			err := projections.NewSet().AddFile("p.yaml", []byte(proj(c.decl)))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v\nwant it to hold %q", err, c.want)
			}
		})
	}
}

// A condition that is only has(payload.…) is tested without CEL, with
// CEL's answers: true, false, and an error when the object holding the key
// is absent.
func TestHasFastPath(t *testing.T) {
	s := projections.NewSet()
	decl := "projections:\n  - name: p\n    event_types: [\"a.*\"]\n    index: ix\n    fields:\n      - {to: n, expr: '1', when: 'has(payload.after.x)'}\n      - {to: m, expr: '2', when: 'has(payload.top)'}\n"
	if err := s.AddFile("p.yaml", []byte(decl)); err != nil {
		t.Fatal(err)
	}
	for payload, want := range map[string]string{
		`{"version":1,"after":{"x":null}}`:  "n m-",
		`{"version":1,"after":{}}`:          "n- m-",
		`{"version":1,"top":1}`:             "error",
		`{"version":1,"after":"s","top":1}`: "n- m", // as CEL says
	} {
		r, err := s.Project(event("a.updated", 1, payload), nil, nil)
		got := "error"
		if err == nil {
			got = ""
			for _, k := range []string{"n", "m"} {
				if _, ok := r.Doc[k]; ok {
					got += k + " "
				} else {
					got += k + "- "
				}
			}
			got = strings.TrimSpace(got)
		}
		if got != want {
			t.Errorf("%s: %s (%v), want %s", payload, got, err, want)
		}
	}
}
