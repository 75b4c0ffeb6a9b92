package projections_test

import (
	"encoding/json"
	"testing"
)

// BenchmarkProject is the CPU cost of upcasting and projecting one
// spec-shaped event and encoding its document.
func BenchmarkProject(b *testing.B) {
	s := newSet(&testing.T{})
	e := event("entity.customer.updated", 1, `{"tenant_key":"public","entity_type":"customer","entity_id":"x","code":"C-1001","version":5,
		"before":{"status":"draft","name":"Old"},"after":{"status":"active","name":"New","credit_limit":"1200","address":{"city":"Berlin","country":"DE"}},"actor":{"principal_type":"user","principal_id":"u1"}}`)
	b.ReportAllocs()
	for b.Loop() {
		r, err := s.Project(e, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := json.Marshal(r.Doc); err != nil {
			b.Fatal(err)
		}
	}
}
