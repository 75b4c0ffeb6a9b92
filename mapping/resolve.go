package mapping

import (
	"fmt"
	"slices"

	"github.com/searchsync/searchsync/projections"
)

// Resolve checks a projected result against the definitions a search
// consumer writes (its name and its indexes): the index is one of them and
// has a definition, and a per-tenant index gets a tenant it can name. What
// does not hold is a *projections.PoisonError. The search consumer and the
// projection dry run (projections/dryrun) both ask it, so that they cannot
// disagree.
func Resolve(defs Defs, consumer string, indexes []string, res *projections.Result) error {
	def := defs[res.Index]
	if def == nil || !slices.Contains(indexes, res.Index) {
		return &projections.PoisonError{Projection: res.Projection, Reason: fmt.Sprintf("index %q has no definition in consumer %s", res.Index, consumer)}
	}
	if def.Tenancy.Mode == TenancyPerTenant {
		if res.Tenant == "" {
			return &projections.PoisonError{Projection: res.Projection, Reason: fmt.Sprintf("index %s is per tenant but the event has no tenant key", def.Alias)}
		}
		if _, err := def.TenantAlias(res.Tenant); err != nil {
			return &projections.PoisonError{Projection: res.Projection, Reason: err.Error()}
		}
	}
	return nil
}
