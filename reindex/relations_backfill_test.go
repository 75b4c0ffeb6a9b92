package reindex

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/searchsync/searchsync/backfill"
	"github.com/searchsync/searchsync/examples/contacts"
	"github.com/searchsync/searchsync/examples/customer"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/mapping"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/sink/search"
)

// After a backfill of relations, persons and customers (in that order:
// every relation comes before its entities) into new indexes, with the
// outbox's history gone, every live document equals the one the whole
// history built: the entity's fields, its relations' items and the copies
// of the other entities' names.
func TestBackfillOfEntitiesAndRelations(t *testing.T) {
	t.Parallel()
	b := setup(t)
	defs, err := mapping.Load("")
	if err != nil {
		t.Fatal(err)
	}
	world := func(cust, pers string) *search.Consumer {
		mk := func(name, base string) *mapping.Def {
			d := *defs[base]
			d.Alias = name
			return &d
		}
		c, err := search.New(search.Config{Engine: b.eng, Projections: relSet(t, cust, pers),
			Defs: mapping.Defs{cust: mk(cust, "customers"), pers: mk(pers, "persons")}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.EnsureIndexes(b.ctx); err != nil {
			t.Fatal(err)
		}
		return c
	}
	refCust, refPers := testenv.Name("bfc"), testenv.Name("bfp")
	newCust, newPers := refCust+"_new", refPers+"_new"
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, a := range []string{refCust, refPers, newCust, newPers} {
			_ = b.eng.DeleteIndex(c, mapping.PhysicalName(a, 1))
		}
	})
	ref, fresh := world(refCust, refPers), world(newCust, newPers)

	// The history, delivered to the reference.
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	wl := &relWorkload{rng: rand.New(rand.NewPCG(seed, 11))}
	for range 120 {
		wl.customers = append(wl.customers, &relEntity{id: uuid.New()})
		wl.persons = append(wl.persons, &relEntity{id: uuid.New()})
	}
	b.produceRel(wl, 1500)
	b.deliverEvery(ref)

	// The platform's tables as they are now, and an outbox without history.
	if _, err := b.db.Pool.Exec(b.ctx, `CREATE TABLE snap (kind text, id uuid PRIMARY KEY, payload jsonb);
		DELETE FROM aa_outbox_event`); err != nil {
		t.Fatal(err)
	}
	insert := func(kind string, id uuid.UUID, e outbox.Event) {
		if _, err := b.db.Pool.Exec(b.ctx, `INSERT INTO snap VALUES ($1, $2, $3)`, kind, id, e.Payload); err != nil {
			t.Fatal(err)
		}
	}
	rows := 0
	for _, c := range wl.customers {
		if c.alive {
			insert("customer", c.id, customer.Event("snapshot", customer.Change{ID: c.id, Version: c.version, After: c.state}))
			rows++
		}
	}
	for _, p := range wl.persons {
		if p.alive {
			insert("person", p.id, contacts.PersonEvent("snapshot", contacts.Person{ID: p.id, Version: p.version, After: p.state}))
			rows++
		}
	}
	for _, l := range wl.relations {
		if l.alive {
			insert("contact", l.id, contacts.ContactEvent("snapshot", contacts.Contact{ID: l.id, Customer: l.cust, Person: l.pers, Version: l.version, After: l.state}))
			rows++
		}
	}
	for _, src := range []backfill.Source{
		{Name: "contacts", AggregateType: contacts.RelationAggregate, Query: `SELECT id AS aggregate_id, 'relation.customer_contact.snapshot' AS event_type, payload FROM snap WHERE kind = 'contact'`},
		{Name: "persons", Query: `SELECT id AS aggregate_id, 'entity.person.snapshot' AS event_type, payload FROM snap WHERE kind = 'person'`},
		{Name: "customers", Query: `SELECT id AS aggregate_id, 'entity.customer.snapshot' AS event_type, 2 AS schema_version, payload FROM snap WHERE kind = 'customer'`},
	} {
		src.ChunkSize, src.MaxBacklog = 100, 1_000_000
		if _, err := backfill.Run(b.ctx, backfill.Config{Pool: b.db.Pool, Schema: b.db.Schema, Source: src, Logger: testLogger(t)}); err != nil {
			t.Fatalf("backfill %s: %v", src.Name, err)
		}
	}
	if n := b.deliverEvery(fresh); n != rows {
		t.Fatalf("%d snapshot events for %d rows", n, rows)
	}

	for _, pair := range [][2]string{{newCust, refCust}, {newPers, refPers}} {
		sameDocs(t, pair[0], liveOnly(b.linkedDocs(pair[0])), liveOnly(b.linkedDocs(pair[1])))
	}
}

// liveOnly keeps the documents of existing entities, without the fields
// that name the event that wrote them last.
func liveOnly(docs map[string]map[string]any) map[string]map[string]any {
	out := map[string]map[string]any{}
	for id, d := range docs {
		if d["_live"] == true {
			delete(d, "last_event")
			out[id] = d
		}
	}
	return out
}

// deliverEvery hands every event of the outbox, in id order and batches of
// 100, to c, and checks that each was delivered; it returns their number.
func (b *bundle) deliverEvery(c *search.Consumer) int {
	b.t.Helper()
	rows, err := b.db.Pool.Query(b.ctx, `SELECT id, tenant_id, event_type, schema_version, aggregate_type, aggregate_id,
		correlation_id, payload, created_at FROM aa_outbox_event ORDER BY id`)
	if err != nil {
		b.t.Fatal(err)
	}
	evs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*outbox.Event, error) {
		var e outbox.Event
		err := r.Scan(&e.ID, &e.TenantID, &e.EventType, &e.SchemaVersion, &e.AggregateType, &e.AggregateID, &e.CorrelationID, &e.Payload, &e.CreatedAt)
		return &e, err
	})
	if err != nil {
		b.t.Fatal(err)
	}
	for i := 0; i < len(evs); i += 100 {
		batch := evs[i:min(i+100, len(evs))]
		for j, o := range c.Deliver(b.ctx, batch) {
			if !o.Kind.Delivered() {
				b.t.Fatalf("event %d (%s): %s %s", batch[j].ID, batch[j].EventType, o.Kind, o.Reason)
			}
		}
	}
	return len(evs)
}
