package projections

// Rules are what an index definition says about the documents folded for
// it (mapping.Def.FoldRules makes them from a definition).
type Rules struct {
	// TenantField is the dotted path of the field that holds the tenant key
	// in an index that tenants share; "" when the index is not shared (one
	// index per tenant).
	TenantField string
	// TombstoneField is the top-level key that marks soft-deleted
	// documents; "" when a delete removes the document (a hard delete).
	TombstoneField string
}

// NeedsState reports whether folding r needs the document's current state:
// a partial payload merges onto it, and a soft delete writes it with the
// tombstone set.
func (ru Rules) NeedsState(r *Result) bool {
	return (r.Op == OpIndex && r.Partial) || (r.Op == OpDelete && ru.TombstoneField != "")
}

// Step says what Fold.Apply did with one event.
type Step uint8

const (
	// Applied: the event changed the folded state.
	Applied Step = iota
	// Ignored: the event's op is OpIgnore.
	Ignored
	// Stale: the event's version is not above the state's or an applied
	// event's; it changes nothing.
	Stale
)

// Fold is the one event → document fold: it applies the projected events
// of one document, in order, onto the document's current state, and says
// what to write. The search consumer (per batch) and the reindex replay
// (per chunk) both build their documents with it, so that a replayed
// document equals the live one. The rules:
//
//   - An event whose version is not above the state's (or an event applied
//     before) is Stale and skipped; a state of version 0 with nothing
//     applied takes any version. One exception: a full-state snapshot at
//     the state's own version is applied. It is the whole state at that
//     version (a backfill reads it under the aggregate's lock), while the
//     state may have been merged from partial events onto a document the
//     index never had (data older than the outbox). Snapshot says so, and
//     the write may then replace a document of the same version
//     (version_type external_gte).
//   - OpIndex: a partial result merges onto the state (objects key by key,
//     a key it does not mention is kept), a full-state one replaces it. In
//     an index that tenants share, the tenant field is filled in from the
//     event's tenant when the projection did not set it. With soft deletes
//     the tombstone field is false.
//   - OpDelete: with soft deletes, the state (the tenant field filled in
//     as above when it lacks one) with the tombstone field true; else the
//     document goes (a hard delete), and a later OpIndex starts anew.
//   - OpIgnore changes nothing.
//
// The state is built copy-on-write (Writable): neither the state Fold
// starts from nor the results' documents are changed, and the folded
// document may share maps with both, so it must not be changed in place
// either.
type Fold struct {
	rules   Rules
	w       Writable
	version int64
	applied int
	deleted bool
	// snapshot: the last applied event was a full-state snapshot.
	snapshot bool
}

// NewFold starts a fold onto doc (nil: no document yet), held at version
// (0: none).
func NewFold(rules Rules, doc map[string]any, version int64) Fold {
	return Fold{rules: rules, w: NewWritable(doc), version: version}
}

// Apply folds r onto the state and says what it did.
func (f *Fold) Apply(r *Result) Step {
	if r.Op == OpIgnore {
		return Ignored
	}
	full := r.Op == OpIndex && r.Snapshot && !r.Partial
	sameVersion := full && r.Version == f.version && !f.deleted
	if r.Version <= f.version && (f.version > 0 || f.applied > 0) && !sameVersion {
		return Stale
	}
	f.snapshot = full
	tombstone := f.rules.TombstoneField
	switch r.Op {
	case OpIndex:
		doc := r.Doc
		if f.lacksTenant(doc, r.Tenant) {
			// Copy-on-write: the result's document is never changed.
			tw := NewWritable(doc)
			tw.Set(f.rules.TenantField, r.Tenant)
			doc = tw.Doc()
		}
		if r.Partial {
			f.w.Merge(doc)
		} else {
			f.w.Replace(doc)
		}
		if f.w.Doc() == nil {
			f.w.Replace(map[string]any{}) // a full-state result without a document
		}
		f.deleted = false
		if tombstone != "" {
			f.w.SetKey(tombstone, false)
		}
	case OpDelete:
		if tombstone != "" {
			if f.lacksTenant(f.w.Doc(), r.Tenant) {
				f.w.Set(f.rules.TenantField, r.Tenant)
			}
			f.w.SetKey(tombstone, true)
		} else {
			f.w.Replace(nil)
			f.deleted = true
		}
	}
	f.version = r.Version
	f.applied++
	return Applied
}

// lacksTenant reports whether the tenant field is to be filled in doc.
func (f *Fold) lacksTenant(doc map[string]any, tenant string) bool {
	if f.rules.TenantField == "" || tenant == "" {
		return false
	}
	_, ok := Lookup(doc, f.rules.TenantField)
	return !ok
}

// Snapshot reports whether the last applied event was a full-state
// snapshot: the folded document is the whole state at its version, and its
// write may replace a document of that same version (external_gte) that
// partial events built without the rest of the state.
func (f *Fold) Snapshot() bool { return f.snapshot }

// ApplyAll applies every result of rs in order.
func (f *Fold) ApplyAll(rs []*Result) {
	for _, r := range rs {
		f.Apply(r)
	}
}

// Write returns what brings the index to the folded state: OpIndex with
// the document, OpDelete (a hard delete, doc nil), or OpIgnore when no
// event was applied (doc and version are then the state's). version is
// the last applied event's.
func (f *Fold) Write() (op Op, version int64, doc map[string]any) {
	switch {
	case f.applied == 0:
		return OpIgnore, f.version, f.w.Doc()
	case f.deleted:
		return OpDelete, f.version, nil
	default:
		return OpIndex, f.version, f.w.Doc()
	}
}
