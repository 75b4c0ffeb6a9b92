package projections_test

import (
	"reflect"
	"testing"

	"github.com/searchsync/searchsync/projections"
)

func idx(v int64, tenant string, partial bool, doc map[string]any) *projections.Result {
	return &projections.Result{Op: projections.OpIndex, Version: v, Tenant: tenant, Partial: partial, Doc: doc}
}

func del(v int64, tenant string) *projections.Result {
	return &projections.Result{Op: projections.OpDelete, Version: v, Tenant: tenant}
}

// The fold's rules, one case each: what the search consumer and the reindex
// replay write (reindex's TestConsumerAndReplayFoldAlike runs both paths
// against the engine).
func TestFoldRules(t *testing.T) {
	shared := projections.Rules{TenantField: "tenant_key", TombstoneField: "deleted"}
	hard := projections.Rules{TenantField: "tenant_key"}
	perTenant := projections.Rules{TombstoneField: "deleted"}
	ignore := &projections.Result{Op: projections.OpIgnore, Version: 9}
	for _, tc := range []struct {
		name    string
		rules   projections.Rules
		state   map[string]any
		version int64
		events  []*projections.Result
		steps   []projections.Step
		op      projections.Op
		wantV   int64
		want    map[string]any
	}{
		{"full state replaces, tenant filled in", shared, map[string]any{"a": 1}, 1,
			[]*projections.Result{idx(2, "acme", false, map[string]any{"b": 2})},
			[]projections.Step{projections.Applied}, projections.OpIndex, 2,
			map[string]any{"b": 2, "tenant_key": "acme", "deleted": false}},
		{"partial merges nested objects, null sets", shared, map[string]any{"a": map[string]any{"x": 1, "y": 2}, "n": 1}, 1,
			[]*projections.Result{idx(2, "acme", true, map[string]any{"a": map[string]any{"y": 3}, "n": nil, "tenant_key": "own"})},
			[]projections.Step{projections.Applied}, projections.OpIndex, 2,
			map[string]any{"a": map[string]any{"x": 1, "y": 3}, "n": nil, "tenant_key": "own", "deleted": false}},
		{"dotted tenant field, no tenant: nothing filled", projections.Rules{TenantField: "t.key"}, nil, 0,
			[]*projections.Result{idx(1, "acme", false, map[string]any{"a": 1}), idx(2, "", true, map[string]any{"b": 2})},
			[]projections.Step{projections.Applied, projections.Applied}, projections.OpIndex, 2,
			map[string]any{"a": 1, "b": 2, "t": map[string]any{"key": "acme"}}},
		{"not shared: no tenant field", perTenant, nil, 0,
			[]*projections.Result{idx(1, "acme", false, map[string]any{"a": 1})},
			[]projections.Step{projections.Applied}, projections.OpIndex, 1,
			map[string]any{"a": 1, "deleted": false}},
		{"soft delete keeps the state with the flag", shared, map[string]any{"a": 1}, 3,
			[]*projections.Result{del(4, "acme")},
			[]projections.Step{projections.Applied}, projections.OpIndex, 4,
			map[string]any{"a": 1, "tenant_key": "acme", "deleted": true}},
		{"soft delete of an unknown document", shared, nil, 0,
			[]*projections.Result{del(4, "acme")},
			[]projections.Step{projections.Applied}, projections.OpIndex, 4,
			map[string]any{"tenant_key": "acme", "deleted": true}},
		{"soft delete then partial update revives", shared, map[string]any{"a": 1, "tenant_key": "acme"}, 1,
			[]*projections.Result{del(2, "acme"), idx(3, "acme", true, map[string]any{"b": 2})},
			[]projections.Step{projections.Applied, projections.Applied}, projections.OpIndex, 3,
			map[string]any{"a": 1, "b": 2, "tenant_key": "acme", "deleted": false}},
		{"hard delete", hard, map[string]any{"a": 1}, 1,
			[]*projections.Result{idx(2, "", true, map[string]any{"b": 2}), del(3, "acme")},
			[]projections.Step{projections.Applied, projections.Applied}, projections.OpDelete, 3, nil},
		{"hard delete then partial update starts anew", hard, map[string]any{"a": 1}, 1,
			[]*projections.Result{del(2, ""), idx(3, "", true, map[string]any{"b": 2})},
			[]projections.Step{projections.Applied, projections.Applied}, projections.OpIndex, 3,
			map[string]any{"b": 2}},
		{"stale, repeated and ignored events", shared, map[string]any{"a": 1}, 5,
			[]*projections.Result{idx(4, "", true, map[string]any{"a": 4}), idx(6, "", true, map[string]any{"a": 6}),
				idx(6, "", true, map[string]any{"a": 7}), ignore, del(2, "")},
			[]projections.Step{projections.Stale, projections.Applied, projections.Stale, projections.Ignored, projections.Stale},
			projections.OpIndex, 6, map[string]any{"a": 6, "deleted": false}},
		{"nothing newer: the state, nothing to write", shared, map[string]any{"a": 1}, 5,
			[]*projections.Result{idx(5, "", false, map[string]any{"a": 5}), ignore},
			[]projections.Step{projections.Stale, projections.Ignored}, projections.OpIgnore, 5,
			map[string]any{"a": 1}},
		{"version 0 with nothing applied takes any version", perTenant, nil, 0,
			[]*projections.Result{idx(0, "", false, map[string]any{"a": 0}), idx(0, "", true, map[string]any{"a": 1})},
			[]projections.Step{projections.Applied, projections.Stale}, projections.OpIndex, 0,
			map[string]any{"a": 0, "deleted": false}},
		{"full state without a document", hard, nil, 0,
			[]*projections.Result{idx(1, "", false, nil)},
			[]projections.Step{projections.Applied}, projections.OpIndex, 1, map[string]any{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stateBefore := projections.Clone(tc.state)
			docsBefore := make([]map[string]any, len(tc.events))
			for i, e := range tc.events {
				docsBefore[i] = projections.Clone(e.Doc)
			}
			f := projections.NewFold(tc.rules, tc.state, tc.version)
			for i, e := range tc.events {
				if got := f.Apply(e); got != tc.steps[i] {
					t.Errorf("event %d: step %d, want %d", i, got, tc.steps[i])
				}
			}
			op, v, doc := f.Write()
			if op != tc.op || v != tc.wantV || !reflect.DeepEqual(doc, tc.want) {
				t.Errorf("wrote %s v%d %v, want %s v%d %v", op, v, doc, tc.op, tc.wantV, tc.want)
			}
			if !reflect.DeepEqual(tc.state, stateBefore) {
				t.Errorf("the state changed: %v, was %v", tc.state, stateBefore)
			}
			for i, e := range tc.events {
				if !reflect.DeepEqual(e.Doc, docsBefore[i]) {
					t.Errorf("event %d's document changed: %v, was %v", i, e.Doc, docsBefore[i])
				}
			}
		})
	}
}

func TestNeedsState(t *testing.T) {
	soft, hard := projections.Rules{TombstoneField: "deleted"}, projections.Rules{}
	for _, tc := range []struct {
		r          *projections.Result
		soft, hard bool
	}{
		{idx(1, "", true, nil), true, true},
		{idx(1, "", false, nil), false, false},
		{del(1, ""), true, false},
		{&projections.Result{Op: projections.OpIgnore}, false, false},
	} {
		if soft.NeedsState(tc.r) != tc.soft || hard.NeedsState(tc.r) != tc.hard {
			t.Errorf("%s partial=%v: needs state soft %v hard %v, want %v %v", tc.r.Op, tc.r.Partial,
				soft.NeedsState(tc.r), hard.NeedsState(tc.r), tc.soft, tc.hard)
		}
	}
}

// A full-state snapshot at the state's own version completes a document
// that partial events built without a base (data older than the outbox);
// its write may replace that version (Snapshot). Anything else at that
// version, and a snapshot older than the state or after a hard delete of
// a newer version, stays stale.
func TestFoldSnapshotAtTheSameVersion(t *testing.T) {
	hard := projections.Rules{}
	snap := func(v int64, doc map[string]any) *projections.Result {
		r := idx(v, "", false, doc)
		r.Snapshot = true
		return r
	}
	// A partial update on a document the index never had, then the snapshot
	// of the same version: the snapshot's whole state wins.
	f := projections.NewFold(hard, nil, 0)
	if s := f.Apply(idx(5, "", true, map[string]any{"city": "Bonn"})); s != projections.Applied || f.Snapshot() {
		t.Fatalf("partial: %v, snapshot %v", s, f.Snapshot())
	}
	if s := f.Apply(snap(5, map[string]any{"city": "Bonn", "name": "Ada"})); s != projections.Applied || !f.Snapshot() {
		t.Fatalf("snapshot at the same version: %v, snapshot %v", s, f.Snapshot())
	}
	if op, v, doc := f.Write(); op != projections.OpIndex || v != 5 || !reflect.DeepEqual(doc, map[string]any{"city": "Bonn", "name": "Ada"}) {
		t.Fatalf("write: %v v%d %v", op, v, doc)
	}
	// The same from a state read back from the index.
	f = projections.NewFold(hard, map[string]any{"city": "Bonn"}, 5)
	if s := f.Apply(snap(5, map[string]any{"city": "Bonn", "name": "Ada"})); s != projections.Applied || !f.Snapshot() {
		t.Fatalf("snapshot onto a state of its version: %v", s)
	}
	// A later partial event keeps the snapshot's state and is written strictly.
	if s := f.Apply(idx(6, "", true, map[string]any{"city": "Kiel"})); s != projections.Applied || f.Snapshot() {
		t.Fatalf("partial after the snapshot: %v, snapshot %v", s, f.Snapshot())
	}
	for _, tc := range []struct {
		name    string
		state   map[string]any
		version int64
		events  []*projections.Result
	}{
		{"an older snapshot", map[string]any{"a": 1}, 6, []*projections.Result{snap(5, map[string]any{"a": 0})}},
		{"a non-snapshot full state at the same version", map[string]any{"a": 1}, 5, []*projections.Result{idx(5, "", false, map[string]any{"a": 0})}},
		{"a snapshot after a hard delete", map[string]any{"a": 1}, 4, []*projections.Result{del(5, ""), snap(5, map[string]any{"a": 0})}},
	} {
		f := projections.NewFold(hard, tc.state, tc.version)
		f.ApplyAll(tc.events[:len(tc.events)-1])
		if s := f.Apply(tc.events[len(tc.events)-1]); s != projections.Stale {
			t.Errorf("%s: %v, want Stale", tc.name, s)
		}
	}
}
