// Package contacts is the relations example of searchsync: persons
// (entity.person.* on DDM_ENTITY) in the persons index, and the relation
// "contact person of a customer" (relation.customer_contact.* on
// DDM_ENTITY_RELATION) listed in the customer's document (contacts, with
// each person's name and email) and in the person's (contact_of, with the
// customer's name). It builds on the customer example: load both.
//
// Files: projections.yaml (the person projection and the relation); the
// index definition of persons is the embedded default
// mapping/defs/persons.json. docs/relations.md walks through it.
package contacts

import (
	_ "embed"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/projections"
)

//go:embed projections.yaml
var projectionFile []byte

// ProjectionFile returns the example's projection file.
func ProjectionFile() []byte { return projectionFile }

// Aggregate types of the example's events.
const (
	PersonAggregate   = "DDM_ENTITY"
	RelationAggregate = "DDM_ENTITY_RELATION"
)

// Index is the alias persons are indexed under.
const Index = "persons"

// Register adds the person projection and the customer-contact relation,
// declared in projections.yaml, to set.
func Register(set *projections.Set) error {
	return set.AddFile("examples/contacts/projections.yaml", projectionFile)
}

// Person describes one person event.
type Person struct {
	Tenant  string    // tenant_key; default "public"
	ID      uuid.UUID // the person (aggregate_id and entity_id)
	Version int64
	Before  map[string]any
	After   map[string]any // display_name, email, phone
}

// PersonEvent builds the outbox event entity.person.<verb> (created:
// after holds the whole person; updated: the changed fields; deleted).
func PersonEvent(verb string, p Person) outbox.Event {
	payload := map[string]any{"tenant_key": tenant(p.Tenant), "entity_type": "person", "entity_id": p.ID.String(),
		"version": p.Version, "before": obj(p.Before), "after": obj(p.After)}
	id := p.ID
	return outbox.Event{EventType: "entity.person." + verb, SchemaVersion: 1, AggregateType: PersonAggregate, AggregateID: &id, Payload: encode(payload)}
}

// Contact describes one event of the relation: person Person is a contact
// of customer Customer.
type Contact struct {
	Tenant   string
	ID       uuid.UUID // the relation (aggregate_id)
	Customer uuid.UUID // source_entity_id
	Person   uuid.UUID // target_entity_id
	Version  int64
	Before   map[string]any
	After    map[string]any // role, primary
}

// ContactEvent builds the outbox event relation.customer_contact.<verb>
// (created: after holds the whole relation; updated: the changed fields;
// deleted).
func ContactEvent(verb string, c Contact) outbox.Event {
	payload := map[string]any{"tenant_key": tenant(c.Tenant), "relation_type": "customer_contact", "relation_id": c.ID.String(),
		"source_entity_type": "customer", "source_entity_id": c.Customer.String(),
		"target_entity_type": "person", "target_entity_id": c.Person.String(),
		"version": c.Version, "before": obj(c.Before), "after": obj(c.After)}
	id := c.ID
	return outbox.Event{EventType: "relation.customer_contact." + verb, SchemaVersion: 1, AggregateType: RelationAggregate, AggregateID: &id, Payload: encode(payload)}
}

func tenant(t string) string {
	if t == "" {
		return "public"
	}
	return t
}

func obj(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}

func encode(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("contacts: payload does not encode: %v", err))
	}
	return b
}
