package projections

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Fingerprint is what writes one index: the projections whose index it is
// and the upcasters that apply to their event types (Set.Fingerprint).
// package mapping keeps it in the index's _meta.searchsync beside the
// definition hash (projections_hash, projections), so that a projection
// changed since the index was built is drift, described by Changes.
//
// Hash covers the canonical JSON of every projection of the index, in the
// set's order (the first projection that matches an event wins), and of
// every upcaster whose event-type pattern can match one of their
// event_types. A projection's canonical JSON is the struct marshalled as
// it is (every json-tagged field, so a field added to Projection is covered
// without this file knowing it), after the defaults, with zero values
// (null, "", false, 0, [], {}) left out and keys sorted: an absent key and
// its zero value mean the same, whitespace, comments and key order of the
// YAML are gone, and a release that adds a field does not change the hash
// of projections that do not use it.
//
// Go code cannot be hashed: a projection's `go:` function counts by its
// name, a Go upcaster (RegisterUpcaster) by its pattern and from. After
// changing what a Go function or upcaster does, run
// `searchsync reindex --force <alias>`.
type Fingerprint struct {
	// Hash is the sha256 (hex) of the canonical JSON described above.
	Hash string `json:"projections_hash"`
	// Projections summarises each projection of the index, by name: what
	// Changes compares to describe a difference.
	Projections map[string]ProjectionSummary `json:"projections"`
	// Linked says that relations reach the index (Set.Linked).
	Linked bool `json:"linked,omitempty"`
}

// ProjectionSummary is what the fingerprint keeps of one projection, short
// hashes (12 hex digits) of its parts, enough to say what changed.
type ProjectionSummary struct {
	// Hash is the short hash of the projection's canonical JSON.
	Hash string `json:"hash"`
	// Order is its position among the projections of the index.
	Order int `json:"order"`
	// Fields are the document fields it writes (the `to` of fields and of
	// every other list of objects with a `to`), each with the short hash of
	// its declaration.
	Fields map[string]string `json:"fields,omitempty"`
	// Parts are the short hashes of the projection's other keys
	// (event_types, delete_on, go, conditions, …).
	Parts map[string]string `json:"parts,omitempty"`
	// Upcasters are the upcasters that apply to its event types, by
	// "<pattern> from <N>": the short hash of the declaration of a
	// declarative one, "go" for a Go upcaster.
	Upcasters map[string]string `json:"upcasters,omitempty"`
}

// Fingerprint returns the fingerprint of what writes index (an alias, a
// Projection.Index). An index no projection writes has a fingerprint too:
// that of nothing.
func (s *Set) Fingerprint(index string) *Fingerprint {
	s.mu.RLock()
	var mine []*Projection
	for _, p := range s.projections {
		if p.Index == index {
			mine = append(mine, p)
		}
	}
	ups := slices.Clone(s.upcasters)
	s.mu.RUnlock()

	fp := &Fingerprint{Projections: map[string]ProjectionSummary{}}
	var whole []any
	for i, p := range mine {
		canon := canonical(p)
		sum := ProjectionSummary{Hash: shortHash(canon), Order: i}
		sum.Fields, sum.Parts = summarise(canon)
		var upJSON []any
		for _, u := range applying(ups, p.EventTypes) {
			key := u.key()
			for n := 2; sum.Upcasters[key] != ""; n++ {
				key = u.key() + " #" + strconv.Itoa(n)
			}
			if sum.Upcasters == nil {
				sum.Upcasters = map[string]string{}
			}
			decl := upcasterDecl(u)
			sum.Upcasters[key] = "go"
			if _, isGo := decl["go"]; !isGo {
				sum.Upcasters[key] = shortHash(decl)
			}
			upJSON = append(upJSON, decl)
		}
		fp.Projections[p.Name] = sum
		whole = append(whole, map[string]any{"projection": canon, "upcasters": upJSON})
	}
	for _, r := range s.Relations() {
		if r.Source.Index != index && r.Target.Index != index {
			continue
		}
		fp.Linked = true
		canon := canonicalRelation(r)
		sum := ProjectionSummary{Hash: shortHash(canon), Order: len(whole)}
		sum.Fields, sum.Parts = summarise(canon)
		fp.Projections["relation "+r.Name] = sum
		whole = append(whole, map[string]any{"relation": canon})
	}
	b, _ := json.Marshal(whole)
	h := sha256.Sum256(b)
	fp.Hash = hex.EncodeToString(h[:])
	return fp
}

// upcasterDecl is what the fingerprint covers of an upcaster: its pattern
// and from, and the declaration of a declared one (`upcasters:` of a
// projection file: its steps as compiled, expressions as written), or that
// it is Go code (which cannot be hashed).
func upcasterDecl(u upcaster) map[string]any {
	m := map[string]any{"pattern": u.pattern, "from": u.from}
	if u.decl == nil {
		m["go"] = true
		return m
	}
	steps := make([]any, 0, len(u.decl.steps))
	for _, st := range u.decl.steps {
		d := map[string]any{"action": st.action, "path": st.path, "to": st.to, "value": st.value,
			"type": st.typ, "in": st.in, "required": st.req}
		if st.expr != nil {
			d["expr"] = st.expr.src
		}
		if st.when != nil {
			d["when"] = st.when.src
		}
		steps = append(steps, d)
	}
	m["steps"] = steps
	b, err := json.Marshal(m)
	if err != nil {
		return map[string]any{"pattern": u.pattern, "from": u.from, "unencodable": err.Error()}
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	_ = dec.Decode(&v)
	v, _ = prune(v)
	return v.(map[string]any)
}

func (u upcaster) key() string { return u.pattern + " from " + strconv.Itoa(u.from) }

// applying returns the upcasters whose pattern can match an event type that
// one of eventTypes matches, in registration order.
func applying(ups []upcaster, eventTypes []string) []upcaster {
	var out []upcaster
	for _, u := range ups {
		if slices.ContainsFunc(eventTypes, func(et string) bool { return patternsOverlap(u.pattern, et) }) {
			out = append(out, u)
		}
	}
	return out
}

// canonical is p's JSON with zero values left out, as a tree of maps
// (encoding/json sorts their keys).
func canonical(p *Projection) any {
	b, err := json.Marshal(p)
	if err != nil {
		return map[string]any{"name": p.Name, "unencodable": err.Error()}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return map[string]any{"name": p.Name, "unencodable": err.Error()}
	}
	v, _ = prune(v)
	return v
}

// prune drops zero values from maps (recursively); keep is false for a
// zero value itself. Arrays keep their elements (positions matter) but
// prune inside them.
func prune(v any) (any, bool) {
	switch x := v.(type) {
	case nil:
		return nil, false
	case string:
		return x, x != ""
	case bool:
		return x, x
	case json.Number:
		f, err := x.Float64()
		return x, err != nil || f != 0
	case []any:
		for i := range x {
			x[i], _ = prune(x[i])
		}
		return x, len(x) > 0
	case map[string]any:
		for k, el := range x {
			if pv, keep := prune(el); keep {
				x[k] = pv
			} else {
				delete(x, k)
			}
		}
		return x, len(x) > 0
	}
	return v, true
}

// summarise splits a canonical projection into the document fields it
// writes (every list of objects with a string `to`) and its other keys.
func summarise(canon any) (fields, parts map[string]string) {
	m, _ := canon.(map[string]any)
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if k == "name" {
			continue
		}
		if list, ok := outputs(m[k]); ok {
			for _, f := range list {
				if fields == nil {
					fields = map[string]string{}
				}
				fields[f["to"].(string)] = shortHash(f)
			}
			continue
		}
		if parts == nil {
			parts = map[string]string{}
		}
		parts[k] = shortHash(m[k])
	}
	return fields, parts
}

// outputs returns v as a list of field declarations: a non-empty list of
// objects that each have a string `to`.
func outputs(v any) ([]map[string]any, bool) {
	list, ok := v.([]any)
	if !ok || len(list) == 0 {
		return nil, false
	}
	out := make([]map[string]any, 0, len(list))
	for _, el := range list {
		m, ok := el.(map[string]any)
		if !ok {
			return nil, false
		}
		if to, ok := m["to"].(string); !ok || to == "" {
			return nil, false
		}
		out = append(out, m)
	}
	return out, true
}

func shortHash(v any) string {
	b, _ := json.Marshal(v)
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:6])
}

// Changes describes how f differs from live (the fingerprint kept in the
// live index), one line per projection: "projection customer changed:
// fields added full_name; upcaster entity.customer.* from 1 added". Empty
// when the hashes are equal.
func (f *Fingerprint) Changes(live *Fingerprint) []string {
	if live == nil || f.Hash == live.Hash {
		return nil
	}
	var out []string
	names := slices.Sorted(maps.Keys(f.Projections))
	for _, n := range names {
		old, ok := live.Projections[n]
		if !ok {
			out = append(out, "projection "+n+" added")
			continue
		}
		if d := f.Projections[n].changes(old); d != "" {
			out = append(out, "projection "+n+" changed: "+d)
		}
	}
	for _, n := range slices.Sorted(maps.Keys(live.Projections)) {
		if _, ok := f.Projections[n]; !ok {
			out = append(out, "projection "+n+" removed")
		}
	}
	if len(out) == 0 {
		reordered := slices.ContainsFunc(names, func(n string) bool { return f.Projections[n].Order != live.Projections[n].Order })
		if reordered {
			return []string{"projections reordered (the first projection that matches an event wins)"}
		}
		return []string{fmt.Sprintf("projections changed (fingerprint %s, live index %s)", short12(f.Hash), short12(live.Hash))}
	}
	return out
}

func (s ProjectionSummary) changes(old ProjectionSummary) string {
	var out []string
	added, removed, changed := diff(s.Fields, old.Fields)
	var fs []string
	for _, l := range []struct {
		what  string
		names []string
	}{{"added", added}, {"removed", removed}, {"changed", changed}} {
		if len(l.names) > 0 {
			fs = append(fs, l.what+" "+strings.Join(l.names, ", "))
		}
	}
	if len(fs) > 0 {
		out = append(out, "fields "+strings.Join(fs, "; "))
	}
	added, removed, changed = diff(s.Parts, old.Parts)
	for _, k := range slices.Sorted(slices.Values(slices.Concat(added, removed, changed))) {
		out = append(out, k+" changed")
	}
	added, removed, changed = diff(s.Upcasters, old.Upcasters)
	for _, l := range []struct {
		what string
		keys []string
	}{{"added", added}, {"removed", removed}, {"changed", changed}} {
		for _, k := range l.keys {
			out = append(out, "upcaster "+k+" "+l.what)
		}
	}
	if len(out) == 0 && s.Hash != old.Hash {
		out = append(out, "declaration changed")
	}
	return strings.Join(out, "; ")
}

// diff returns the keys only in now, only in old, and in both with
// different values, each sorted.
func diff(now, old map[string]string) (added, removed, changed []string) {
	for _, k := range slices.Sorted(maps.Keys(now)) {
		switch v, ok := old[k]; {
		case !ok:
			added = append(added, k)
		case v != now[k]:
			changed = append(changed, k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(old)) {
		if _, ok := now[k]; !ok {
			removed = append(removed, k)
		}
	}
	return added, removed, changed
}

func short12(h string) string { return h[:min(len(h), 12)] }

// patternsOverlap reports whether some string matches both path.Match
// patterns a and b. It errs towards true: a character class is taken as
// any one character, and * as any run of characters, '/' included.
func patternsOverlap(a, b string) bool {
	ta, tb := globTokens(a), globTokens(b)
	memo := map[[2]int]bool{}
	var o func(i, j int) bool
	o = func(i, j int) bool {
		key := [2]int{i, j}
		if v, ok := memo[key]; ok {
			return v
		}
		memo[key] = false // a cycle (two stars) adds nothing
		var r bool
		switch {
		case i == len(ta) && j == len(tb):
			r = true
		case i < len(ta) && ta[i] == globStar:
			r = o(i+1, j) || (j < len(tb) && o(i, j+1))
		case j < len(tb) && tb[j] == globStar:
			r = o(i, j+1) || (i < len(ta) && o(i+1, j))
		case i == len(ta) || j == len(tb):
			r = false
		default:
			r = (ta[i] == globAny || tb[j] == globAny || ta[i] == tb[j]) && o(i+1, j+1)
		}
		memo[key] = r
		return r
	}
	return o(0, 0)
}

// The tokens of a glob besides literal characters.
const (
	globStar = -1 // *
	globAny  = -2 // ? or a character class
)

func globTokens(p string) []rune {
	var out []rune
	rs := []rune(p)
	for i := 0; i < len(rs); i++ {
		switch rs[i] {
		case '*':
			if len(out) == 0 || out[len(out)-1] != globStar {
				out = append(out, globStar)
			}
		case '?':
			out = append(out, globAny)
		case '[':
			for i < len(rs) && rs[i] != ']' {
				if rs[i] == '\\' {
					i++
				}
				i++
			}
			out = append(out, globAny)
		case '\\':
			if i+1 < len(rs) {
				i++
			}
			out = append(out, rs[i])
		default:
			out = append(out, rs[i])
		}
	}
	return out
}

// canonicalRelation is the JSON a relation's fingerprint covers: its
// declaration with defaults, empty parts left out.
func canonicalRelation(r *Relation) any {
	b, _ := json.Marshal(r)
	var m any
	_ = json.Unmarshal(b, &m)
	out, _ := prune(m)
	return out
}
