package search_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/delivery"
	"github.com/searchsync/searchsync/examples/contacts"
	"github.com/searchsync/searchsync/examples/customer"
	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/mapping"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/projections"
	"github.com/searchsync/searchsync/sink/search"
)

// relWorld is a test's customers and persons indexes (own names) with the
// customer and contacts examples' projections and relation.
type relWorld struct {
	*bundle
	persons string
	defs    mapping.Defs
}

func setupRelations(t testing.TB, opts ...option) *relWorld {
	t.Helper()
	return setupRelationsOn(t, indexer.Config{URLs: []string{testenv.EngineURL(t)}}, opts...)
}

// setupRelationsOn is setupRelations on the engine engCfg names.
func setupRelationsOn(t testing.TB, engCfg indexer.Config, opts ...option) *relWorld {
	t.Helper()
	b := setupOn(t, engCfg, opts...)
	defs, err := mapping.Load("")
	if err != nil {
		t.Fatal(err)
	}
	pdef := *defs["persons"]
	pdef.Alias = testenv.Name("pers")
	for _, o := range opts {
		o(&pdef)
	}
	f, err := projections.ParseFile("projections.yaml", contacts.ProjectionFile())
	if err != nil {
		t.Fatal(err)
	}
	for i := range f.Projections {
		f.Projections[i].Index = pdef.Alias
	}
	for i := range f.Relations {
		f.Relations[i].Source.Index = b.alias
		f.Relations[i].Target.Index = pdef.Alias
	}
	if err := b.set.Add(f.Projections...); err != nil {
		t.Fatal(err)
	}
	if err := b.set.AddRelations(f.Relations...); err != nil {
		t.Fatal(err)
	}
	w := &relWorld{bundle: b, persons: pdef.Alias, defs: mapping.Defs{b.alias: b.def, pdef.Alias: &pdef}}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, a := range []string{b.alias, pdef.Alias} {
			targets, _ := b.eng.AliasTargets(ctx, a)
			for _, ix := range targets {
				_ = b.eng.DeleteIndex(ctx, ix)
			}
		}
	})
	// The customers index was made before the relation: make both anew.
	targets, _ := b.eng.AliasTargets(b.ctx, b.alias)
	for _, ix := range targets {
		_ = b.eng.DeleteIndex(b.ctx, ix)
	}
	w.cons = w.newConsumer(nil)
	if _, err := w.cons.EnsureIndexes(b.ctx); err != nil {
		t.Fatal(err)
	}
	return w
}

func (w *relWorld) newConsumer(mod func(c *search.Config)) *search.Consumer {
	w.t.Helper()
	cfg := search.Config{Engine: w.eng, Projections: w.set, Defs: w.defs}
	if mod != nil {
		mod(&cfg)
	}
	c, err := search.New(cfg)
	if err != nil {
		w.t.Fatal(err)
	}
	return c
}

func (w *relWorld) get(alias string, id uuid.UUID) (map[string]any, indexer.Doc) {
	w.t.Helper()
	docs, err := w.eng.MGet(w.ctx, alias, []string{id.String()})
	if err != nil {
		w.t.Fatal(err)
	}
	d, ok := docs[id.String()]
	if !ok {
		return nil, d
	}
	var m map[string]any
	if err := json.Unmarshal(d.Source, &m); err != nil {
		w.t.Fatal(err)
	}
	return m, d
}

func items(doc map[string]any, field string) []map[string]any {
	arr, _ := doc[field].([]any)
	out := make([]map[string]any, 0, len(arr))
	for _, it := range arr {
		out = append(out, it.(map[string]any))
	}
	return out
}

func TestRelationReachesBothDocumentsAndFollowsRenames(t *testing.T) {
	relationLifecycle(t, setupRelations(t))
}

// The same through the Elasticsearch adapter against the real
// Elasticsearch 7.17 node: _seq_no and _primary_term read, guarded writes
// and creates, the alias filter on _live.
func TestRelationsThroughElasticsearch(t *testing.T) {
	relationLifecycle(t, setupRelationsOn(t, indexer.Config{Kind: "elasticsearch", URLs: []string{testenv.ElasticsearchURL(t)}}))
}

// relationLifecycle: a relation before its entities, the entities, a
// search by the contact's name, a rename that reaches the customer, a
// replay that changes nothing, the relation's delete.
func relationLifecycle(t *testing.T, w *relWorld) {
	cust, pers, rel := uuid.New(), uuid.New(), uuid.New()
	evs := w.produce(
		contacts.ContactEvent("created", contacts.Contact{ID: rel, Customer: cust, Person: pers, Version: 1, After: map[string]any{"role": "billing", "primary": true}}),
		customer.Created(ch(cust, 1, map[string]any{"display_name": "ACME", "status": "active"})),
		contacts.PersonEvent("created", contacts.Person{ID: pers, Version: 1, After: map[string]any{"display_name": "Ada Lovelace", "email": "ada@example.com"}}),
	)
	// The relation first: both documents are held, not live; then the
	// entities come.
	w.deliver(evs[:1], delivery.OK)
	c, _ := w.get(w.alias, cust)
	if c[projections.LiveKey] != false || len(items(c, "contacts")) != 1 {
		t.Fatalf("customer after the relation alone: %v", c)
	}
	w.deliver(evs[1:], delivery.OK, delivery.OK)
	c, _ = w.get(w.alias, cust)
	its := items(c, "contacts")
	if c[projections.LiveKey] != true || c["display_name"] != "ACME" || len(its) != 1 || its[0]["name"] != "Ada Lovelace" || its[0]["role"] != "billing" || its[0]["person_id"] != pers.String() {
		t.Fatalf("customer: %v", c)
	}
	p, _ := w.get(w.persons, pers)
	if its := items(p, "contact_of"); len(its) != 1 || its[0]["name"] != "ACME" || its[0]["customer_id"] != cust.String() {
		t.Fatalf("person: %v", p)
	}
	if n := w.searchable(w.alias, `{"match":{"contacts.name":"lovelace"}}`); n != 1 {
		t.Fatalf("search by contact name: %d hits", n)
	}

	// Rename the person: the customer's copy follows.
	evs = w.produce(contacts.PersonEvent("updated", contacts.Person{ID: pers, Version: 2, After: map[string]any{"display_name": "Ada King"}}))
	w.deliver(evs, delivery.OK)
	c, before := w.get(w.alias, cust)
	if its := items(c, "contacts"); its[0]["name"] != "Ada King" || its[0]["email"] != "ada@example.com" {
		t.Fatalf("customer after the rename: %v", c)
	}

	// Every event again: nothing changes, not even the sequence number.
	evs = w.replayAll()
	out := w.cons.Deliver(w.ctx, evs)
	for i, o := range out {
		if !o.Kind.Delivered() {
			t.Fatalf("replay event %d: %s %s", i, o.Kind, o.Reason)
		}
	}
	_, after := w.get(w.alias, cust)
	if after.SeqNo != before.SeqNo || string(after.Source) != string(before.Source) {
		t.Fatalf("replay changed the customer: seq_no %d → %d\n%s\n%s", before.SeqNo, after.SeqNo, before.Source, after.Source)
	}

	// The relation deleted: it leaves both documents.
	evs = w.produce(contacts.ContactEvent("deleted", contacts.Contact{ID: rel, Customer: cust, Person: pers, Version: 2}))
	w.deliver(evs, delivery.OK)
	c, _ = w.get(w.alias, cust)
	p, _ = w.get(w.persons, pers)
	if len(items(c, "contacts")) != 0 || len(items(p, "contact_of")) != 0 {
		t.Fatalf("after the delete: customer %v, person %v", c, p)
	}
}

// replayAll reads every event of the outbox in id order.
func (w *relWorld) replayAll() []*outbox.Event {
	w.t.Helper()
	rows, err := w.db.Pool.Query(w.ctx, `SELECT id, tenant_id, event_type, schema_version, aggregate_type, aggregate_id,
		correlation_id, payload, created_at FROM aa_outbox_event ORDER BY id`)
	if err != nil {
		w.t.Fatal(err)
	}
	defer rows.Close()
	var out []*outbox.Event
	for rows.Next() {
		var e outbox.Event
		if err := rows.Scan(&e.ID, &e.TenantID, &e.EventType, &e.SchemaVersion, &e.AggregateType, &e.AggregateID,
			&e.CorrelationID, &e.Payload, &e.CreatedAt); err != nil {
			w.t.Fatal(err)
		}
		out = append(out, &e)
	}
	return out
}
