package loadgen

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/outbox"
)

// Person is the state the generator keeps of one person (the contacts
// example: entity.person.* on DDM_ENTITY).
type Person struct {
	ID      uuid.UUID
	Version int64
	State   map[string]any
	Deleted bool
}

// Contact is the state the generator keeps of one relation "person Person
// is a contact of customer Customer" (relation.customer_contact.* on
// DDM_ENTITY_RELATION).
type Contact struct {
	ID       uuid.UUID
	Customer uuid.UUID
	Person   uuid.UUID
	Version  int64
	State    map[string]any // role, primary
	Deleted  bool
}

// Names of persons: apart from the customers' names, so that a search for
// a person's name finds a customer through its contacts only.
var (
	personFirst = []string{"Marie", "Lise", "Emmy", "Rosalind", "Katherine", "Hedy", "Sophie", "Mary"}
	personLast  = []string{"Curie", "Meitner", "Noether", "Franklin", "Johnson", "Lamarr", "Germain", "Somerville"}
	roles       = []string{"sales", "billing", "technical", "management"}
)

func (g *Generator) personEvent(p *Person, verb string, before, after map[string]any) outbox.Event {
	b, _ := json.Marshal(map[string]any{
		"tenant_key":  g.Tenant,
		"entity_type": "person",
		"entity_id":   p.ID.String(),
		"version":     p.Version,
		"before":      before,
		"after":       after,
		"actor":       map[string]any{"principal_type": "user", "principal_id": g.actor.String()},
	})
	id := p.ID
	return outbox.Event{EventType: "entity.person." + verb, AggregateType: "DDM_ENTITY", AggregateID: &id, Payload: b}
}

func (g *Generator) contactEvent(c *Contact, verb string, before, after map[string]any) outbox.Event {
	b, _ := json.Marshal(map[string]any{
		"tenant_key":         g.Tenant,
		"relation_type":      "customer_contact",
		"relation_id":        c.ID.String(),
		"source_entity_type": "customer",
		"source_entity_id":   c.Customer.String(),
		"target_entity_type": "person",
		"target_entity_id":   c.Person.String(),
		"version":            c.Version,
		"before":             before,
		"after":              after,
		"actor":              map[string]any{"principal_type": "user", "principal_id": g.actor.String()},
	})
	id := c.ID
	return outbox.Event{EventType: "relation.customer_contact." + verb, AggregateType: "DDM_ENTITY_RELATION", AggregateID: &id, Payload: b}
}

func (g *Generator) createPerson() outbox.Event {
	g.pseq++
	p := &Person{ID: uuid.New(), Version: 1}
	p.State = map[string]any{
		"display_name": personFirst[g.rng.IntN(len(personFirst))] + " " + personLast[g.rng.IntN(len(personLast))],
		"email":        fmt.Sprintf("p%d@example.org", g.pseq),
		"phone":        fmt.Sprintf("+49 30 %07d", g.rng.IntN(10_000_000)),
	}
	g.persons = append(g.persons, p)
	return g.personEvent(p, "created", map[string]any{}, clone(p.State))
}

// updatePerson renames p (a third of the updates: the customers' copies
// of the name follow), or changes its email or phone.
func (g *Generator) updatePerson(p *Person) outbox.Event {
	p.Version++
	before, after := map[string]any{}, map[string]any{}
	switch g.rng.IntN(3) {
	case 0:
		before["display_name"], after["display_name"] = p.State["display_name"], personFirst[g.rng.IntN(len(personFirst))]+" "+personLast[g.rng.IntN(len(personLast))]
	case 1:
		before["email"], after["email"] = p.State["email"], fmt.Sprintf("p%d.%d@example.org", g.pseq, p.Version)
	default:
		before["phone"], after["phone"] = p.State["phone"], fmt.Sprintf("+49 40 %07d", g.rng.IntN(10_000_000))
	}
	for k, v := range after {
		p.State[k] = v
	}
	return g.personEvent(p, "updated", before, after)
}

// createContact makes customer c and person p related, with a role.
func (g *Generator) createContact(c *Customer, p *Person) outbox.Event {
	r := &Contact{ID: uuid.New(), Customer: c.ID, Person: p.ID, Version: 1,
		State: map[string]any{"role": roles[g.rng.IntN(len(roles))], "primary": g.rng.IntN(4) == 0}}
	g.contacts = append(g.contacts, r)
	return g.contactEvent(r, "created", map[string]any{}, clone(r.State))
}

// updateContact changes the role of r (or whether it is the primary one).
func (g *Generator) updateContact(r *Contact) outbox.Event {
	r.Version++
	before, after := map[string]any{}, map[string]any{}
	if g.rng.IntN(4) == 0 {
		before["primary"], after["primary"] = r.State["primary"], r.State["primary"] != true
	} else {
		before["role"], after["role"] = r.State["role"], roles[g.rng.IntN(len(roles))]
	}
	for k, v := range after {
		r.State[k] = v
	}
	return g.contactEvent(r, "updated", before, after)
}

func (g *Generator) deleteContact(r *Contact) outbox.Event {
	if i := slices.Index(g.contacts, r); i >= 0 {
		g.contacts = slices.Delete(g.contacts, i, i+1)
	}
	r.Version++
	r.Deleted = true
	return g.contactEvent(r, "deleted", clone(r.State), map[string]any{})
}

// deletePerson deletes p's relations and then p.
func (g *Generator) deletePerson(p *Person) []outbox.Event {
	out := g.deleteContactsOf(p.ID)
	if i := slices.Index(g.persons, p); i >= 0 {
		g.persons = slices.Delete(g.persons, i, i+1)
	}
	p.Version++
	p.Deleted = true
	return append(out, g.personEvent(p, "deleted", clone(p.State), map[string]any{}))
}

// deleteContactsOf deletes the live relations of the customer or person id.
func (g *Generator) deleteContactsOf(id uuid.UUID) []outbox.Event {
	var out []outbox.Event
	for _, r := range slices.Clone(g.contacts) {
		if r.Customer == id || r.Person == id {
			out = append(out, g.deleteContact(r))
		}
	}
	return out
}

// nextContacts returns the events of one step of the contacts mix: a
// person created (16 %), updated (44 %: renames, emails, phones) or
// deleted (4 %) and a relation created (20 %), updated (12 %: role,
// primary) or deleted (4 %). A relation links a live customer and a live
// person; deleting a person (or, in the contacts mix, a customer) deletes
// its relations first, as the application does.
func (g *Generator) nextContacts() []outbox.Event {
	r := g.rng.IntN(100)
	switch {
	case r < 16 || len(g.persons) == 0:
		return []outbox.Event{g.createPerson()}
	case r < 60:
		return []outbox.Event{g.updatePerson(g.persons[g.rng.IntN(len(g.persons))])}
	case r < 64:
		return g.deletePerson(g.persons[g.rng.IntN(len(g.persons))])
	case r < 84 || len(g.contacts) == 0:
		if len(g.live) == 0 {
			return []outbox.Event{g.createPerson()} // no customer to relate
		}
		return []outbox.Event{g.createContact(g.live[g.rng.IntN(len(g.live))], g.persons[g.rng.IntN(len(g.persons))])}
	case r < 96:
		return []outbox.Event{g.updateContact(g.contacts[g.rng.IntN(len(g.contacts))])}
	default:
		return []outbox.Event{g.deleteContact(g.contacts[g.rng.IntN(len(g.contacts))])}
	}
}

// Persons returns a copy of the live persons' current state.
func (g *Generator) Persons() []Person {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]Person, len(g.persons))
	for i, p := range g.persons {
		out[i] = *p
		out[i].State = clone(p.State)
	}
	return out
}

// Contacts returns a copy of the live relations' current state.
func (g *Generator) Contacts() []Contact {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]Contact, len(g.contacts))
	for i, r := range g.contacts {
		out[i] = *r
		out[i].State = clone(r.State)
	}
	return out
}
