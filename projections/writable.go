package projections

import (
	"maps"
	"reflect"
	"strings"
	"unsafe"
)

// Writable is a document changed copy-on-write over maps that others share
// (a cached current state, the documents of projected events): the first
// change of a map copies it (shallow), later changes of the same Writable
// change the copy, and everything not changed stays shared. Neither the
// document it starts from nor the documents merged into it are ever
// changed, so its result may share maps with both; whoever holds one of
// them must not change it in place either (the search consumer's states
// are only ever changed through a Writable).
//
// Folding an aggregate's events onto its current document used to deep-copy
// the document and every merged value (Clone, DeepMerge): a quarter of the
// consumer's CPU beside decoding (issue #11's profile).
type Writable struct {
	doc   map[string]any
	owned []unsafe.Pointer // the maps this Writable made, which it may change
}

// NewWritable returns a Writable over doc (nil: no document yet), which it
// never changes.
func NewWritable(doc map[string]any) Writable {
	return Writable{doc: doc}
}

// Doc returns the document (nil when there is none).
func (w *Writable) Doc() map[string]any { return w.doc }

// Replace makes doc the whole document, shared as it is.
func (w *Writable) Replace(doc map[string]any) {
	w.doc = doc
	w.owned = w.owned[:0]
}

// Merge merges src onto the document as DeepMerge does: objects key by key,
// everything else (scalars, arrays, null) replaces; a key src does not
// mention is kept. src's values are shared, not copied.
func (w *Writable) Merge(src map[string]any) {
	w.doc = w.merge(w.doc, src)
}

func (w *Writable) merge(dst, src map[string]any) map[string]any {
	dst = w.own(dst, len(src))
	for k, sv := range src {
		if sm, ok := sv.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				dst[k] = w.merge(dm, sm)
				continue
			}
		}
		dst[k] = sv
	}
	return dst
}

// SetKey sets the value of one top-level key: a key with dots in it is one
// key, not a path (as the tombstone field is read everywhere else).
func (w *Writable) SetKey(key string, value any) {
	w.doc = w.own(w.doc, 1)
	w.doc[key] = value
}

// Set sets the value at a dotted path, creating the objects on the way (as
// SetPath does).
func (w *Writable) Set(path string, value any) {
	w.doc = w.own(w.doc, 1)
	m := w.doc
	for {
		seg, rest, more := strings.Cut(path, ".")
		if !more {
			m[seg] = value
			return
		}
		next, _ := m[seg].(map[string]any)
		next = w.own(next, 1)
		m[seg] = next
		m, path = next, rest
	}
}

// own returns m if this Writable made it, else a copy of it that it then
// owns: maps.Clone (it copies the table as it is, much faster than
// inserting key by key), or for nil a new map with room for extra keys.
func (w *Writable) own(m map[string]any, extra int) map[string]any {
	var c map[string]any
	if m == nil {
		c = make(map[string]any, extra)
	} else {
		p := reflect.ValueOf(m).UnsafePointer()
		for _, o := range w.owned {
			if o == p {
				return m
			}
		}
		c = maps.Clone(m)
	}
	w.owned = append(w.owned, reflect.ValueOf(c).UnsafePointer())
	return c
}
