package search_test

import (
	"testing"

	"github.com/searchsync/searchsync/examples/customer"
	"github.com/searchsync/searchsync/projections"
)

// BenchmarkConsumerDeclarative is BenchmarkConsumerRealistic (the realistic
// workload's 40,000 events, all schema_version 1, so every one is upcast)
// with the customer example's upcaster in Go (go: customer.UpcastV1, as
// before projections.yaml declared it), declared (declared), and declared
// with two computed fields (declared+computed: a status mapped to a label,
// a lower-cased display name, each where the event mentions its source).
// Compare consumer_µs/event. -count repeats each sub-benchmark in a row; a
// loop alternates them, so that the machine's load shifts all three alike:
//
//	for i in 1 2 3 4 5; do go test ./sink/search -run '^$' -bench ConsumerDeclarative -benchtime 1x; done
func BenchmarkConsumerDeclarative(b *testing.B) {
	computed := []projections.Field{
		{To: "status_label", Type: projections.TypeKeyword, When: "has(payload.after.status)",
			Expr: `{"draft": "Draft", "active": "Active", "suspended": "Suspended"}[payload.after.status]`},
		{To: "name_key", Type: projections.TypeKeyword, When: "has(payload.after.display_name)",
			Expr: "payload.after.display_name.lowerAscii()"},
	}
	for _, c := range []struct {
		name       string
		goUpcaster bool
		extra      []projections.Field
	}{
		{"go", true, nil},
		{"declared", false, nil},
		{"declared+computed", false, computed},
	} {
		b.Run(c.name, func(b *testing.B) {
			consumerRealistic(b, func(bd *bundle) *projections.Set {
				return customerSet(b, bd.alias, c.goUpcaster, c.extra...)
			})
		})
	}
}

// customerSet is the customer example's projection into alias, with its
// upcaster in Go (customer.UpcastV1) or declared (projections.yaml), plus
// extra fields.
func customerSet(tb testing.TB, alias string, goUpcaster bool, extra ...projections.Field) *projections.Set {
	tb.Helper()
	f, err := projections.ParseFile("projections.yaml", customer.ProjectionFile())
	if err != nil {
		tb.Fatal(err)
	}
	f.Projections[0].Index = alias
	f.Projections[0].Fields = append(f.Projections[0].Fields, extra...)
	set := projections.NewSet()
	if err := set.Add(f.Projections...); err != nil {
		tb.Fatal(err)
	}
	if goUpcaster {
		set.RegisterUpcaster("entity.customer.*", 1, customer.UpcastV1)
	} else if err := set.AddUpcasters(f.Upcasters...); err != nil {
		tb.Fatal(err)
	}
	return set
}
