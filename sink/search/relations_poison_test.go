package search_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/delivery"
	"github.com/searchsync/searchsync/examples/contacts"
	"github.com/searchsync/searchsync/examples/customer"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/mapping"
	"github.com/searchsync/searchsync/projections"
	"github.com/searchsync/searchsync/sink/search"
)

// A document that relations reach, written from several events of a
// batch, which the engine rejects: the event that made it unacceptable
// fails with the engine's reason, the ones before it are delivered (the
// relation's items are there), the later ones are not attempted.
func TestRelationDocumentRejectedBlamesItsEvent(t *testing.T) {
	for _, round := range []int{0, 1} { // one round for the batch; one event per round
		t.Run(fmt.Sprintf("round=%d", round), func(t *testing.T) { rejectedBlames(t, round) })
	}
}

func rejectedBlames(t *testing.T, round int) {
	w := setupRelations(t)
	cons := w.newConsumer(func(c *search.Config) { c.LinkedRound = round })
	cust, pers, rel := uuid.New(), uuid.New(), uuid.New()
	if out := cons.Deliver(w.ctx, w.produce(customer.Created(ch(cust, 1, map[string]any{"display_name": "ACME"})),
		contacts.PersonEvent("created", contacts.Person{ID: pers, Version: 1, After: map[string]any{"display_name": "Ada"}}))); out[0].Kind != delivery.OK || out[1].Kind != delivery.OK {
		t.Fatalf("entities: %v", out)
	}
	evs := w.produce(
		contacts.ContactEvent("created", contacts.Contact{ID: rel, Customer: cust, Person: pers, Version: 1, After: map[string]any{"role": "billing"}}),
		customer.Updated(ch(cust, 2, map[string]any{"credit_limit": "not a number"})),
		customer.Updated(ch(cust, 3, map[string]any{"status": "active"})),
	)
	out := cons.Deliver(w.ctx, evs)
	if out[0].Kind != delivery.OK || out[1].Kind != delivery.Poison || out[2].Kind != delivery.NotAttempted {
		t.Fatalf("round %d: outcomes: %v", round, out)
	}
	t.Logf("round %d: the rejected event: %s", round, out[1].Reason)
	c, _ := w.get(w.alias, cust)
	if its := items(c, "contacts"); len(its) != 1 || its[0]["name"] != "Ada" || c["credit_limit"] != nil || c["status"] != nil {
		t.Fatalf("round %d: customer after the rejected event: %v", round, c)
	}
}

// An index created before a relation reached it lacks the unindexed
// mapping of the per-source versions: the consumer refuses to start (each
// relation's id would become a mapped field) and names the reindex.
func TestRelationsRefuseAnIndexCreatedWithoutThem(t *testing.T) {
	b := setup(t) // customers created by the customer projection alone
	defs, err := mapping.Load("")
	if err != nil {
		t.Fatal(err)
	}
	pdef := *defs["persons"]
	pdef.Alias = testenv.Name("pers")
	t.Cleanup(func() { _ = b.eng.DeleteIndex(context.Background(), mapping.PhysicalName(pdef.Alias, 1)) })
	f, err := projections.ParseFile("projections.yaml", contacts.ProjectionFile())
	if err != nil {
		t.Fatal(err)
	}
	for i := range f.Projections {
		f.Projections[i].Index = pdef.Alias
	}
	for i := range f.Relations {
		f.Relations[i].Source.Index, f.Relations[i].Target.Index = b.alias, pdef.Alias
	}
	if err := b.set.Add(f.Projections...); err != nil {
		t.Fatal(err)
	}
	if err := b.set.AddRelations(f.Relations...); err != nil {
		t.Fatal(err)
	}
	c, err := search.New(search.Config{Engine: b.eng, Projections: b.set, Defs: mapping.Defs{b.alias: b.def, pdef.Alias: &pdef}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.EnsureIndexes(b.ctx)
	if err == nil || !strings.Contains(err.Error(), "searchsync reindex "+b.alias) {
		t.Fatalf("EnsureIndexes: %v", err)
	}
	t.Log(err)
}
