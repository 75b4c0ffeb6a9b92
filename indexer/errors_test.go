package indexer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/searchsync/searchsync/internal/testenv"
)

// The predicates decide on the error wherever it sits in the chain.
func TestPredicates(t *testing.T) {
	t.Parallel()
	wrap := func(err error) error { return fmt.Errorf("ensure index: %w", err) }
	notFound := &EngineError{Op: "mget c", Status: 404, Type: "index_not_found_exception", Reason: "no such index [c]"}
	exists := &EngineError{Op: "create index c_v1", Status: 400, Type: "resource_already_exists_exception"}
	for _, tc := range []struct {
		name                                                           string
		err                                                            error
		temporary, forbidden, notFound, exists, transport, unsupported bool
	}{
		{name: "nil"},
		{name: "401", err: wrap(&EngineError{Status: 401}), forbidden: true},
		{name: "403", err: wrap(&EngineError{Status: 403, Type: "security_exception"}), forbidden: true},
		{name: "429", err: wrap(&EngineError{Status: 429, Type: "es_rejected_execution_exception"}), temporary: true},
		{name: "503", err: &EngineError{Status: 503}, temporary: true},
		{name: "400", err: &EngineError{Status: 400, Type: "mapper_parsing_exception"}},
		{name: "index not found", err: wrap(notFound), notFound: true},
		{name: "already exists", err: wrap(exists), exists: true},
		{name: "already exists (older engines)", err: &EngineError{Status: 400, Type: "index_already_exists_exception"}, exists: true},
		{name: "no answer", err: wrap(&TransportError{Op: "bulk", Err: errors.New("connection refused")}), temporary: true, transport: true},
		{name: "cancelled", err: wrap(context.Canceled)},
		{name: "serverless", err: &UnsupportedError{Op: "refresh c", API: "_refresh"}, unsupported: true},
	} {
		got := [6]bool{IsTemporary(tc.err), IsForbidden(tc.err), IsIndexNotFound(tc.err), IsAlreadyExists(tc.err), IsTransport(tc.err), IsUnsupported(tc.err)}
		want := [6]bool{tc.temporary, tc.forbidden, tc.notFound, tc.exists, tc.transport, tc.unsupported}
		if got != want {
			t.Errorf("%s: temporary, forbidden, not found, exists, transport, unsupported = %v, want %v", tc.name, got, want)
		}
	}
	r := BulkResult{Status: 404, ErrType: "index_not_found_exception", ErrReason: "no such index [c]"}
	if !r.IndexNotFound() || r.Answer() != "engine answered 404 index_not_found_exception: no such index [c]" {
		t.Errorf("bulk item: not found %v, answer %q", r.IndexNotFound(), r.Answer())
	}
}

// The failures of a server-side copy as Elasticsearch 7.17 and OpenSearch
// report them: a mapping update the loaded engine could not apply within
// 30 s (503) and a rejected execution (429) are worth a second copy; a
// document the new mapping refuses (400) is not.
func TestTaskTemporary(t *testing.T) {
	t.Parallel()
	busy := `{"index":"rx_v2","type":"_doc","id":"767e0dcc","cause":{"type":"process_cluster_event_timeout_exception","reason":"failed to process cluster event (put-mapping [rx_v2/F8lb6G]) within 30s"},"status":503}`
	rejected := `{"index":"rx_v2","id":"a1","cause":{"type":"es_rejected_execution_exception","reason":"rejected execution"},"status":429}`
	refused := `{"index":"rx_v2","id":"b2","cause":{"type":"mapper_parsing_exception","reason":"failed to parse field [loyalty_tier] of type [long]"},"status":400}`
	for _, tc := range []struct {
		name     string
		failures []string
		err      *EngineError
		want     bool
	}{
		{"busy", []string{busy, busy}, nil, true},
		{"rejected", []string{rejected}, nil, true},
		{"one refused among busy ones", []string{busy, refused}, nil, false},
		{"refused", []string{refused}, nil, false},
		{"no failures", nil, nil, false},
		{"task error 503", nil, &EngineError{Status: 503, Type: "search_phase_execution_exception"}, true},
		{"task error 404", nil, &EngineError{Status: 404, Type: "index_not_found_exception"}, false},
		{"unreadable failure", []string{`{"status":`}, nil, false},
	} {
		ti := &TaskInfo{Completed: true, Error: tc.err}
		for _, f := range tc.failures {
			ti.Failures = append(ti.Failures, json.RawMessage(f))
		}
		if got := ti.Temporary(); got != tc.want {
			t.Errorf("%s: temporary %v, want %v", tc.name, got, tc.want)
		}
	}
}

// The console's error classes select Classify's reasons by the patterns
// indexer defines (dashboard.ErrorClasses); last_error keeps the text.
func TestReasonPatterns(t *testing.T) {
	t.Parallel()
	op := BulkOp{Type: OpIndex, Index: "customers_v1", ID: "c1", Version: 3}
	for _, tc := range []struct {
		name             string
		r                BulkResult
		rejected, failed bool
	}{
		{"mapping", BulkResult{Status: 400, ErrType: "mapper_parsing_exception", ErrReason: "failed to parse field [age] of type [long]"}, true, false},
		{"strict", BulkResult{Status: 400, ErrType: "strict_dynamic_mapping_exception", ErrReason: "mapping set to strict"}, true, false},
		{"5xx", BulkResult{Status: 500, ErrType: "exception", ErrReason: "boom"}, false, true},
		{"stale", BulkResult{Status: 409, ErrType: "version_conflict_engine_exception", ErrReason: "version conflict"}, false, false},
		{"forbidden", BulkResult{Status: 403, ErrType: "security_exception", ErrReason: "no permissions"}, false, false},
	} {
		reason := Classify(op, tc.r).Reason
		if got := testenv.MatchesError(RejectedPattern, reason); got != tc.rejected {
			t.Errorf("%s: %q selected by RejectedPattern: %v, want %v", tc.name, reason, got, tc.rejected)
		}
		if got := testenv.MatchesError(FailedPattern, reason); got != tc.failed {
			t.Errorf("%s: %q selected by FailedPattern: %v, want %v", tc.name, reason, got, tc.failed)
		}
	}
}
