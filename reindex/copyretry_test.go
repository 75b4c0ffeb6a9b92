package reindex

import (
	"encoding/json"
	"testing"

	"github.com/searchsync/searchsync/indexer"
)

// The failures of a server-side copy as Elasticsearch 7.17 and OpenSearch
// report them: a mapping update the loaded engine could not apply within
// 30 s (503) and a rejected execution (429) are worth a second copy; a
// document the new mapping refuses (400) is not.
func TestTemporaryCopyFailure(t *testing.T) {
	busy := `{"index":"rx_v2","type":"_doc","id":"767e0dcc","cause":{"type":"process_cluster_event_timeout_exception","reason":"failed to process cluster event (put-mapping [rx_v2/F8lb6G]) within 30s"},"status":503}`
	rejected := `{"index":"rx_v2","id":"a1","cause":{"type":"es_rejected_execution_exception","reason":"rejected execution"},"status":429}`
	refused := `{"index":"rx_v2","id":"b2","cause":{"type":"mapper_parsing_exception","reason":"failed to parse field [loyalty_tier] of type [long]"},"status":400}`
	for _, tc := range []struct {
		name     string
		failures []string
		err      *indexer.EngineError
		want     bool
	}{
		{"busy", []string{busy, busy}, nil, true},
		{"rejected", []string{rejected}, nil, true},
		{"one refused among busy ones", []string{busy, refused}, nil, false},
		{"refused", []string{refused}, nil, false},
		{"no failures", nil, nil, false},
		{"task error 503", nil, &indexer.EngineError{Status: 503, Type: "search_phase_execution_exception"}, true},
		{"task error 404", nil, &indexer.EngineError{Status: 404, Type: "index_not_found_exception"}, false},
		{"unreadable failure", []string{`{"status":`}, nil, false},
	} {
		ti := &indexer.TaskInfo{Completed: true, Error: tc.err}
		for _, f := range tc.failures {
			ti.Failures = append(ti.Failures, json.RawMessage(f))
		}
		if got := temporaryCopyFailure(ti); got != tc.want {
			t.Errorf("%s: temporary %v, want %v", tc.name, got, tc.want)
		}
	}
	// A second run counts what the first copied once.
	if s := sumCopies(&indexer.TaskInfo{Created: 10, VersionConflicts: 90}, 90); s.Created != 100 || s.VersionConflicts != 0 {
		t.Errorf("sumCopies: created %d, conflicts %d; want 100 and 0", s.Created, s.VersionConflicts)
	}
}
