package config

import (
	"slices"
	"strings"
	"testing"
)

// lines are the lines of err's message.
func lines(err error) []string {
	if err == nil {
		return nil
	}
	return strings.Split(err.Error(), "\n")
}

// TestOneRunReportsEveryStage: an unknown key and a duration without a unit
// (decoding), a bad listen address and a route to a misspelt consumer
// (validation) and what a later Stage finds are all reported by one Parse,
// in the order of file and line, each with its file and line.
func TestOneRunReportsEveryStage(t *testing.T) {
	const yaml = `database:
  url: postgres://u@127.0.0.1:5432/db
relay:
  batch_sise: 100
  poll_interval: 5
http:
  listen: nope
consumers:
  - name: crm
    type: webhook
    webhook: {url: http://127.0.0.1:9999/hook, secret: whsec_c2VjcmV0}
routes:
  - consumer: crn
`
	stage := func(c *Config, r *Report) {
		r.AddIn("defs/orders.yaml", 3, "mappings", "is not an object")
		r.Add("consumers[0].name", "a later stage's complaint")
	}
	_, err := Parse("three.yaml", []byte(yaml), Stages(stage))
	want := []string{
		`three.yaml:4: relay.batch_sise: unknown field "batch_sise" (did you mean "batch_size"?)`,
		`three.yaml:5: relay.poll_interval: "5" is not a duration: write one with its unit, such as 500ms, 10s or 5m`,
		`three.yaml:7: http.listen: address nope: missing port in address`,
		`three.yaml:9: consumers[0].name: a later stage's complaint`,
		`three.yaml:13: routes[0].consumer: names unknown consumer "crn" (did you mean "crm"?)`,
		`defs/orders.yaml:3: mappings: is not an object`,
	}
	if got := lines(err); !slices.Equal(got, want) {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestUnreadValuesAreReportedOnce: a value the decoder could not read, or a
// misspelt key, is reported by the decoder only, not again by the checks
// that see its zero value in its place.
func TestUnreadValuesAreReportedOnce(t *testing.T) {
	cases := []struct {
		name, yaml string
		want       []string
	}{
		{"wrong type", "database: {url: [a, b]}\n",
			[]string{`x.yaml:1: database.url: a list is not a single value (quote it if it is meant as text)`}},
		{"list in block style", "database:\n  url:\n    - a\n",
			[]string{`x.yaml:3: database.url: a list is not a single value (quote it if it is meant as text)`}},
		{"mapping for a number", "database: {url: postgres://u@h/db}\nrelay:\n  batch_size:\n    n: 1\n",
			[]string{`x.yaml:4: relay.batch_size: a mapping is not a whole number`}},
		{"misspelt name", `database: {url: postgres://u@h/db}
consumers:
  - naem: hook
    type: webhook
    webhook: {url: http://127.0.0.1:9/, secret: whsec_c2VjcmV0}
routes:
  - consumer: hook
`, []string{`x.yaml:3: consumers[0].naem: unknown field "naem" (did you mean "name"?)`}},
		{"misspelt block", `database: {url: postgres://u@h/db}
consumers:
  - name: hook
    type: webhook
    webhok: {url: http://127.0.0.1:9/, secret: whsec_c2VjcmV0}
`, []string{`x.yaml:5: consumers[0].webhok: unknown field "webhok" (did you mean "webhook"?)`}},
		{"wrong type under a block", "database: {url: postgres://u@h/db}\nrelay: {backoff: 5s}\n",
			[]string{`x.yaml:2: relay.backoff: "5s" does not fit here (expected config.Backoff)`}},
	}
	for _, tc := range cases {
		_, err := Parse("x.yaml", []byte(tc.yaml))
		if got := lines(err); !slices.Equal(got, tc.want) {
			t.Errorf("%s: got\n%s\nwant\n%s", tc.name, strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
		}
	}
}

// TestSyntaxErrorSaysNothingElseWasChecked: a file that is not YAML cannot
// be checked further, and the one error says so.
func TestSyntaxErrorSaysNothingElseWasChecked(t *testing.T) {
	called := false
	_, err := Parse("syn.yaml", []byte("database:\n  url: postgres://u@h/db\nrelay: {batch_size: 1\nhttp: {listen: nope}\n"),
		Stages(func(*Config, *Report) { called = true }))
	got := lines(err)
	if len(got) != 1 || !strings.HasPrefix(got[0], "syn.yaml:") || !strings.HasSuffix(got[0], "(a YAML syntax error: nothing else in the file was checked)") {
		t.Fatalf("got %q", got)
	}
	if called {
		t.Error("a stage ran on a file that did not parse")
	}
}

// TestStageRunsAfterEarlierProblems: a Stage runs whatever decoding and
// validation found, and Reported tells it which keys they already
// complained about (the key, its parents, the keys under it).
func TestStageRunsAfterEarlierProblems(t *testing.T) {
	const yaml = `database: {url: postgres://u@h/db}
consumers:
  - name: s
    type: search
    search: {indexes: [customers], state_cache: many}
indexes:
  projections: [missing.yaml]
`
	reported := map[string]bool{}
	stage := func(c *Config, r *Report) {
		for _, k := range []string{"indexes.projections", "indexes.projections[0]", "indexes", "consumers[0].search.state_cache",
			"consumers[0].search", "consumers[0].search.indexes[0]", "indexes.definitions", "indexes.projections_x"} {
			reported[k] = r.Reported(k)
		}
		r.Add("consumers[0].search.indexes[0]", "checked")
	}
	_, err := Parse("s.yaml", []byte(yaml), Stages(stage))
	want := map[string]bool{"indexes.projections": true, "indexes.projections[0]": true, "indexes": true,
		"consumers[0].search.state_cache": true, "consumers[0].search": true, "consumers[0].search.indexes[0]": false,
		"indexes.definitions": false, "indexes.projections_x": false}
	for k, w := range want {
		if reported[k] != w {
			t.Errorf("Reported(%s) = %v, want %v", k, reported[k], w)
		}
	}
	if !strings.Contains(err.Error(), "s.yaml:5: consumers[0].search.indexes[0]: checked") {
		t.Errorf("the stage's problem is missing:\n%v", err)
	}
}

func TestDidYouMean(t *testing.T) {
	for _, tc := range []struct{ name, want string }{
		{"naem", ` (did you mean "name"?)`}, // two letters swapped: one edit
		{"custmers", ` (did you mean "customers"?)`},
		{"orders", ""},
	} {
		if got := DidYouMean(tc.name, []string{"name", "customers"}); got != tc.want {
			t.Errorf("DidYouMean(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestLineOf(t *testing.T) {
	data := []byte("{\n  \"alias\": \"a\",\n  \"tenancy\": {\n    \"mode\": \"x\"\n  }\n}\n")
	for key, want := range map[string]int{"alias": 2, "tenancy.mode": 4, "tenancy.field": 3, "nope": 0} {
		if got := LineOf(data, key); got != want {
			t.Errorf("LineOf(%s) = %d, want %d", key, got, want)
		}
	}
}
