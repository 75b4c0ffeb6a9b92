package projections_test

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/searchsync/searchsync/projections"
)

// A Writable gives what deep-copying and merging in place gives, and
// changes neither the document it starts from nor any document merged into
// it, also when the same maps take part in several folds.
func TestWritableLikeDeepMergeWithoutChangingInputs(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	keys := []string{"a", "b", "c", "addr", "tags"}
	var doc func(depth int) map[string]any
	doc = func(depth int) map[string]any {
		m := map[string]any{}
		for _, k := range keys {
			switch rng.IntN(5) {
			case 0:
				// absent
			case 1:
				m[k] = fmt.Sprint(rng.IntN(100))
			case 2:
				m[k] = []any{rng.IntN(3)}
			case 3:
				m[k] = nil
			default:
				if depth < 3 {
					m[k] = doc(depth + 1)
				} else {
					m[k] = true
				}
			}
		}
		return m
	}
	for round := range 2000 {
		start := doc(0)
		if round%7 == 0 {
			start = nil
		}
		type stepT struct {
			partial bool
			m       map[string]any
		}
		steps := make([]stepT, 1+rng.IntN(5))
		for i := range steps {
			steps[i] = stepT{partial: rng.IntN(4) != 0, m: doc(0)}
		}
		// The same map merged twice in one fold must not be changed either.
		if len(steps) > 2 {
			steps[2].m = steps[0].m
		}
		startCopy := projections.Clone(start)
		stepCopies := make([]map[string]any, len(steps))
		for i, s := range steps {
			stepCopies[i] = projections.Clone(s.m)
		}

		want := projections.Clone(start)
		w := projections.NewWritable(start)
		for i, s := range steps {
			if s.partial {
				want = projections.DeepMerge(want, projections.Clone(stepCopies[i]))
				w.Merge(s.m)
			} else {
				want = projections.Clone(stepCopies[i])
				w.Replace(s.m)
			}
			if rng.IntN(3) == 0 {
				if want == nil {
					want = map[string]any{}
				}
				projections.SetPath(want, "addr.deleted", i)
				w.Set("addr.deleted", i)
			}
		}
		if got := w.Doc(); !reflect.DeepEqual(got, want) {
			t.Fatalf("round %d: got %#v, want %#v", round, got, want)
		}
		if !reflect.DeepEqual(start, startCopy) {
			t.Fatalf("round %d: the start document changed: %#v, was %#v", round, start, startCopy)
		}
		for i, s := range steps {
			if !reflect.DeepEqual(s.m, stepCopies[i]) {
				t.Fatalf("round %d: step %d's document changed: %#v, was %#v", round, i, s.m, stepCopies[i])
			}
		}
		// A second fold over the first one's result leaves that result as it was.
		first, firstCopy := w.Doc(), projections.Clone(w.Doc())
		w2 := projections.NewWritable(first)
		w2.Merge(doc(0))
		w2.Set("c", "x")
		if !reflect.DeepEqual(first, firstCopy) {
			t.Fatalf("round %d: a later fold changed the earlier result", round)
		}
	}
}

// Merging onto the fold's own copy changes it in place: one copy of the
// top-level map per fold, not one per step.
func TestWritableCopiesOncePerFold(t *testing.T) {
	start := map[string]any{"a": "1", "b": "2", "addr": map[string]any{"city": "X"}}
	src := map[string]any{"a": "3", "addr": map[string]any{"zip": "1"}}
	var w projections.Writable
	one := testing.AllocsPerRun(100, func() {
		w = projections.NewWritable(start)
		w.Merge(src)
	})
	ten := testing.AllocsPerRun(100, func() {
		w = projections.NewWritable(start)
		for range 10 {
			w.Merge(src)
		}
	})
	if ten != one {
		t.Fatalf("10 merges allocate %v times, one merge %v: the document is copied per step", ten, one)
	}
	if got := w.Doc()["addr"]; !reflect.DeepEqual(got, map[string]any{"city": "X", "zip": "1"}) {
		t.Fatalf("addr = %#v", got)
	}
}

// SetKey writes one top-level key, dots and all, into a copy: the document
// it started from keeps its value.
func TestWritableSetKeyIsOneKey(t *testing.T) {
	start := map[string]any{"meta": map[string]any{"deleted": false}, "a": "1"}
	w := projections.NewWritable(start)
	w.SetKey("meta.deleted", true)
	want := map[string]any{"meta": map[string]any{"deleted": false}, "meta.deleted": true, "a": "1"}
	if !reflect.DeepEqual(w.Doc(), want) {
		t.Fatalf("doc = %#v, want %#v", w.Doc(), want)
	}
	if _, ok := start["meta.deleted"]; ok {
		t.Fatalf("the start document was changed: %#v", start)
	}
}
