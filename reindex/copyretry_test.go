package reindex

import (
	"encoding/json"
	"testing"
	"time"

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

// The seed looks at its copy task about a quarter of the remaining time
// apart, within bounds: rarely while much is left, often near the end.
func TestPollAfter(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name        string
		total, done int64
		elapsed     time.Duration
		want        time.Duration
	}{
		{"nothing done yet", 1000, 0, 50 * time.Millisecond, 4 * pollMin},
		{"all done, not completed", 1000, 1000, time.Second, pollMin},
		{"half done after 400ms", 1000, 500, 400 * time.Millisecond, 100 * time.Millisecond},
		{"much left", 1_000_000, 1000, time.Second, pollMax},
		{"nearly done", 1000, 990, time.Second, pollMin},
	} {
		got := pollAfter(&indexer.TaskInfo{Total: c.total, Created: c.done / 2, Updated: c.done - c.done/2}, c.elapsed)
		if got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
