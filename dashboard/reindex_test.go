package dashboard

import (
	"testing"
)

// One row per configured alias in its order, with its newest job; then one
// per other alias a job names. The percent is the seed's documents or the
// replay's position in its pass, absent in the other phases.
func TestReindexRows(t *testing.T) {
	aliases := []AliasDrift{{Alias: "orders", Drift: DriftNone}, {Alias: "customers", Drift: DriftDiffers}}
	jobs := []ReindexJob{
		{ID: 9, Alias: "customers", State: "running", Phase: "seed", DocsSeeded: 25, DocsTotal: 100},
		{ID: 7, Alias: "customers", State: "failed", Phase: "replay"},
		{ID: 8, Alias: "tenant_acme", State: "running", Phase: "replay", LastID: 30, Watermark: 0, OutboxHead: 120},
		{ID: 5, Alias: "orders", State: "succeeded", Phase: "verify"},
	}
	rows := reindexRows(aliases, jobs)
	if len(rows) != 3 || rows[0].Alias != "orders" || rows[1].Alias != "customers" || rows[2].Alias != "tenant_acme" {
		t.Fatalf("rows: %+v", rows)
	}
	if j := rows[1].Job; j == nil || j.ID != 9 || j.Percent == nil || *j.Percent != 25 {
		t.Errorf("customers: %+v; want job 9 at 25%%", j)
	}
	if j := rows[2].Job; j == nil || j.Percent == nil || *j.Percent != 25 || rows[2].Drift != DriftUnknown || rows[2].Message == "" {
		t.Errorf("tenant_acme: %+v %+v; want 30 of head 120 = 25%%, drift unknown with why", rows[2], j)
	}
	if j := rows[0].Job; j == nil || j.Percent != nil {
		t.Errorf("orders: %+v; want no percent in phase verify", j)
	}
	if rows := reindexRows(nil, nil); rows == nil || len(rows) != 0 {
		t.Errorf("no alias: %#v; want an empty list (JSON [])", rows)
	}
}
