package reindex

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/searchsync/searchsync/examples/contacts"
	"github.com/searchsync/searchsync/examples/customer"
	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/mapping"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/projections"
	"github.com/searchsync/searchsync/relay"
	"github.com/searchsync/searchsync/sink/search"
)

// relSet is the customer and contacts examples' projections and relation
// writing customers to cust and persons to pers.
func relSet(t testing.TB, cust, pers string) *projections.Set {
	t.Helper()
	set := projections.NewSet()
	cf, err := projections.ParseFile("customer.yaml", customer.ProjectionFile())
	if err != nil {
		t.Fatal(err)
	}
	for i := range cf.Projections {
		cf.Projections[i].Index = cust
	}
	pf, err := projections.ParseFile("contacts.yaml", contacts.ProjectionFile())
	if err != nil {
		t.Fatal(err)
	}
	for i := range pf.Projections {
		pf.Projections[i].Index = pers
	}
	for i := range pf.Relations {
		pf.Relations[i].Source.Index, pf.Relations[i].Target.Index = cust, pers
	}
	if err := set.Add(append(cf.Projections, pf.Projections...)...); err != nil {
		t.Fatal(err)
	}
	if err := set.AddUpcasters(cf.Upcasters...); err != nil {
		t.Fatal(err)
	}
	if err := set.AddRelations(pf.Relations...); err != nil {
		t.Fatal(err)
	}
	return set
}

// relWorkload makes random histories of customers, persons and their
// contact relations: creates, partial updates, renames, deletes (with the
// entity's relations deleted in the same transaction), re-creates.
type relWorkload struct {
	rng                *rand.Rand
	customers, persons []*relEntity
	relations          []*relLink
}

type relEntity struct {
	id      uuid.UUID
	version int64
	alive   bool
	state   map[string]any // the fields of `after`, merged
}

type relLink struct {
	id, cust, pers uuid.UUID
	version        int64
	alive          bool
	state          map[string]any
}

// merge applies a change's after onto a state (created: replaces it).
func merge(state map[string]any, verb string, after map[string]any) map[string]any {
	if verb == "created" || state == nil {
		state = map[string]any{}
	}
	for k, v := range after {
		state[k] = v
	}
	return state
}

func (w *relWorkload) tx() []outbox.Event {
	var evs []outbox.Event
	pick := func(es []*relEntity) *relEntity { return es[w.rng.IntN(len(es))] }
	switch n := w.rng.IntN(100); {
	case n < 20: // a customer
		c := pick(w.customers)
		c.version++
		if !c.alive || w.rng.IntN(10) > 0 {
			verb := "updated"
			after := map[string]any{"status": []string{"active", "draft", "suspended"}[w.rng.IntN(3)]}
			if !c.alive {
				verb, after = "created", map[string]any{"display_name": fmt.Sprintf("Customer %d", w.rng.IntN(1000)), "status": "active"}
			} else if w.rng.IntN(3) == 0 {
				after = map[string]any{"display_name": fmt.Sprintf("Customer %d", w.rng.IntN(1000))}
			}
			c.alive = true
			c.state = merge(c.state, verb, after)
			return []outbox.Event{customer.Event(verb, customer.Change{ID: c.id, Version: c.version, After: after})}
		}
		c.alive = false
		evs = append(evs, w.cascade(func(l *relLink) bool { return l.cust == c.id })...)
		return append(evs, customer.Deleted(customer.Change{ID: c.id, Version: c.version}))
	case n < 45: // a person
		p := pick(w.persons)
		p.version++
		if !p.alive || w.rng.IntN(10) > 0 {
			verb := "updated"
			after := map[string]any{"display_name": fmt.Sprintf("%s %d", []string{"Ada", "Grace", "Alan"}[w.rng.IntN(3)], w.rng.IntN(1000))}
			if !p.alive {
				verb, after["email"] = "created", fmt.Sprintf("p%d@example.com", w.rng.IntN(1000))
			} else if w.rng.IntN(2) == 0 {
				after = map[string]any{"phone": fmt.Sprintf("+49 %d", w.rng.IntN(100000))}
			}
			p.alive = true
			p.state = merge(p.state, verb, after)
			return []outbox.Event{contacts.PersonEvent(verb, contacts.Person{ID: p.id, Version: p.version, After: after})}
		}
		p.alive = false
		evs = append(evs, w.cascade(func(l *relLink) bool { return l.pers == p.id })...)
		return append(evs, contacts.PersonEvent("deleted", contacts.Person{ID: p.id, Version: p.version}))
	case n < 70 || len(w.relations) == 0: // a new relation between living entities
		c, p := pick(w.customers), pick(w.persons)
		if !c.alive || !p.alive {
			return nil
		}
		l := &relLink{id: uuid.New(), cust: c.id, pers: p.id, version: 1, alive: true, state: map[string]any{"role": "sales", "primary": false}}
		w.relations = append(w.relations, l)
		return []outbox.Event{contacts.ContactEvent("created", contacts.Contact{ID: l.id, Customer: l.cust, Person: l.pers, Version: 1,
			After: map[string]any{"role": "sales", "primary": false}})}
	default: // a relation changed or removed
		l := w.relations[w.rng.IntN(len(w.relations))]
		if !l.alive {
			return nil
		}
		l.version++
		if w.rng.IntN(3) == 0 {
			l.alive = false
			return []outbox.Event{contacts.ContactEvent("deleted", contacts.Contact{ID: l.id, Customer: l.cust, Person: l.pers, Version: l.version})}
		}
		after := map[string]any{"role": []string{"billing", "sales", "support"}[w.rng.IntN(3)]}
		l.state = merge(l.state, "updated", after)
		return []outbox.Event{contacts.ContactEvent("updated", contacts.Contact{ID: l.id, Customer: l.cust, Person: l.pers, Version: l.version, After: after})}
	}
}

func (w *relWorkload) cascade(of func(*relLink) bool) []outbox.Event {
	var evs []outbox.Event
	for _, l := range w.relations {
		if l.alive && of(l) {
			l.alive = false
			l.version++
			evs = append(evs, contacts.ContactEvent("deleted", contacts.Contact{ID: l.id, Customer: l.cust, Person: l.pers, Version: l.version}))
		}
	}
	return evs
}

// produceRel writes n transactions of the workload.
func (b *bundle) produceRel(w *relWorkload, n int) {
	b.t.Helper()
	for i := 0; i < n; i++ {
		evs := w.tx()
		if len(evs) == 0 {
			continue
		}
		err := pgx.BeginFunc(b.ctx, b.db.Pool, func(tx pgx.Tx) error { _, err := b.writer.Write(b.ctx, tx, evs...); return err })
		if err != nil {
			b.t.Fatal(err)
		}
	}
}

// A reindex of an index that relations reach, after compaction removed
// most of the outbox, while a relay writes the live documents (with dual
// writes to the reindex's target) and relation events keep coming: after
// the swap every document of the new index equals the reference, a second
// consumer's index that no reindex touched.
func TestReindexOfAnIndexRelationsReach(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pers := testenv.Name("rxp")
	ref, refPers := b.alias+"_ref", pers+"_ref"
	defs, err := mapping.Load("")
	if err != nil {
		t.Fatal(err)
	}
	mk := func(name, base string) *mapping.Def {
		d := *defs[base]
		d.Alias = name
		return &d
	}
	b.set = relSet(t, b.alias, pers)
	refSet := relSet(t, ref, refPers)
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, a := range []string{b.alias, pers, ref, refPers} {
			for n := 1; n <= 3; n++ {
				_ = b.eng.DeleteIndex(c, mapping.PhysicalName(a, n))
			}
		}
	})
	live := mapping.Defs{b.alias: mk(b.alias, "customers"), pers: mk(pers, "persons")}
	cons, err := search.New(search.Config{Name: "search", Engine: b.eng, Projections: b.set, Defs: live, DualWrites: NewTargets(b.db.Pool)})
	if err != nil {
		t.Fatal(err)
	}
	rc, err := search.New(search.Config{Name: "reference", Engine: b.eng, Projections: refSet,
		Defs: mapping.Defs{ref: mk(ref, "customers"), refPers: mk(refPers, "persons")}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*search.Consumer{cons, rc} {
		if _, err := c.EnsureIndexes(b.ctx); err != nil {
			t.Fatal(err)
		}
	}
	all := func(string, string) bool { return true }
	r, err := relay.New(b.db.Pool, relay.Config{Schema: b.db.Schema, Partitions: 4, LeaseTTL: 3 * time.Second,
		PollInterval: 50 * time.Millisecond, BatchSize: 200, Logger: slog.New(slog.DiscardHandler),
		Routes: []relay.Route{{Consumer: cons, Match: all}, {Consumer: rc, Match: all}}})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(b.ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = r.Run(rctx) })
	defer func() { cancel(); wg.Wait() }()

	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	wl := &relWorkload{rng: rand.New(rand.NewPCG(seed, 7))}
	for range 150 {
		wl.customers = append(wl.customers, &relEntity{id: uuid.New()})
		wl.persons = append(wl.persons, &relEntity{id: uuid.New()})
	}
	b.produceRel(wl, 1500)
	testenv.Eventually(t, 2*time.Minute, func() bool { return b.undelivered() == 0 }, "the first events delivered")
	// Most of that history is compacted away: the seed brings it.
	t.Logf("compaction removed %d delivered events", b.compact(0.6))

	// The reindex runs while more events come.
	loadCtx, stopLoad := context.WithCancel(b.ctx)
	loaded := make(chan struct{})
	go func() {
		defer close(loaded)
		for loadCtx.Err() == nil {
			b.produceRel(wl, 5)
			time.Sleep(50 * time.Millisecond)
		}
	}()
	cfg := b.config(live[b.alias])
	cfg.ChunkSize, cfg.Force = 200, true
	cfg.Consumers = []string{"search"}
	rx, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := rx.Run(b.ctx)
	stopLoad()
	<-loaded
	if err != nil {
		t.Fatal(err)
	}
	if !res.Verify.OK || res.NewIndex == res.OldIndex {
		t.Fatalf("reindex: %+v\n%s", res, res.Verify)
	}
	testenv.Eventually(t, 2*time.Minute, func() bool { return b.undelivered() == 0 }, "every event delivered")

	// Every document of the new index equals the reference's (the
	// versions kept in _ss aside: outbox ids of events seen).
	for _, pair := range [][2]string{{b.alias, ref}, {pers, refPers}} {
		sameDocs(t, pair[0], b.linkedDocs(pair[0]), b.linkedDocs(pair[1]))
	}
}

// sameDocs fails the test unless got holds exactly the documents of want.
func sameDocs(t *testing.T, index string, got, want map[string]map[string]any) {
	t.Helper()
	if len(got) != len(want) || len(want) == 0 {
		t.Fatalf("%s holds %d documents, the reference %d", index, len(got), len(want))
	}
	bad := 0
	for id, w := range want {
		if g := got[id]; !reflect.DeepEqual(g, w) {
			if bad++; bad <= 3 {
				gb, _ := json.Marshal(g)
				wb, _ := json.Marshal(w)
				t.Errorf("%s/%s:\n got %s\nwant %s", index, id, gb, wb)
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d documents of %s differ from the reference", bad, len(want), index)
	}
	t.Logf("%s: %d documents equal the reference", index, len(want))
}

// linkedDocs reads every document of alias's index (hidden ones too),
// without the per-source versions and without the fields the reference
// writes from its own clock.
func (b *bundle) linkedDocs(alias string) map[string]map[string]any {
	b.t.Helper()
	targets, err := b.eng.AliasTargets(b.ctx, alias)
	if err != nil || len(targets) != 1 {
		b.t.Fatalf("alias %s: %v %v", alias, targets, err)
	}
	if err := b.eng.Refresh(b.ctx, targets[0]); err != nil {
		b.t.Fatal(err)
	}
	out := map[string]map[string]any{}
	err = b.eng.(indexer.Admin).Scroll(b.ctx, targets[0], nil, 1000, []string{"*"}, func(_ int64, hits []indexer.ScrollHit) error {
		for _, h := range hits {
			var m map[string]any
			if err := json.Unmarshal(h.Source, &m); err != nil {
				return err
			}
			delete(m, projections.MetaKey)
			for k := range m {
				if strings.HasPrefix(k, "updated_") {
					delete(m, k)
				}
			}
			out[h.ID] = m
		}
		return nil
	})
	if err != nil {
		b.t.Fatal(err)
	}
	return out
}
