// Package loadgen produces a realistic stream of customer mutations through
// the producer API, for the demo and the benchmarks: creates (the whole state in
// `after`), partial updates (`before`/`after` hold only what changed), deletes,
// and bursts of many updates to one aggregate. Payloads follow the spec's
// example shape (tenant_key, entity_type, entity_id, code, version, before,
// after, actor); `version` counts per aggregate from 1. Workload is a fixed
// mix of them (Realistic: the end-to-end benchmark's workload).
//
// With a contact share (Generator.ContactShare, Workload.ContactShare) the
// stream also holds the contacts example's events: persons created,
// updated (renames among them) and deleted, and relations "person is a
// contact of customer" created, updated (role) and deleted
// (RelationHeavy: the relations benchmark's workload). Without it the
// stream is customers only, event for event as before.
package loadgen

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/searchsync/searchsync/outbox"
)

// Customer is the state the generator keeps of one aggregate.
type Customer struct {
	ID      uuid.UUID
	Code    string
	Version int64
	State   map[string]any
	Deleted bool
}

// Generator makes customer events. It is safe for concurrent use.
type Generator struct {
	Tenant string // tenant_key, default "public"
	// ContactShare is the share of Next's events that are person and
	// relation events (the contacts example); 0, the default: customers
	// only.
	ContactShare float64

	mu       sync.Mutex
	rng      *rand.Rand
	live     []*Customer
	seq      int
	actor    uuid.UUID
	persons  []*Person
	pseq     int
	contacts []*Contact
	pending  []outbox.Event // events of Next's last step still to return
}

// New returns a generator with a fixed seed (the same seed, the same events).
func New(seed uint64) *Generator {
	return &Generator{Tenant: "public", rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), actor: uuid.New()}
}

var (
	cities   = []string{"Berlin", "Hamburg", "München", "Köln", "Zürich", "Wien", "Leipzig", "Bremen"}
	statuses = []string{"draft", "active", "suspended", "active", "active"}
	first    = []string{"Ada", "Grace", "Alan", "Edsger", "Barbara", "Donald", "Frances", "Ken"}
	last     = []string{"Lovelace", "Hopper", "Turing", "Dijkstra", "Liskov", "Knuth", "Allen", "Thompson"}
)

func (g *Generator) payload(c *Customer, before, after map[string]any) json.RawMessage {
	p := map[string]any{
		"tenant_key":  g.Tenant,
		"entity_type": "customer",
		"entity_id":   c.ID.String(),
		"code":        c.Code,
		"version":     c.Version,
		"before":      before,
		"after":       after,
		"actor":       map[string]any{"principal_type": "user", "principal_id": g.actor.String()},
	}
	b, _ := json.Marshal(p)
	return b
}

func (g *Generator) event(c *Customer, verb string, payload json.RawMessage) outbox.Event {
	id := c.ID
	return outbox.Event{EventType: "entity.customer." + verb, AggregateType: "DDM_ENTITY", AggregateID: &id, Payload: payload}
}

// Create makes a new customer and its created event (full state).
func (g *Generator) Create() outbox.Event {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.create()
}

func (g *Generator) create() outbox.Event {
	g.seq++
	c := &Customer{ID: uuid.New(), Code: fmt.Sprintf("C-%06d", g.seq), Version: 1}
	c.State = map[string]any{
		"name":   first[g.rng.IntN(len(first))] + " " + last[g.rng.IntN(len(last))],
		"email":  fmt.Sprintf("c%d@example.org", g.seq),
		"city":   cities[g.rng.IntN(len(cities))],
		"status": "draft",
		"score":  g.rng.IntN(1000),
	}
	g.live = append(g.live, c)
	return g.event(c, "created", g.payload(c, map[string]any{}, clone(c.State)))
}

// Update changes one or two fields of a live customer (partial payload); it
// creates one when none is live.
func (g *Generator) Update() outbox.Event {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.live) == 0 {
		return g.create()
	}
	return g.update(g.live[g.rng.IntN(len(g.live))])
}

func (g *Generator) update(c *Customer) outbox.Event {
	c.Version++
	before, after := map[string]any{}, map[string]any{}
	switch g.rng.IntN(3) {
	case 0:
		before["status"], after["status"] = c.State["status"], statuses[g.rng.IntN(len(statuses))]
	case 1:
		before["city"], after["city"] = c.State["city"], cities[g.rng.IntN(len(cities))]
	default:
		before["score"], after["score"] = c.State["score"], g.rng.IntN(1000)
		before["status"], after["status"] = c.State["status"], "active"
	}
	for k, v := range after {
		c.State[k] = v
	}
	return g.event(c, "updated", g.payload(c, before, after))
}

// Delete deletes a live customer; it creates one when none is live.
func (g *Generator) Delete() outbox.Event {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.live) == 0 {
		return g.create()
	}
	return g.deleteCustomer(g.live[g.rng.IntN(len(g.live))])
}

// Burst returns n updates of one live customer, in order.
func (g *Generator) Burst(n int) []outbox.Event {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.live) == 0 {
		g.create()
	}
	c := g.live[g.rng.IntN(len(g.live))]
	out := make([]outbox.Event, n)
	for i := range out {
		out[i] = g.update(c)
	}
	return out
}

// Next returns the next event of a typical mix: 20% creates, 72% updates,
// 8% deletes. With a ContactShare, that share of the events are a step of
// the contacts mix instead (see nextContacts), and a customer's relations
// are deleted before the customer.
func (g *Generator) Next() outbox.Event {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.pending) > 0 {
		return g.pop()
	}
	if g.ContactShare > 0 && g.rng.Float64() < g.ContactShare {
		g.pending = g.nextContacts()
		return g.pop()
	}
	r := g.rng.IntN(100)
	switch {
	case r < 20 || len(g.live) == 0:
		return g.create()
	case r < 92:
		return g.update(g.live[g.rng.IntN(len(g.live))])
	default:
		c := g.live[g.rng.IntN(len(g.live))]
		g.pending = append(g.deleteContactsOf(c.ID), g.deleteCustomer(c))
		return g.pop()
	}
}

// drain returns the events of Next's last step not returned yet.
func (g *Generator) drain() []outbox.Event {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := g.pending
	g.pending = nil
	return out
}

func (g *Generator) pop() outbox.Event {
	e := g.pending[0]
	g.pending = g.pending[1:]
	return e
}

// Live returns a copy of the live customers' current state.
func (g *Generator) Live() []Customer {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]Customer, len(g.live))
	for i, c := range g.live {
		out[i] = *c
		out[i].State = clone(c.State)
	}
	return out
}

func clone(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Steady writes events at about rate per second (in transactions of up to
// batch events) until ctx ends; every burstEvery a burst of burstSize updates
// to one customer is added. A transaction under way when ctx ends is still
// committed, so the generator's state (Live) matches the outbox. It returns
// the number of events written.
func Steady(ctx context.Context, pool *pgxpool.Pool, w *outbox.Writer, g *Generator, rate, batch int, burstEvery time.Duration, burstSize int) (int64, error) {
	tick := time.Second / time.Duration(max(1, rate/max(1, batch)))
	t := time.NewTicker(tick)
	defer t.Stop()
	lastBurst := time.Now()
	var written int64
	for {
		select {
		case <-ctx.Done():
			return written, nil
		case <-t.C:
		}
		evs := make([]outbox.Event, 0, batch)
		for i := 0; i < batch; i++ {
			evs = append(evs, g.Next())
		}
		evs = append(evs, g.drain()...) // the rest of a step: relations before their entity's delete
		if burstEvery > 0 && time.Since(lastBurst) >= burstEvery {
			evs = append(evs, g.Burst(burstSize)...)
			lastBurst = time.Now()
		}
		// The generator already counts these events in its state (Live): they
		// are written even when ctx ends meanwhile, so that state and outbox
		// agree.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		err := pgx.BeginFunc(wctx, pool, func(tx pgx.Tx) error { _, err := w.Write(wctx, tx, evs...); return err })
		cancel()
		if err != nil {
			return written, fmt.Errorf("loadgen: write: %w", err)
		}
		written += int64(len(evs))
	}
}
