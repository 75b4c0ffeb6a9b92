package projections

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/searchsync/searchsync/outbox"
)

// Relation declares how the events of a relation aggregate (aggregate_type
// DDM_ENTITY_RELATION: a contact person of a customer, a parent company)
// reach the documents of the two entities it connects. Each endpoint whose
// Field is set lists the relation in that field of its document, as one
// item per relation: relation_id, the other endpoint's id (under OtherID),
// the declared Fields of the relation's payload, and OtherFields copied
// from the other endpoint's own document. docs/relations.md has the rules.
type Relation struct {
	// Name identifies the relation in errors. Required, unique among
	// relations and projections.
	Name string `yaml:"name" json:"name"`
	// EventTypes are path.Match patterns on event_type. Required.
	EventTypes []string `yaml:"event_types" json:"event_types"`
	// AggregateTypes are patterns on aggregate_type. Default
	// ["DDM_ENTITY_RELATION"].
	AggregateTypes []string `yaml:"aggregate_types" json:"aggregate_types"`
	// ID is the path of the relation's id. Default "@aggregate_id".
	ID string `yaml:"id" json:"id"`
	// Version is the path of the relation's version. Default "version".
	Version string `yaml:"version" json:"version"`
	// Tenant is the path of the tenant key. Default "tenant_key"; "-" for none.
	Tenant string `yaml:"tenant" json:"tenant"`
	// SchemaVersion is the newest payload shape the relation reads. Default 1.
	SchemaVersion int `yaml:"schema_version" json:"schema_version"`
	// DeleteOn, IgnoreOn and FullStateOn as for a projection (defaults
	// ["*.deleted"], none, ["*.created", "*.snapshot"]).
	DeleteOn    []string `yaml:"delete_on" json:"delete_on"`
	IgnoreOn    []string `yaml:"ignore_on" json:"ignore_on"`
	FullStateOn []string `yaml:"full_state_on" json:"full_state_on"`
	// After is the path of the relation's new state (or changed fields).
	// Default "after".
	After string `yaml:"after" json:"after"`
	// Fields of the relation's payload copied into each item (from a
	// payload path or an expression, as a projection's fields; `to` is the
	// key in the item). A partial event merges them onto the item.
	Fields []Field `yaml:"fields" json:"fields"`
	// Source and Target are the two endpoints. Both required.
	Source Endpoint `yaml:"source" json:"source"`
	Target Endpoint `yaml:"target" json:"target"`

	proj *Projection // the op, id, version, tenant and fields of an event
}

// Endpoint is one end of a relation.
type Endpoint struct {
	// ID is the payload path of the endpoint entity's id, which is its
	// document id. Required; every event of the relation must carry it
	// (the endpoints of a relation never change).
	ID string `yaml:"id" json:"id"`
	// Index is the alias of the endpoint's documents. Required.
	Index string `yaml:"index" json:"index"`
	// Field, when set, is the top-level field of the endpoint's document
	// that lists the relation (one item per relation, sorted by
	// relation_id). Unset: this endpoint does not list it.
	Field string `yaml:"field" json:"field,omitempty"`
	// OtherID is the item key that holds the other endpoint's id. Default
	// "other_id".
	OtherID string `yaml:"other_id" json:"other_id,omitempty"`
	// OtherFields are copied into the item from the other endpoint's own
	// document (its index is the other endpoint's Index), and kept up to
	// date when that entity changes (docs/relations.md, "Propagation").
	OtherFields []OtherField `yaml:"other_fields" json:"other_fields,omitempty"`
}

// OtherField copies one field of the other endpoint's document into the item.
type OtherField struct {
	// From is the dotted path in the other endpoint's document. Required.
	From string `yaml:"from" json:"from"`
	// To is the key in the item. Default: the last segment of From.
	To string `yaml:"to" json:"to"`
}

// RelationItemID is the item key that holds the relation's id.
const RelationItemID = "relation_id"

// LinkKind says what a relation result does to a document.
type LinkKind uint8

const (
	// LinkItem adds, changes or (OpDelete) removes the relation's item in
	// Link.Field of the endpoint's document.
	LinkItem LinkKind = iota + 1
	// LinkBackref records in the other endpoint's document that the
	// relation's item in Link.Target/Link.TargetID copies its fields, so
	// that a change of them reaches that item (OpDelete: no longer).
	LinkBackref
	// LinkOther brings the copy of another entity's fields (Values, at
	// OtherVersion) into the items of Link.Field that name it: the fan-out
	// of a change of that entity.
	LinkOther
)

// Link is what a relation result carries besides the document it writes.
type Link struct {
	Kind LinkKind
	// Relation is the relation's id; Decl its declaration's name.
	Relation string
	Decl     string
	// Field is the field of the receiving document that lists the item.
	Field string
	// OtherID is the other endpoint's id, OtherIndex its alias (LinkItem:
	// where its fields are read).
	OtherID    string
	OtherIndex string
	// Endpoint is the declaration of the receiving endpoint (LinkItem,
	// LinkBackref).
	Endpoint *Endpoint
	// Target and TargetID are the receiving document (LinkBackref).
	Target, TargetID string
	// OtherVersion and Values are the other entity's version and copied
	// fields (LinkOther).
	OtherVersion int64
	Values       map[string]any
}

func (r *Relation) setDefaults() {
	if r.AggregateTypes == nil {
		r.AggregateTypes = []string{"DDM_ENTITY_RELATION"}
	}
	for _, ep := range []*Endpoint{&r.Source, &r.Target} {
		ep.OtherID = orDefault(ep.OtherID, "other_id")
		for i := range ep.OtherFields {
			if ep.OtherFields[i].To == "" {
				ep.OtherFields[i].To = ep.OtherFields[i].From[strings.LastIndex(ep.OtherFields[i].From, ".")+1:]
			}
		}
	}
	r.proj = &Projection{Name: r.Name, EventTypes: r.EventTypes, AggregateTypes: r.AggregateTypes, Index: "relation " + r.Name,
		ID: r.ID, Version: r.Version, Tenant: r.Tenant, SchemaVersion: r.SchemaVersion, DeleteOn: r.DeleteOn, IgnoreOn: r.IgnoreOn,
		FullStateOn: r.FullStateOn, After: r.After, Fields: r.Fields}
	r.proj.setDefaults()
	r.proj.Version = orDefault(r.proj.Version, "version")
}

// check validates the declaration and compiles its expressions.
func (r *Relation) check() error {
	err := r.checkDecl()
	if de, ok := errors.AsType[*DeclError](err); ok {
		de.Relation = true
	}
	return err
}

func (r *Relation) checkDecl() error {
	bad := func(key, format string, args ...any) error {
		return &DeclError{Projection: r.Name, Key: key, Reason: fmt.Sprintf(format, args...)}
	}
	if r.Name == "" {
		return &DeclError{Key: "name", Reason: "is required"}
	}
	p := &Projection{Name: r.Name, EventTypes: r.EventTypes, AggregateTypes: r.AggregateTypes, Index: "relation", ID: r.ID,
		Version: r.Version, Tenant: r.Tenant, SchemaVersion: r.SchemaVersion, DeleteOn: r.DeleteOn, IgnoreOn: r.IgnoreOn,
		FullStateOn: r.FullStateOn, After: r.After, Fields: r.Fields}
	if err := p.check(); err != nil {
		return err
	}
	for i, f := range r.Fields {
		to := f.To
		if to == "" {
			to = f.From[strings.LastIndex(f.From, ".")+1:]
		}
		if to == RelationItemID || to == r.Source.OtherID || to == r.Target.OtherID {
			return bad(fmt.Sprintf("fields[%d].to", i), "%q is a key searchsync sets in the item", to)
		}
	}
	receives := false
	for key, ep := range map[string]*Endpoint{"source": &r.Source, "target": &r.Target} {
		if err := validPath(ep.ID); err != nil {
			return bad(key+".id", "%v", err)
		}
		if ep.Index == "" {
			return bad(key+".index", "is required")
		}
		if ep.Field == "" {
			if len(ep.OtherFields) > 0 {
				return bad(key+".other_fields", "needs field: the endpoint lists no item to copy them into")
			}
			continue
		}
		receives = true
		if strings.ContainsAny(ep.Field, ".@") || strings.HasPrefix(ep.Field, "_") {
			return bad(key+".field", "%q must be a top-level key (no dots, not starting with _ or @)", ep.Field)
		}
		for i, of := range ep.OtherFields {
			if err := validPath(of.From); err != nil || strings.HasPrefix(of.From, "@") {
				return bad(fmt.Sprintf("%s.other_fields[%d].from", key, i), "%q is not a dotted document path", of.From)
			}
		}
	}
	if !receives {
		return bad("source.field", "neither endpoint sets field: the relation would reach no document")
	}
	return nil
}

// endpoints returns the endpoints in order (source, target) with the other
// one of each.
func (r *Relation) endpoints() [2][2]*Endpoint {
	return [2][2]*Endpoint{{&r.Source, &r.Target}, {&r.Target, &r.Source}}
}

// project turns one event of the relation into the results of the
// documents it reaches in indexes (all when empty): a LinkItem for each
// endpoint that lists it, a LinkBackref in the other endpoint's document
// for each one that copies the other's fields.
func (r *Relation) project(e *outbox.Event, payload map[string]any, indexes []string) ([]*Result, error) {
	base, err := r.proj.project(e, payload, r.proj.Version)
	if err != nil {
		return nil, err
	}
	if base.Op == OpIgnore {
		return nil, nil
	}
	var ids [2]string
	for i, ep := range []*Endpoint{&r.Source, &r.Target} {
		v, ok := resolve(e, payload, ep.ID)
		var id string
		switch x := v.(type) {
		case string:
			id = x
		case json.Number:
			id = x.String()
		}
		if !ok || id == "" || len(id) > 512 {
			return nil, poison(e, r.Name, ep.ID, "relation %s: no endpoint id (a string or number of at most 512 bytes) at %s", r.Name, ep.ID)
		}
		ids[i] = id
	}
	var out []*Result
	want := func(index string) bool { return len(indexes) == 0 || slices.Contains(indexes, index) }
	for i, pair := range r.endpoints() {
		me, other := pair[0], pair[1]
		if me.Field == "" {
			continue
		}
		myID, otherID := ids[i], ids[1-i]
		if want(me.Index) {
			res := *base
			res.Index, res.ID = me.Index, myID
			res.Link = &Link{Kind: LinkItem, Relation: base.ID, Decl: r.Name, Field: me.Field, OtherID: otherID, OtherIndex: other.Index, Endpoint: me}
			out = append(out, &res)
		}
		if len(me.OtherFields) > 0 && want(other.Index) {
			res := *base
			res.Index, res.ID, res.Doc, res.Partial = other.Index, otherID, nil, false
			res.Link = &Link{Kind: LinkBackref, Relation: base.ID, Decl: r.Name, Field: me.Field, OtherID: myID, OtherIndex: me.Index,
				Endpoint: me, Target: me.Index, TargetID: myID}
			out = append(out, &res)
		}
	}
	return out, nil
}

// OtherValues returns the fields that ep copies from the other endpoint's
// document doc (nil: none, for a document that does not exist).
func (ep *Endpoint) OtherValues(doc map[string]any) map[string]any {
	if len(ep.OtherFields) == 0 {
		return nil
	}
	out := make(map[string]any, len(ep.OtherFields))
	for _, of := range ep.OtherFields {
		if v, ok := Lookup(doc, of.From); ok {
			out[of.To] = deepCopy(v)
		}
	}
	return out
}
