package projections

import (
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// The reserved keys of a linked document (an index that relations reach,
// Set.Linked).
const (
	// MetaKey holds the versions of every source of the document: its own
	// entity's and each relation's. The index maps it unindexed.
	MetaKey = "_ss"
	// LiveKey is false while the document's entity does not exist: it was
	// deleted (hard or soft) or only relations have named it so far. The
	// index's alias hides such documents.
	LiveKey = "_live"
)

// linkMeta is the decoded MetaKey object.
//
//	{"v": 7, "d": 1042,
//	 "r": {"contacts/<relation id>": {"v": 3, "i": 1200, "x": true, "o": "<other id>"}},
//	 "b": {"contacts/<relation id>": {"v": 3, "i": 1200, "x": true, "t": "customers", "id": "<id>"}},
//	 "o": {"contacts/<other id>": {"v": 5, "f": {"name": "Ada"}}}}
//
// v is the version of the entity's last applied event, d the outbox id of
// its last applied delete: a relation event older than that belongs to an
// earlier life of the entity and is dropped. r holds the relations listed
// in the document (by field and relation id: version, outbox id, alive,
// the other endpoint), b those whose items elsewhere copy this entity's
// fields, o the copies of other entities' fields, with their version.
type linkMeta struct {
	V int64
	D int64
	R map[string]*linkEntry
	B map[string]*linkEntry
	O map[string]*otherCopy
}

type linkEntry struct {
	V     int64
	I     int64
	X     bool
	Other string // r: the other endpoint's id
	T, ID string // b: the receiving document
}

type otherCopy struct {
	V int64
	F map[string]any
}

// LinkedFold is the fold of a linked document: the document's own entity
// events go through Fold onto the entity's part of the document (its
// version is kept in the document, not as the engine's version), each
// relation's events onto its item, each guarded by its own version, so
// that any interleaving of the sources, any redelivery and any replay
// gives the same document. The rules (docs/relations.md):
//
//   - An entity event is folded as by Fold, against the entity's version.
//     A delete (soft or hard) makes the document not live and records the
//     delete's outbox id: every relation entry older than it is dropped
//     with its item, and a relation event older than it is Stale (an entity
//     deleted and re-created does not bring back its old relations). A hard
//     delete keeps the document, without the entity's fields, as the
//     holder of these versions.
//   - A relation event is applied when its version is above the one
//     recorded for the relation (a full-state snapshot at the same version
//     too); a delete removes the item and keeps the entry, so that an older
//     event of the relation never brings it back.
//   - A relation that arrives before its entity makes a document that is
//     not live, holding the relation until the entity comes.
//   - Copies of other entities' fields are replaced by newer versions only.
//
// The folded document is the entity's part, LiveKey, the relation fields
// (items sorted by relation id, each with the other entity's copied
// fields) and MetaKey. Encoding it is deterministic, so an unchanged
// document is recognised byte for byte and not written again.
type LinkedFold struct {
	rules  Rules
	fields []string // the index's relation fields
	meta   linkMeta
	entity Fold
	// items are the items of the document by entry key (field/relation).
	items map[string]map[string]any
	// others looks up the other endpoint of an item's relation.
	others func(index, id string) (version int64, doc map[string]any)

	// Backrefs are the entry keys of the backrefs this fold changed (for
	// the caller's fan-out).
	Backrefs []string
}

// NewLinkedFold starts a fold onto doc (nil: no document yet), a document
// of an index whose relation fields are fields. A document without MetaKey
// (written before the index had relations) is the entity's state at
// engineVersion. others returns the current version and document of an
// item's other endpoint (0, nil when it has none); it is called for every
// item step.
func NewLinkedFold(rules Rules, fields []string, doc map[string]any, engineVersion int64, others func(index, id string) (int64, map[string]any)) (*LinkedFold, error) {
	f := &LinkedFold{rules: rules, fields: fields, items: map[string]map[string]any{}, others: others}
	var entity map[string]any
	if doc != nil {
		raw, linked := doc[MetaKey]
		m, err := decodeLinkMeta(raw)
		if err != nil {
			return nil, err
		}
		f.meta = m
		live, _ := doc[LiveKey].(bool)
		if !linked {
			f.meta.V, live = engineVersion, true
		}
		entity = make(map[string]any, len(doc))
		for k, v := range doc {
			if k == MetaKey || k == LiveKey || slices.Contains(fields, k) {
				continue
			}
			entity[k] = v
		}
		if ts := rules.TombstoneField; !live && (ts == "" || entity[ts] != true) {
			entity = nil // no entity: a holder of the relations' versions
		}
		for _, field := range fields {
			arr, _ := doc[field].([]any)
			for _, it := range arr {
				m, ok := it.(map[string]any)
				if !ok {
					continue
				}
				id, ok := m[RelationItemID].(string)
				if !ok {
					continue
				}
				key := field + "/" + id
				// The copied fields of the other entity are not the item's:
				// they come from the copy in MetaKey when written.
				if e := f.meta.R[key]; e != nil {
					if c := f.meta.O[field+"/"+e.Other]; c != nil && len(c.F) > 0 {
						m = maps.Clone(m)
						for k := range c.F {
							delete(m, k)
						}
					}
				}
				f.items[key] = m
			}
		}
	}
	f.entity = NewFold(rules, entity, f.meta.V)
	if entity == nil && f.meta.V > 0 {
		f.entity.deleted = true
	}
	return f, nil
}

// Apply folds one result onto the document and says what it did.
func (f *LinkedFold) Apply(r *Result) Step {
	switch {
	case r.Op == OpIgnore:
		return Ignored
	case r.Link == nil:
		st := f.entity.Apply(r)
		if st == Applied && r.Op == OpDelete {
			f.cut(r.EventID)
		}
		return st
	case r.Link.Kind == LinkOther:
		return f.other(r.Link.Field, r.Link.OtherID, r.Link.OtherVersion, r.Link.Values)
	default:
		return f.link(r)
	}
}

// cut drops every relation entry older than the entity's delete id.
func (f *LinkedFold) cut(id int64) {
	f.meta.D = max(f.meta.D, id)
	for k, e := range f.meta.R {
		if e.I < f.meta.D {
			delete(f.meta.R, k)
			delete(f.items, k)
		}
	}
	for k, e := range f.meta.B {
		if e.I < f.meta.D {
			delete(f.meta.B, k)
		}
	}
	for k := range f.meta.O {
		field, id, _ := strings.Cut(k, "/")
		used := false
		for rk, e := range f.meta.R {
			if e.Other == id && strings.HasPrefix(rk, field+"/") {
				used = true
				break
			}
		}
		if !used {
			delete(f.meta.O, k)
		}
	}
}

func (f *LinkedFold) link(r *Result) Step {
	l := r.Link
	key := l.Field + "/" + l.Relation
	if sourceGuard && r.EventID < f.meta.D {
		return Stale // a relation of an earlier life of the entity
	}
	table := &f.meta.R
	if l.Kind == LinkBackref {
		table = &f.meta.B
	}
	e := (*table)[key]
	full := r.Op == OpIndex && r.Snapshot && !r.Partial
	if sourceGuard && e != nil && (r.Version < e.V || (r.Version == e.V && !full)) {
		// Applied before (a redelivery, a replay): the item stays as it
		// is, but its copy of the other entity's fields is brought up to
		// date from the other document as read now. The first delivery may
		// have written the item and failed before the fan-out that brings
		// a change of the other entity made meanwhile (its write of the
		// backref met that change, and the fan-out's read failed): the
		// retry finds item and backref written, and nothing else would
		// bring the change. A copy only moves to a newer version with other
		// values, so a replay of an up-to-date document changes nothing.
		if l.Kind == LinkItem && e.X && e.Other == l.OtherID {
			f.copyOther(l)
		}
		return Stale
	}
	if *table == nil {
		*table = map[string]*linkEntry{}
	}
	ne := &linkEntry{V: r.Version, I: r.EventID, X: r.Op == OpIndex}
	(*table)[key] = ne
	if l.Kind == LinkBackref {
		ne.T, ne.ID = l.Target, l.TargetID
		f.Backrefs = append(f.Backrefs, key)
		return Applied
	}
	ne.Other = l.OtherID
	if r.Op != OpIndex {
		delete(f.items, key)
		return Applied
	}
	var item map[string]any
	if e != nil && e.X && r.Partial {
		item = f.items[key]
	}
	w := NewWritable(item)
	if r.Partial {
		w.Merge(r.Doc)
	} else {
		w.Replace(r.Doc)
	}
	w.SetKey(RelationItemID, l.Relation)
	w.SetKey(l.Endpoint.OtherID, l.OtherID)
	f.items[key] = w.Doc()
	f.copyOther(l)
	return Applied
}

// copyOther brings the item of l the other endpoint's fields as others
// reads them (when newer than the copy held).
func (f *LinkedFold) copyOther(l *Link) {
	if len(l.Endpoint.OtherFields) > 0 && f.others != nil {
		v, doc := f.others(l.OtherIndex, l.OtherID)
		f.other(l.Field, l.OtherID, v, l.Endpoint.OtherValues(doc))
	}
}

// other brings a newer copy of another entity's fields.
func (f *LinkedFold) other(field, id string, version int64, values map[string]any) Step {
	key := field + "/" + id
	if c := f.meta.O[key]; c != nil && (version <= c.V || SameDocument(c.F, values)) {
		return Stale
	}
	if f.meta.O == nil {
		f.meta.O = map[string]*otherCopy{}
	}
	f.meta.O[key] = &otherCopy{V: version, F: values}
	return Applied
}

// EntityDoc returns the entity's part of the folded document (nil when the
// entity does not exist) and its version.
func (f *LinkedFold) EntityDoc() (map[string]any, int64) {
	_, v, doc := f.entity.Write()
	if f.entity.deleted {
		return nil, v
	}
	return doc, v
}

// Live reports whether the entity exists in the folded document.
func (f *LinkedFold) Live() bool {
	doc, _ := f.EntityDoc()
	if doc == nil {
		return false
	}
	if ts := f.rules.TombstoneField; ts != "" {
		if b, _ := doc[ts].(bool); b {
			return false
		}
	}
	return true
}

// Backref is a document whose items copy this document's entity fields.
type Backref struct {
	Index, ID, Field string
}

// LiveBackrefs returns the documents whose items copy this entity's fields
// (alive relations), sorted.
func (f *LinkedFold) LiveBackrefs(keys ...string) []Backref {
	var out []Backref
	for k, e := range f.meta.B {
		if !e.X || (len(keys) > 0 && !slices.Contains(keys, k)) {
			continue
		}
		field, _, _ := strings.Cut(k, "/")
		b := Backref{Index: e.T, ID: e.ID, Field: field}
		if !slices.Contains(out, b) {
			out = append(out, b)
		}
	}
	slices.SortFunc(out, func(a, b Backref) int {
		return strings.Compare(a.Index+"/"+a.ID+"/"+a.Field, b.Index+"/"+b.ID+"/"+b.Field)
	})
	return out
}

// Doc returns the folded document.
func (f *LinkedFold) Doc() map[string]any {
	entity, v := f.EntityDoc()
	out := make(map[string]any, len(entity)+3)
	maps.Copy(out, entity)
	f.meta.V = v
	out[LiveKey] = f.Live()
	lists := map[string][]string{}
	for k, e := range f.meta.R {
		if e.X {
			field, _, _ := strings.Cut(k, "/")
			lists[field] = append(lists[field], k)
		}
	}
	for _, field := range f.fields {
		delete(out, field)
	}
	for field, keys := range lists {
		slices.Sort(keys)
		arr := make([]any, 0, len(keys))
		for _, k := range keys {
			it := maps.Clone(f.items[k])
			if it == nil {
				it = map[string]any{}
			}
			if c := f.meta.O[field+"/"+f.meta.R[k].Other]; c != nil {
				maps.Copy(it, c.F)
			}
			arr = append(arr, it)
		}
		out[field] = arr
	}
	out[MetaKey] = f.meta.encode()
	return out
}

func (m *linkMeta) encode() map[string]any {
	out := map[string]any{"v": m.V}
	if m.D > 0 {
		out["d"] = m.D
	}
	entries := func(t map[string]*linkEntry) map[string]any {
		o := make(map[string]any, len(t))
		for k, e := range t {
			x := map[string]any{"v": e.V, "i": e.I, "x": e.X}
			if e.Other != "" {
				x["o"] = e.Other
			}
			if e.T != "" {
				x["t"], x["id"] = e.T, e.ID
			}
			o[k] = x
		}
		return o
	}
	if len(m.R) > 0 {
		out["r"] = entries(m.R)
	}
	if len(m.B) > 0 {
		out["b"] = entries(m.B)
	}
	if len(m.O) > 0 {
		o := make(map[string]any, len(m.O))
		for k, c := range m.O {
			o[k] = map[string]any{"v": c.V, "f": c.F}
		}
		out["o"] = o
	}
	return out
}

func decodeLinkMeta(v any) (linkMeta, error) {
	var m linkMeta
	if v == nil {
		return m, nil
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return m, &linkMetaError{"is not an object"}
	}
	m.V, m.D = num(obj["v"]), num(obj["d"])
	entries := func(x any) map[string]*linkEntry {
		src, _ := x.(map[string]any)
		if len(src) == 0 {
			return nil
		}
		out := make(map[string]*linkEntry, len(src))
		for k, raw := range src {
			e, _ := raw.(map[string]any)
			le := &linkEntry{V: num(e["v"]), I: num(e["i"])}
			le.X, _ = e["x"].(bool)
			le.Other, _ = e["o"].(string)
			le.T, _ = e["t"].(string)
			le.ID, _ = e["id"].(string)
			out[k] = le
		}
		return out
	}
	m.R, m.B = entries(obj["r"]), entries(obj["b"])
	if src, _ := obj["o"].(map[string]any); len(src) > 0 {
		m.O = make(map[string]*otherCopy, len(src))
		for k, raw := range src {
			e, _ := raw.(map[string]any)
			f, _ := e["f"].(map[string]any)
			m.O[k] = &otherCopy{V: num(e["v"]), F: f}
		}
	}
	return m, nil
}

type linkMetaError struct{ reason string }

func (e *linkMetaError) Error() string { return "document's " + MetaKey + " " + e.reason }

func num(v any) int64 {
	switch x := v.(type) {
	case json.Number:
		n, _ := strconv.ParseInt(x.String(), 10, 64)
		return n
	case int64:
		return x
	case float64:
		return int64(x)
	}
	return 0
}

// SameDocument reports whether two documents encode to the same bytes
// (Encode: keys sorted), as the engine would store them.
func SameDocument(a, b map[string]any) bool {
	if len(a) != len(b) {
		return false
	}
	x, err1 := Encode(a)
	y, err2 := Encode(b)
	return err1 == nil && err2 == nil && string(x) == string(y)
}

// SourceVersions is the sum of the versions of every source a linked
// document holds (its entity's, each relation's): a new event of any of
// them raises it. The copies of other entities' fields are left out: they
// are derived, and their version is that of the copy's last change, which
// two indexes may have learnt by different ways. The reindex's
// completeness check compares it where the engine's version, which counts
// one index's writes, says nothing.
func SourceVersions(doc map[string]any) int64 {
	m, err := decodeLinkMeta(doc[MetaKey])
	if err != nil {
		return -1
	}
	n := m.V
	for _, e := range m.R {
		n += e.V
	}
	for _, e := range m.B {
		n += e.V
	}
	return n
}

// Shown returns what other documents copy fields from: the entity's part
// of the folded document while the entity exists, nil while it does not
// (deleted, or not there yet). Every copy (an item's first, and the
// fan-out of a change) is taken from it.
func (f *LinkedFold) Shown() map[string]any {
	if !f.Live() {
		return nil
	}
	doc, _ := f.EntityDoc()
	return doc
}

// Copies returns the copies of other entities' fields a linked document
// holds: by field, the ids of the other entities.
func Copies(doc map[string]any) map[string][]string {
	m, err := decodeLinkMeta(doc[MetaKey])
	if err != nil {
		return nil
	}
	out := map[string][]string{}
	for k := range m.O {
		field, id, _ := strings.Cut(k, "/")
		out[field] = append(out[field], id)
	}
	return out
}
