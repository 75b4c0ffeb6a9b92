package search_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/examples/contacts"
	"github.com/searchsync/searchsync/examples/customer"
	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/sink/search"
)

// raceEngine lets a test step in between the consumer's reads and writes:
// before the first bulk that writes document id of alias, beforeBulk runs
// (another writer changes that document); after it, the next _mget of
// failAlias fails (the engine refuses the read, as a circuit breaker does).
type raceEngine struct {
	indexer.Engine
	mu         sync.Mutex
	alias, id  string
	beforeBulk func()
	failAlias  string
	failNext   bool
	// refuse: every write of alias/id fails (503), the others of the same
	// request are written.
	refuse bool
}

func (e *raceEngine) Bulk(ctx context.Context, ops []indexer.BulkOp) ([]indexer.BulkResult, error) {
	e.mu.Lock()
	if e.refuse {
		// The writes of alias/id are answered 503; the others are sent.
		var send []indexer.BulkOp
		var at []int
		out := make([]indexer.BulkResult, len(ops))
		for i, op := range ops {
			if op.Index == e.alias && op.ID == e.id {
				out[i] = indexer.BulkResult{Status: 503, ErrType: "unavailable_shards_exception", ErrReason: "injected"}
				continue
			}
			send, at = append(send, op), append(at, i)
		}
		e.mu.Unlock()
		if len(send) == 0 {
			return out, nil
		}
		res, err := e.Engine.Bulk(ctx, send)
		if err != nil {
			return nil, err
		}
		for j, r := range res {
			out[at[j]] = r
		}
		return out, nil
	}
	hook := e.beforeBulk
	for _, op := range ops {
		if hook != nil && op.Index == e.alias && op.ID == e.id {
			e.beforeBulk, e.failNext = nil, true
			e.mu.Unlock()
			hook()
			return e.Engine.Bulk(ctx, ops)
		}
	}
	e.mu.Unlock()
	return e.Engine.Bulk(ctx, ops)
}

func (e *raceEngine) MGet(ctx context.Context, index string, ids []string) (map[string]indexer.Doc, error) {
	e.mu.Lock()
	fail := e.failNext && index == e.failAlias
	if fail {
		e.failNext = false
	}
	e.mu.Unlock()
	if fail {
		return nil, errors.New("injected: 429 circuit_breaking_exception: [parent] Data too large")
	}
	return e.Engine.MGet(ctx, index, ids)
}

// A relation event whose guarded write of the customer met the customer's
// rename (a conflict: read, fold, write again, then the rename's fan-out
// to the person's item), and whose fan-out then failed (the engine refused
// the read), is delivered again: the person's item must get the new name.
// The redelivery finds both the item and the backref already written
// (stale), and nothing else brings the rename to the item.
func TestRelationRedeliveredAfterItsFanOutFailedBringsTheRename(t *testing.T) {
	w := setupRelations(t)
	cust, pers, rel := uuid.New(), uuid.New(), uuid.New()
	w.deliver(w.produce(
		customer.Created(ch(cust, 1, map[string]any{"display_name": "Old Name", "status": "active"})),
		contacts.PersonEvent("created", contacts.Person{ID: pers, Version: 1, After: map[string]any{"display_name": "Ada Lovelace", "email": "ada@example.com"}}),
	))
	rename := w.produce(customer.Updated(ch(cust, 2, map[string]any{"display_name": "New Name"})))
	relation := w.produce(contacts.ContactEvent("created", contacts.Contact{ID: rel, Customer: cust, Person: pers, Version: 1, After: map[string]any{"role": "billing"}}))

	// The rename is written by another relay between the relation's read
	// and its write of the customer; the relation's fan-out read of the
	// person then fails.
	other := w.newConsumer(nil)
	eng := &raceEngine{Engine: w.eng, alias: w.alias, id: cust.String(), failAlias: w.persons, beforeBulk: func() {
		for _, o := range other.Deliver(w.ctx, rename) {
			if !o.Kind.Delivered() {
				t.Errorf("the rename: %s %s", o.Kind, o.Reason)
			}
		}
	}}
	racing := w.newConsumer(func(c *search.Config) { c.Engine = eng })
	out := racing.Deliver(w.ctx, relation)
	if out[0].Kind.Delivered() {
		t.Fatalf("the relation was delivered although its fan-out failed: %s %s", out[0].Kind, out[0].Reason)
	}
	t.Logf("first delivery of the relation: %s %s", out[0].Kind, out[0].Reason)

	// Delivered again (the relay's retry), with nothing in the way.
	if o := w.cons.Deliver(w.ctx, relation)[0]; !o.Kind.Delivered() {
		t.Fatalf("the relation delivered again: %s %s", o.Kind, o.Reason)
	}
	c, _ := w.get(w.alias, cust)
	if c["display_name"] != "New Name" {
		t.Fatalf("customer: %v", c)
	}
	p, d := w.get(w.persons, pers)
	its := items(p, "contact_of")
	if len(its) != 1 || its[0]["name"] != "New Name" {
		t.Fatalf("the person's item keeps the customer's old name: %v\n%s", its, d.Source)
	}
}

// A relation event whose write of the person's item succeeded while the
// write of the customer's backref failed is retried; the customer is
// renamed in between (no backref yet: no fan-out). The retry finds the
// item written (stale) and writes the backref: the person's item must get
// the new name.
func TestRelationRetriedAfterAPartialWriteBringsTheRename(t *testing.T) {
	w := setupRelations(t)
	cust, pers, rel := uuid.New(), uuid.New(), uuid.New()
	w.deliver(w.produce(
		customer.Created(ch(cust, 1, map[string]any{"display_name": "Old Name", "status": "active"})),
		contacts.PersonEvent("created", contacts.Person{ID: pers, Version: 1, After: map[string]any{"display_name": "Ada Lovelace", "email": "ada@example.com"}}),
	))
	relation := w.produce(contacts.ContactEvent("created", contacts.Contact{ID: rel, Customer: cust, Person: pers, Version: 1, After: map[string]any{"role": "billing"}}))
	eng := &raceEngine{Engine: w.eng, alias: w.alias, id: cust.String(), refuse: true}
	partial := w.newConsumer(func(c *search.Config) {
		c.Engine = eng
		c.Writer = indexer.NewWriter(eng, indexer.WriterConfig{RetryInitial: time.Millisecond, RetryElapsed: 10 * time.Millisecond})
	})
	if o := partial.Deliver(w.ctx, relation)[0]; o.Kind.Delivered() {
		t.Fatalf("the relation was delivered although the customer's write failed: %s %s", o.Kind, o.Reason)
	}
	p, _ := w.get(w.persons, pers)
	if its := items(p, "contact_of"); len(its) != 1 || its[0]["name"] != "Old Name" {
		t.Fatalf("the person's item after the partial write: %v", p)
	}
	w.deliver(w.produce(customer.Updated(ch(cust, 2, map[string]any{"display_name": "New Name"}))))
	if o := w.cons.Deliver(w.ctx, relation)[0]; !o.Kind.Delivered() {
		t.Fatalf("the relation delivered again: %s %s", o.Kind, o.Reason)
	}
	p, d := w.get(w.persons, pers)
	if its := items(p, "contact_of"); len(its) != 1 || its[0]["name"] != "New Name" {
		t.Fatalf("the person's item keeps the customer's old name: %v\n%s", its, d.Source)
	}
}
