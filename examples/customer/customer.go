// Package customer is the worked example of searchsync: entity.customer.*
// events on the aggregate DDM_ENTITY, with payloads shaped like the outbox
// spec's example, projected into the customers index. The tests of the
// search consumer and the demo use it.
//
// Files: projections.yaml (the projection), searchsync.yaml (a configuration
// that routes the events to the search consumer); the index definition is
// the embedded default mapping/defs/customers.json.
package customer

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

// AggregateType is the aggregate of customer events.
const AggregateType = "DDM_ENTITY"

// Index is the alias customers are indexed under.
const Index = "customers"

// Register adds the customer projection and its upcaster (schema_version
// 1 → 2: after.name and before.name become display_name), both declared in
// projections.yaml, to set.
func Register(set *projections.Set) error {
	return set.AddFile("examples/customer/projections.yaml", projectionFile)
}

// UpcastV1 is the Go upcaster the example registered before projections.yaml
// declared it (`rename: name` in before and after): schema_version 1 → 2,
// name → display_name. Register no longer uses it; it stays as the reference
// the declared upcaster is tested against (TestDeclaredUpcasterLikeGo) and as
// the baseline of BenchmarkConsumerDeclarative.
func UpcastV1(p map[string]any) error {
	for _, k := range []string{"before", "after"} {
		m, ok := p[k].(map[string]any)
		if !ok {
			continue
		}
		if v, ok := m["name"]; ok {
			m["display_name"] = v
			delete(m, "name")
		}
	}
	return nil
}

// Actor is who made the change.
type Actor struct {
	PrincipalType string `json:"principal_type"`
	PrincipalID   string `json:"principal_id"`
}

// Payload is the spec's example payload.
type Payload struct {
	TenantKey  string         `json:"tenant_key"`
	EntityType string         `json:"entity_type"`
	EntityID   string         `json:"entity_id"`
	Code       string         `json:"code"`
	Version    any            `json:"version,omitempty"` // int64 normally; anything for poison tests
	Before     map[string]any `json:"before"`
	After      map[string]any `json:"after"`
	Actor      Actor          `json:"actor"`
}

// Change describes one customer event.
type Change struct {
	Tenant  string    // tenant_key; default "public"
	ID      uuid.UUID // the customer (aggregate_id and entity_id)
	Code    string    // default C-<first 8 of ID>
	Version int64
	Before  map[string]any
	After   map[string]any
	// Schema is the schema_version; default 2 (1 uses `name`: see the
	// upcaster in projections.yaml).
	Schema int
	// NoVersion leaves version out of the payload; RawVersion, when set,
	// replaces it (poison tests).
	NoVersion  bool
	RawVersion any
}

// Event builds the outbox event entity.customer.<verb> for a change.
func Event(verb string, c Change) outbox.Event {
	if c.Tenant == "" {
		c.Tenant = "public"
	}
	if c.Code == "" {
		c.Code = "C-" + c.ID.String()[:8]
	}
	if c.Schema == 0 {
		c.Schema = 2
	}
	p := Payload{TenantKey: c.Tenant, EntityType: "customer", EntityID: c.ID.String(), Code: c.Code,
		Before: c.Before, After: c.After, Actor: Actor{PrincipalType: "user", PrincipalID: "u-demo"}}
	if p.Before == nil {
		p.Before = map[string]any{}
	}
	if p.After == nil {
		p.After = map[string]any{}
	}
	switch {
	case c.RawVersion != nil:
		p.Version = c.RawVersion
	case !c.NoVersion:
		p.Version = c.Version
	}
	b, err := json.Marshal(p)
	if err != nil {
		panic(fmt.Sprintf("customer: payload does not encode: %v", err))
	}
	id := c.ID
	return outbox.Event{EventType: "entity.customer." + verb, SchemaVersion: c.Schema, AggregateType: AggregateType, AggregateID: &id, Payload: b}
}

// Created is a created event whose after holds the whole customer.
func Created(c Change) outbox.Event { return Event("created", c) }

// Updated is an updated event whose before/after hold the changed fields.
func Updated(c Change) outbox.Event { return Event("updated", c) }

// Deleted is a deleted event.
func Deleted(c Change) outbox.Event { return Event("deleted", c) }
