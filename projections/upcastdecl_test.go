package projections_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/searchsync/searchsync/projections"
)

// declFile declares a projection reading schema_version 2 and one upcaster
// 1 → 2 with the given steps (YAML flow maps, one per line).
func declFile(steps ...string) string {
	return `projections:
  - name: p
    event_types: ["a.*"]
    index: ix
    schema_version: 2
    copy_all_of_after: true
upcasters:
  - name: up
    event_types: ["a.*"]
    from: 1
    steps:
      - ` + strings.Join(steps, "\n      - ") + "\n"
}

// Every step type on good input: the payload after upcasting.
func TestUpcastSteps(t *testing.T) {
	const in = `{"version":1,"code":7,"before":{"name":"Old"},"after":{"name":"New","score":"42","first":"Ada","last":"Lovelace","tmp":1}}`
	cases := []struct {
		name, step string
		want       map[string]any // paths → values after upcasting; nil value: absent
	}{
		{"rename in before and after", `{rename: name, to: display_name, in: [before, after]}`,
			map[string]any{"after.display_name": "New", "before.display_name": "Old", "after.name": nil, "before.name": nil}},
		{"rename to a new object", `{rename: after.name, to: after.names.display}`,
			map[string]any{"after.names.display": "New", "after.name": nil}},
		{"rename of an absent path", `{rename: after.nope, to: after.other}`, map[string]any{"after.other": nil}},
		{"rename in an absent object", `{rename: name, to: n, in: [missing, after]}`, map[string]any{"after.n": "New"}},
		{"copy", `{copy: code, to: legacy_code}`, map[string]any{"code": "7", "legacy_code": "7"}},
		{"default when absent", `{default: after.country, value: DE}`, map[string]any{"after.country": "DE"}},
		{"default when present", `{default: after.name, value: X}`, map[string]any{"after.name": "New"}},
		{"default object", `{default: after.tags, value: {a: 1}}`, map[string]any{"after.tags.a": "1"}},
		{"drop", `{drop: tmp, in: [after]}`, map[string]any{"after.tmp": nil, "after.name": "New"}},
		{"convert", `{convert: after.score, type: long}`, map[string]any{"after.score": "42"}},
		{"set", `{set: after.full_name, expr: 'payload.after.first + " " + payload.after.last'}`,
			map[string]any{"after.full_name": "Ada Lovelace"}},
		{"set with self", `{set: upper, expr: 'self.name.upperAscii()', in: [before, after]}`,
			map[string]any{"after.upper": "NEW", "before.upper": "OLD"}},
		{"set to an optional none", `{set: after.x, expr: 'payload.after.?nope'}`, map[string]any{"after.x": nil}},
		{"when false", `{drop: after.name, when: 'payload.code > 10'}`, map[string]any{"after.name": "New"}},
		{"when true", `{drop: after.name, when: 'payload.code == 7 && event.event_type == "a.updated"'}`, map[string]any{"after.name": nil}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := projections.NewSet()
			if err := s.AddFile("t.yaml", []byte(declFile(c.step))); err != nil {
				t.Fatal(err)
			}
			p, err := s.Upcast(event("a.updated", 1, in), 2)
			if err != nil {
				t.Fatal(err)
			}
			for path, want := range c.want {
				got, ok := projections.Lookup(p, path)
				if want == nil {
					if ok {
						t.Errorf("%s = %v, want absent", path, got)
					}
					continue
				}
				if !ok || fmtValue(got) != want {
					t.Errorf("%s = %v (present %v), want %v", path, got, ok, want)
				}
			}
		})
	}
}

func fmtValue(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case interface{ String() string }:
		return x.String()
	}
	return "?"
}

// Every step type on bad input is poison naming the upcaster, the step and
// the path.
func TestUpcastStepPoison(t *testing.T) {
	const in = `{"version":1,"code":"C-1","before":null,"after":{"name":"New","addr":"Berlin","score":"high","display_name":"X","first":"Ada"},"tags":[1]}`
	cases := []struct{ name, step, payload, want string }{
		{"rename: required and missing", `{rename: after.nope, to: after.x, required: true}`, in, "steps[0] (rename after.nope): after.nope is missing"},
		{"rename: overwrites", `{rename: name, to: display_name, in: [after]}`, in, `steps[0] (rename name): after.display_name is already present ("X")`},
		{"rename: through a string", `{rename: after.addr.city, to: after.city}`, in, "steps[0] (rename after.addr.city): after.addr is a string, not an object"},
		{"rename: in a non-object", `{rename: name, to: n, in: [tags]}`, in, "steps[0] (rename name): tags is an array, not an object"},
		{"copy: target through a string", `{copy: after.name, to: after.addr.name}`, in, "steps[0] (copy after.name): after.addr is a string, not an object"},
		{"default: through a string", `{default: after.addr.country, value: DE}`, in, "steps[0] (default after.addr.country): after.addr is a string, not an object"},
		{"drop: required and missing", `{drop: after.nope, required: true}`, in, "steps[0] (drop after.nope): after.nope is missing"},
		{"convert: type clash", `{convert: after.score, type: long}`, in, `steps[0] (convert after.score): after.score: a string "high" is not a long`},
		{"set: missing field", `{set: after.full, expr: 'payload.after.first + " " + payload.after.last'}`, in,
			`steps[0] (set after.full): expression "payload.after.first + \" \" + payload.after.last": no such key: last at payload.after.last (test it with has(payload.after.last)`},
		{"set: wrong type", `{set: after.n, expr: 'payload.after.name + 1'}`, in, `steps[0] (set after.n): expression "payload.after.name + 1": no such overload for + (column 20)`},
		{"when: not a boolean at run time", `{drop: after.name, when: 'payload.after.name'}`, in, `steps[0] (drop after.name): condition "payload.after.name" is string, not a boolean`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := projections.NewSet()
			if err := s.AddFile("t.yaml", []byte(declFile(c.step))); err != nil {
				t.Fatal(err)
			}
			_, err := s.Upcast(event("a.updated", 1, c.payload), 2)
			var pe *projections.PoisonError
			if !errors.As(err, &pe) {
				t.Fatalf("got %v, want poison", err)
			}
			if !strings.Contains(pe.Reason, "upcaster up (a.updated 1→2): ") || !strings.Contains(pe.Reason, c.want) {
				t.Fatalf("reason %q\nwant it to name the upcaster and hold %q", pe.Reason, c.want)
			}
		})
	}
}

// Invalid steps and expressions are errors when the file is added, naming
// the file, the line and the key of the step.
func TestUpcastStepCompileErrors(t *testing.T) {
	cases := []struct{ name, step, want string }{
		{"no action", `{to: x}`, "t.yaml:12: upcasters[0].steps[0]: (upcaster up) names 0 actions"},
		{"two actions", `{drop: a, rename: b, to: c}`, "t.yaml:12: upcasters[0].steps[0]: (upcaster up) names 2 actions"},
		{"rename without to", `{rename: a}`, "t.yaml:12: upcasters[0].steps[0].rename: (upcaster up) rename needs to"},
		{"drop with to", `{drop: a, to: b}`, "upcasters[0].steps[0].to: (upcaster up) drop takes no to"},
		{"empty segment", `{drop: after..name}`, `upcasters[0].steps[0].drop: (upcaster up) "after..name" has an empty segment`},
		{"event column", `{drop: "@id"}`, `"@id": an upcaster changes the payload`},
		{"overlapping", `{rename: a, to: a.b}`, `upcasters[0].steps[0].to: (upcaster up) "a" and "a.b" overlap`},
		{"convert: bad type", `{convert: a, type: int}`, `upcasters[0].steps[0].type: (upcaster up) "int" is not one of`},
		{"default without value", `{default: a}`, "default needs value"},
		{"required on set", `{set: a, expr: '1', required: true}`, "set takes no required"},
		{"expr: unknown variable", `{set: a, expr: 'paylod.x'}`, "t.yaml:12: upcasters[0].steps[0].expr: (upcaster up) at 1:1: undeclared reference to 'paylod' (did you mean 'payload'?)"},
		{"expr: type error", `{set: a, expr: '1 + "a"'}`, "upcasters[0].steps[0].expr: (upcaster up) at 1:3: found no matching overload for '_+_' applied to '(int, string)'"},
		{"expr: syntax error", `{set: a, expr: 'payload.'}`, "upcasters[0].steps[0].expr: (upcaster up) at 1:9: Syntax error"},
		{"when: not a condition", `{drop: a, when: '"yes"'}`, `upcasters[0].steps[0].when: (upcaster up) condition "\"yes\"" is a string, not a bool`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := projections.NewSet().AddFile("t.yaml", []byte(declFile(c.step)))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v\nwant it to hold %q", err, c.want)
			}
		})
	}
	bad := map[string]string{
		"from 0":      "upcasters:\n  - {event_types: [a], from: 0, steps: [{drop: x}]}\n",
		"no steps":    "upcasters:\n  - {event_types: [a], from: 1, steps: []}\n",
		"no patterns": "upcasters:\n  - {from: 1, steps: [{drop: x}]}\n",
		"unknown key": "upcasters:\n  - {event_types: [a], from: 1, steps: [{drop: x, nope: 1}]}\n",
	}
	for name, src := range bad {
		if err := projections.NewSet().AddFile("u.yaml", []byte(src)); err == nil || !strings.Contains(err.Error(), "u.yaml") {
			t.Errorf("%s: got %v, want an error naming the file", name, err)
		}
	}
	twice := "upcasters:\n  - {event_types: [a], from: 1, steps: [{drop: x}]}\n  - {event_types: [a], from: 1, steps: [{drop: y}]}\n"
	if err := projections.NewSet().AddFile("u.yaml", []byte(twice)); err == nil || !strings.Contains(err.Error(), "declared twice") {
		t.Errorf("twice: got %v", err)
	}
}

// Declared and Go upcasters chain: 1 → 2 declared, 2 → 3 in Go.
func TestUpcastChainDeclaredAndGo(t *testing.T) {
	s := projections.NewSet()
	if err := s.AddFile("t.yaml", []byte(declFile(`{rename: after.name, to: after.display_name}`))); err != nil {
		t.Fatal(err)
	}
	s.RegisterUpcaster("a.*", 2, func(p map[string]any) error {
		p["after"].(map[string]any)["v3"] = true
		return nil
	})
	p, err := s.Upcast(event("a.updated", 1, `{"after":{"name":"N"}}`), 3)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]any{"display_name": "N", "v3": true}; !reflect.DeepEqual(p["after"], want) {
		t.Fatalf("after = %v, want %v", p["after"], want)
	}
	if d := s.DeclaredUpcasters(); len(d) != 1 || d[0].Name != "up" || d[0].Steps[0].Rename != "after.name" {
		t.Fatalf("declared upcasters %+v", d)
	}
}
