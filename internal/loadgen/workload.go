package loadgen

import (
	"iter"
	"math/rand/v2"
	"slices"

	"github.com/searchsync/searchsync/outbox"
)

// Workload is a fixed mix of customer events for the benchmarks: the
// customers are created first, spread over the tenants, then the rest are
// partial updates (a hot set of customers gets most of them) and deletes,
// each delete followed by the create of a new customer so that the number
// of live customers stays the same.
type Workload struct {
	Events    int      // in all, the first creates included
	Customers int      // created first
	Tenants   []string // tenant_key of each customer, round robin; default "public"
	Hot       int      // customers in the hot set (the first created)
	HotShare  float64  // share of the updates that go to the hot set
	Deletes   float64  // share of the events after the first creates that delete
	// Burst > 1 makes each update a run of Burst updates of one customer
	// in a row (a bursty workload: coalescing folds them).
	Burst int
	Seed  uint64
	// Persons and Contacts (the contacts example) are created after the
	// customers, spread over the tenants like them: each contact relates a
	// live person and a live customer of one tenant. ContactShare is the
	// share of the later events that are a step of the contacts mix
	// (persons created, updated — renames among them — and deleted,
	// relations created, updated and deleted; Generator.Next). All 0: a
	// stream of customers only.
	Persons      int
	Contacts     int
	ContactShare float64
}

// Realistic is the benchmarks' realistic workload: 40,000 events over
// 2,000 customers in three tenants, 80 % of the updates on 200 hot
// customers, 3 % deletes.
func Realistic() Workload {
	return Workload{Events: 40000, Customers: 2000, Tenants: []string{"acme", "globex", "initech"},
		Hot: 200, HotShare: 0.8, Deletes: 0.03, Seed: 1}
}

// RelationHeavy is the relations benchmark's workload: the realistic
// workload's customers and tenants with 2,000 persons and 4,000 contact
// relations created after them; of the 60,000 events, half of those after
// the creates are person and relation events.
func RelationHeavy() Workload {
	w := Realistic()
	w.Events, w.Persons, w.Contacts, w.ContactShare = 60000, 2000, 4000, 0.5
	return w
}

// Make returns the events of w, in the order they are to be written.
func (w Workload) Make() []outbox.Event {
	out := make([]outbox.Event, 0, w.Events)
	for e := range w.All() {
		out = append(out, e)
	}
	return out
}

// All yields the events of w in the order they are to be written, one at a
// time: a stream of millions costs the memory of its live customers only.
func (w Workload) All() iter.Seq[outbox.Event] {
	return func(yield func(outbox.Event) bool) {
		tenants := w.Tenants
		if len(tenants) == 0 {
			tenants = []string{"public"}
		}
		gens := make([]*Generator, len(tenants))
		for i, t := range tenants {
			gens[i] = New(w.Seed + uint64(i))
			gens[i].Tenant = t
		}
		rng := rand.New(rand.NewPCG(w.Seed, w.Seed^0x5851f42d4c957f2d))
		type ref struct {
			g *Generator
			c *Customer
		}
		var live []ref // creation order: the hot set is the first w.Hot
		create := func() outbox.Event {
			g := gens[len(live)%len(gens)]
			e := g.create()
			live = append(live, ref{g, g.live[len(g.live)-1]})
			return e
		}
		n := 0
		emit := func(e outbox.Event) bool { n++; return yield(e) }
		for n < min(w.Customers, w.Events) {
			if !emit(create()) {
				return
			}
		}
		emitAll := func(evs []outbox.Event) bool {
			for _, e := range evs {
				if n == w.Events || !emit(e) {
					return false
				}
			}
			return true
		}
		for i := 0; i < w.Persons && n < w.Events; i++ {
			if !emit(gens[i%len(gens)].createPerson()) {
				return
			}
		}
		for i := 0; i < w.Contacts && n < w.Events; i++ {
			g := gens[i%len(gens)]
			if len(g.live) == 0 || len(g.persons) == 0 {
				continue
			}
			if !emit(g.createContact(g.live[rng.IntN(len(g.live))], g.persons[rng.IntN(len(g.persons))])) {
				return
			}
		}
		for n < w.Events {
			if w.ContactShare > 0 && rng.Float64() < w.ContactShare {
				if !emitAll(gens[rng.IntN(len(gens))].nextContacts()) {
					return
				}
				continue
			}
			if rng.Float64() < w.Deletes && len(live) > 0 {
				i := rng.IntN(len(live))
				r := live[i]
				live = slices.Delete(live, i, i+1)
				if !emitAll(append(r.g.deleteContactsOf(r.c.ID), r.g.deleteCustomer(r.c))) {
					return
				}
				if n < w.Events && !emit(create()) {
					return
				}
				continue
			}
			if len(live) == 0 {
				if !emit(create()) {
					return
				}
				continue
			}
			pool := len(live)
			if hot := min(w.Hot, len(live)); hot > 0 && rng.Float64() < w.HotShare {
				pool = hot
			}
			r := live[rng.IntN(pool)]
			for range max(w.Burst, 1) {
				if n == w.Events {
					break
				}
				if !emit(r.g.update(r.c)) {
					return
				}
			}
		}
	}
}

// deleteCustomer deletes c (which must be live in g).
func (g *Generator) deleteCustomer(c *Customer) outbox.Event {
	if i := slices.Index(g.live, c); i >= 0 {
		g.live = slices.Delete(g.live, i, i+1)
	}
	c.Version++
	c.Deleted = true
	return g.event(c, "deleted", g.payload(c, clone(c.State), map[string]any{}))
}
