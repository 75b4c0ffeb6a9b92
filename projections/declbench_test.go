package projections_test

import (
	"testing"

	"github.com/searchsync/searchsync/examples/customer"
	"github.com/searchsync/searchsync/internal/loadgen"
	"github.com/searchsync/searchsync/projections"
)

// computedBenchFields are the two computed fields of the declarative
// benchmarks (here and sink/search's BenchmarkConsumerDeclarative): a
// status mapped to a label and a lower-cased name, each where the event
// mentions its source.
var computedBenchFields = []projections.Field{
	{To: "status_label", Type: projections.TypeKeyword, When: "has(payload.after.status)",
		Expr: `{"draft": "Draft", "active": "Active", "suspended": "Suspended"}[payload.after.status]`},
	{To: "name_key", Type: projections.TypeKeyword, When: "has(payload.after.display_name)",
		Expr: "payload.after.display_name.lowerAscii()"},
}

// customerSet is the customer example with its upcaster in Go (goUpcaster:
// customer.UpcastV1, as before projections.yaml declared it) or declared,
// plus extra fields.
func customerSet(tb testing.TB, goUpcaster bool, extra ...projections.Field) *projections.Set {
	tb.Helper()
	f, err := projections.ParseFile("projections.yaml", customer.ProjectionFile())
	if err != nil {
		tb.Fatal(err)
	}
	s := projections.NewSet()
	f.Projections[0].Fields = append(f.Projections[0].Fields, extra...)
	if err := s.Add(f.Projections...); err != nil {
		tb.Fatal(err)
	}
	if goUpcaster {
		s.RegisterUpcaster("entity.customer.*", 1, customer.UpcastV1)
	} else if err := s.AddUpcasters(f.Upcasters...); err != nil {
		tb.Fatal(err)
	}
	return s
}

// BenchmarkUpcastProject is decoding, upcasting and projecting the realistic
// workload's events (schema_version 1: every one is upcast) with the Go
// upcaster, the declared one, and the declared one plus two computed fields:
//
//	go test ./projections -run '^$' -bench UpcastProject -count 5
func BenchmarkUpcastProject(b *testing.B) {
	evs := loadgen.Realistic().Make()[:4000]
	for i := range evs {
		evs[i].ID, evs[i].SchemaVersion = int64(i+1), 1
	}
	for _, c := range []struct {
		name  string
		set   *projections.Set
		check string
	}{
		{"go", customerSet(b, true), ""},
		{"declared", customerSet(b, false), ""},
		{"declared+computed", customerSet(b, false, computedBenchFields...), "status_label"},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				e := &evs[n%len(evs)]
				n++
				r, err := c.set.Project(e, nil, nil)
				if err != nil {
					b.Fatal(err)
				}
				if c.check != "" && r.Op == projections.OpIndex && e.EventType == "entity.customer.created" && r.Doc[c.check] == nil {
					b.Fatalf("no %s in %v", c.check, r.Doc)
				}
			}
		})
	}
}
