package projections

import (
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
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

// formatMicros writes what Format writes with its layout: times in and
// around the fast path's years, in other zones, at every digit boundary.
func TestFormatMicrosLikeFormat(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	zones := []*time.Location{time.UTC, time.FixedZone("east", 5*3600+30*60), time.FixedZone("west", -8*3600)}
	times := []time.Time{
		time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(-1, 6, 15, 12, 0, 0, 0, time.UTC),
		time.Date(1999, 12, 31, 23, 59, 59, 999, time.UTC),
		time.Date(2026, 12, 1, 23, 13, 9, 123456789, time.UTC),
	}
	for range 10000 {
		times = append(times, time.Unix(rng.Int64N(1<<36)-1<<35, rng.Int64N(1e9)).In(zones[rng.IntN(len(zones))]))
	}
	for _, tm := range times {
		if got, want := formatMicros(tm), tm.UTC().Format(microsLayout); got != want {
			t.Fatalf("formatMicros(%v) = %q, Format gives %q", tm, got, want)
		}
	}
}
