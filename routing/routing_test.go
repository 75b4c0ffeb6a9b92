package routing

import (
	"slices"
	"testing"
)

func TestTable(t *testing.T) {
	tbl := &Table{Consumers: []string{"search", "crm", "audit"}, Routes: []Route{
		{Consumer: "search", EventTypes: []string{"entity.customer.*", "entity.order.*"}, AggregateTypes: []string{"DDM_ENTITY"}},
		{Consumer: "crm", EventTypes: []string{"entity.customer.created"}},
		{Consumer: "audit"},
		{Consumer: "crm", AggregateTypes: []string{"AA_ROLE"}},
	}}
	for _, c := range []struct {
		eventType, aggregateType string
		want                     []string
	}{
		{"entity.customer.created", "DDM_ENTITY", []string{"search", "crm", "audit"}},
		{"entity.customer.updated", "DDM_ENTITY", []string{"search", "audit"}},
		{"entity.customer.updated", "DDM_ENTITY_RELATION", []string{"audit"}},
		{"role.granted", "AA_ROLE", []string{"crm", "audit"}},
		{"entity.order.placed", "DDM_ENTITY", []string{"search", "audit"}},
	} {
		if got := tbl.To(c.eventType, c.aggregateType); !slices.Equal(got, c.want) {
			t.Errorf("%s of %s goes to %v, want %v", c.eventType, c.aggregateType, got, c.want)
		}
	}
	if tbl.Routed("nobody", "x", "y") {
		t.Error("an unknown consumer is routed")
	}
}
