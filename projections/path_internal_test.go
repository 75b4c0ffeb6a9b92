package projections

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// splitLookup and splitSetPath are Lookup and SetPath as they were, with
// strings.Split: the reference for the versions that do not allocate.
func splitLookup(v any, path string) (any, bool) {
	if path == "" || path == "." {
		return v, true
	}
	for _, seg := range strings.Split(path, ".") {
		switch c := v.(type) {
		case map[string]any:
			x, ok := c[seg]
			if !ok {
				return nil, false
			}
			v = x
		case []any:
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			v = c[i]
		default:
			return nil, false
		}
	}
	return v, true
}

func splitSetPath(m map[string]any, path string, value any) {
	segs := strings.Split(path, ".")
	for _, seg := range segs[:len(segs)-1] {
		next, ok := m[seg].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[seg] = next
		}
		m = next
	}
	m[segs[len(segs)-1]] = value
}

var refPaths = []string{"", ".", "a", "a.b", "a.b.c", "a..b", "a.", ".a", "..", "items.0.sku", "items.1", "items.-1", "items.x",
	"items.0.sku.more", "a.b.c.d", "", "x", "x.y", "s", "s.t", "n.0"}

func refDoc() map[string]any {
	return map[string]any{
		"a":     map[string]any{"b": map[string]any{"c": "deep"}, "": map[string]any{"b": 1}},
		"":      map[string]any{"a": "empty key", "": "both"},
		"items": []any{map[string]any{"sku": "S1"}, "two"},
		"s":     "scalar",
		"n":     nil,
	}
}

func TestLookupAndSetPathAsWithSplit(t *testing.T) {
	for _, p := range refPaths {
		gv, gok := Lookup(refDoc(), p)
		wv, wok := splitLookup(refDoc(), p)
		if gok != wok || !reflect.DeepEqual(gv, wv) {
			t.Errorf("Lookup %q = %v, %v; want %v, %v", p, gv, gok, wv, wok)
		}
		got, want := refDoc(), refDoc()
		SetPath(got, p, "v")
		splitSetPath(want, p, "v")
		if !reflect.DeepEqual(got, want) {
			t.Errorf("SetPath %q:\n got %v\nwant %v", p, got, want)
		}
	}
	doc := refDoc()
	if n := testing.AllocsPerRun(100, func() { Lookup(doc, "a.b.c") }); n != 0 {
		t.Errorf("Lookup allocates %.0f times", n)
	}
}
