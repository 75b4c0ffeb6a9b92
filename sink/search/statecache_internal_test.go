package search

import (
	"testing"

	"github.com/searchsync/searchsync/projections"
)

func stepsAt(versions ...int64) []step {
	s := make([]step, len(versions))
	for i, v := range versions {
		s[i] = step{res: &projections.Result{Version: v}}
	}
	return s
}

// The cache hands out a state only to events that continue its version
// without a gap, forgets what was dropped, and evicts the least recently
// used document first.
func TestStateCache(t *testing.T) {
	t.Parallel()
	c := newStateCache(2)
	doc := map[string]any{"status": "active"}
	c.put("a", "1", 5, doc)
	for _, tc := range []struct {
		name     string
		versions []int64
		hit      bool
	}{
		{"the next version", []int64{6}, true},
		{"a run continuing it", []int64{6, 7, 8}, true},
		{"a gap before the run", []int64{7}, false},
		{"a gap inside the run", []int64{6, 8}, false},
		{"the cached version again", []int64{5}, false},
		{"an older one", []int64{4}, false},
	} {
		got, v, ok := c.get("a", "1", stepsAt(tc.versions...))
		if ok != tc.hit || (ok && (v != 5 || got["status"] != "active")) {
			t.Errorf("%s %v: hit %v (v%d), want %v", tc.name, tc.versions, ok, v, tc.hit)
		}
	}
	if _, _, ok := c.get("other-alias", "1", stepsAt(6)); ok {
		t.Error("a document of another alias with the same id was served")
	}
	c.drop("a", "1")
	if _, _, ok := c.get("a", "1", stepsAt(6)); ok {
		t.Error("a dropped document was served")
	}
	c.put("a", "1", 6, doc)
	c.put("a", "2", 1, doc)
	c.get("a", "1", stepsAt(7)) // 1 used last: 2 goes first
	c.put("a", "3", 1, doc)
	if _, _, ok := c.get("a", "2", stepsAt(2)); ok || c.len() != 2 {
		t.Errorf("after a third document in a cache of two: 2 still served (%v), %d cached", ok, c.len())
	}
	if _, _, ok := c.get("a", "1", stepsAt(7)); !ok {
		t.Error("the document used last was evicted")
	}
	c.put("a", "1", 7, nil) // a hard delete
	if _, _, ok := c.get("a", "1", stepsAt(8)); ok {
		t.Error("a hard-deleted document was served")
	}
	if newStateCache(0) != nil || newStateCache(-1) != nil {
		t.Error("a cache of no documents was made")
	}
	var none *stateCache
	none.put("a", "1", 1, doc)
	if _, _, ok := none.get("a", "1", stepsAt(2)); ok {
		t.Error("no cache served a document")
	}
}
