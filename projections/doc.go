// Package projections owns the translation of outbox events into search
// documents: upcasting a payload to the newest schema_version, projecting it
// into a document, an id, an external version and an operation (index,
// delete, ignore), and folding a document's events onto its current state
// (Fold: partial merge, the tenant field, soft-delete tombstones, stale
// versions), the one fold the search consumer and the reindex replay share.
//
// # Projection files
//
// The common case is declared in YAML (ParseFile, Set.AddFile,
// Set.LoadFiles; the reference is docs/projections.md): fields copied or
// computed by an expression, operations by event type or by a condition on
// the payload, and upcasters as steps. What YAML cannot say is a Go
// function registered on the Set (RegisterFunc) and named by `go:` in the
// file, which runs after the declared fields and may change the result:
//
//	projections:
//	  - name: customer
//	    event_types: ["entity.customer.*"]     # path.Match patterns
//	    aggregate_types: ["DDM_ENTITY"]
//	    index: customers                       # the alias (index definition name)
//	    id: "@aggregate_id"                    # default; @… names an event column
//	    version: version                       # default; JSON path in the payload
//	    tenant: tenant_key                     # default
//	    schema_version: 2                      # newest payload shape this projection reads; default 1
//	    delete_on: ["*.deleted"]               # default
//	    ignore_on: ["*.viewed"]                # default none
//	    full_state_on: ["*.created", "*.snapshot"]  # default: `after` is the whole state
//	    delete_when: 'payload.after.?status.orValue("") == "archived"'  # default none
//	    ignore_when: 'payload.tenant_key.startsWith("test-")'          # default none
//	    copy_all_of_after: true                # every field of `after` goes into the document
//	    fields:
//	      - {from: code, to: code, type: keyword}
//	      - {from: after.name, to: name, type: text}
//	      - {from: actor.principal_id, to: updated_by, type: keyword}
//	      - {to: full_name, expr: 'payload.after.first + " " + payload.after.last',
//	         when: 'has(payload.after.first)', type: text}
//	upcasters:
//	  - name: display-name
//	    event_types: ["entity.customer.*"]
//	    from: 1                                # schema_version 1 → 2
//	    steps:
//	      - {rename: name, to: display_name, in: [before, after]}
//
// Paths are dotted JSON paths into the payload ("after.address.city",
// "items.0.sku"); a path that starts with "@" names a column of the event:
// @id, @aggregate_id, @aggregate_type, @event_type, @tenant_id,
// @correlation_id, @schema_version, @created_at.
//
// # Partial and full-state payloads
//
// A payload whose `before`/`after` hold only the changed fields is partial:
// the Result has Partial set and its Doc holds only the mentioned fields;
// Fold merges it onto the current document (as DeepMerge does, copy-on-write
// through a Writable), so a field the event did not mention never
// disappears. An explicit null in `after` sets the field to null.
// Events matching full_state_on carry the whole state in `after`: their
// document replaces the current one.
//
// # Field types
//
// A field's type converts values where that is lossless (a number to a
// keyword string, "42" to a long, "true" to a boolean) and makes anything
// else poison with a message naming the field; null is always allowed. Fields
// copied by copy_all_of_after are not converted: the index mapping decides, and
// a mapping rejection by the engine is poison with the engine's reason.
//
// # Expressions
//
// Computed fields (expr), their conditions (when), delete_when and
// ignore_when are CEL (cel.dev/cel-go), compiled when the file is added
// (an error names the file, line and key) and evaluated per event on
// payload (after upcasting), event (the columns) and, in an upcaster step,
// self. CEL has no I/O and no clock: the same event gives the same
// document on a replay. An expression that fails on an event (a field it
// reads is absent, a type clash) is poison naming the projection, the field
// or condition, the expression, the path and the column; has() and
// optional selection (payload.after.?x.orValue("")) say what absent means.
//
// # Upcasters and schema_version
//
// Upcasters turn a payload of schema_version N into N+1, per event-type
// pattern: declared in a file (`upcasters:`, steps rename, copy, default,
// drop, convert and set, each on a dotted path of the payload or of each
// object `in` names; UpcasterDecl) or in Go (RegisterUpcaster); the two
// chain. A step that cannot apply (a value on the way is not an object, a
// target rename or copy would overwrite, a value convert cannot convert, a
// failing expression) is poison naming the upcaster, the step and the
// path; an absent path is left alone unless the step is required (partial
// payloads mention only what changed). A projection sees the newest shape only: the newest
// version of an event type is the largest of the projection's
// schema_version and every matching upcaster's N+1. An event newer than that,
// one with a gap in the upcaster chain, or one whose schema_version is below 1
// (possible only through plain SQL: the column defaults to 1 and the Go writer
// stores 1 for a zero value) is poison with a clear message, never dropped and
// never indexed half-understood.
//
// # Relations
//
// A relation aggregate (`relations:`, Relation) reaches the documents of
// the two entities it connects: Set.ProjectAll gives one result per
// document, each with its Link (the relation's item, or the backref in the
// other entity whose fields the item copies). The documents of such an
// index (Set.Linked) are folded by LinkedFold, which keeps every source's
// version inside the document (MetaKey) and the entity's existence
// (LiveKey); package linked reads and writes them. docs/relations.md.
//
// # Errors
//
// Every error that retrying cannot fix is a *PoisonError; the consumer turns
// it into a Poison outcome with the error's text as the reason.
package projections
