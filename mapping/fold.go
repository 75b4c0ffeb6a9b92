package mapping

import "github.com/searchsync/searchsync/projections"

// FoldRules are what the definition says about the documents
// projections.Fold builds for the index: the tenant field of an index that
// tenants share, the tombstone field of soft deletes.
func (d *Def) FoldRules() projections.Rules {
	var r projections.Rules
	if d.Tenancy.Mode == TenancyShared {
		r.TenantField = d.Tenancy.Field
	}
	if d.DeleteMode == DeleteSoft {
		r.TombstoneField = d.TombstoneField
	}
	return r
}
