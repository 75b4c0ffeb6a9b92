package search_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/examples/contacts"
	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/mapping"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/projections"
	"github.com/searchsync/searchsync/relay"
	"github.com/searchsync/searchsync/sink/search"
)

// BenchmarkRelations is BenchmarkEndToEndRealistic on a relation-heavy
// workload (relWorkload): the customer example and the contacts example's
// persons and customer-contact relation, one relay in its default
// configuration and the search consumer, whose customers and persons
// indexes are both linked (every document read, folded and written with
// if_seq_no through the linked writer). Half the events are relation
// events: creates, partial role updates, deletes; the rest are customer
// and person events: creates, partial updates, renames (a renamed person's
// name and email are copied into the contacts of every customer it is a
// contact of: the fan-out) and deletes. A few customers have many
// contacts and a few persons are contacts of many customers.
//
// The raw side writes one full document per event (the entity's for an
// entity event, the customer's for a relation event; folded in memory as
// the consumer folds it, with its relation lists and versions) to fresh
// indexes of the two definitions, batch 500, two requests in flight,
// before and after the end-to-end run; raw_docs/s is the documents of both
// ÷ the sum of their times. Printed as for the realistic workload (ratio,
// rates, CPU µs per event of searchsync, PostgreSQL and the engine, busy
// share, cores when pinned), and the linked writer's counters for the run
// (linked_reads, _writes, _unchanged, _conflicts, _fanout, _fanout_skip:
// documents). SEARCHSYNC_BENCH_CPUPROFILE and the relay and state cache
// knobs as for BenchmarkEndToEndRealistic.
//
//	go test ./sink/search -run '^$' -bench Relations -benchtime 1x -count 3
func BenchmarkRelations(b *testing.B) {
	for _, pin := range []bool{false, true} {
		name := "pin=off"
		if pin {
			name = "pin=on"
		}
		b.Run(name, func(b *testing.B) { benchRelations(b, relationsWorkload(), pin) })
	}
}

// relWorkload is a fixed relation-heavy mix: Customers customers and
// Persons persons are created first (round robin over three tenants), then
// RelShare of all the events are events of the customer-contact relation
// (RelCreate creates, RelUpdate partial updates of role or primary, the
// rest deletes; a relation connects a customer and a person of the same
// tenant, HotRelShare of the creates name one of the HotCustomers first
// customers and as many name one of the HotPersons first persons), the
// others customer or person events in equal parts: Deletes deletes (each
// followed by the create of a new entity in its place; the relation-hot
// entities are not deleted), Renames renames (a customer's display_name, a
// person's display_name or email: the copied fields), otherwise partial
// updates, HotShare of them on the Hot first entities.
type relWorkload struct {
	Events, Customers, Persons int
	RelShare                   float64
	RelCreate, RelUpdate       float64
	HotCustomers, HotPersons   int
	HotRelShare                float64
	Hot                        int
	HotShare                   float64
	Deletes, Renames           float64
	Seed                       uint64
}

func relationsWorkload() relWorkload {
	return relWorkload{Events: 40000, Customers: 2000, Persons: 3000, RelShare: 0.5, RelCreate: 0.45, RelUpdate: 0.4,
		HotCustomers: 10, HotPersons: 10, HotRelShare: 0.1, Hot: 200, HotShare: 0.8, Deletes: 0.03, Renames: 0.25, Seed: 1}
}

// relEnt is one customer or person of the workload.
type relEnt struct {
	id      uuid.UUID
	tenant  string
	version int64
	state   map[string]any
	rels    int // live relations naming it
}

type relRel struct {
	id         uuid.UUID
	cust, pers *relEnt
	version    int64
	role       string
	primary    bool
}

// relMix is the events of a relWorkload and the number of live customers
// and persons at the end.
type relMix struct {
	events                  []outbox.Event
	liveCustomers, livePers int
	relEvents, renames      int
}

func (w relWorkload) make() relMix {
	rng := rand.New(rand.NewPCG(w.Seed, w.Seed^0x9e3779b97f4a7c15))
	tenants := []string{"acme", "globex", "initech"}
	roles := []string{"billing", "sales", "technical", "legal", "owner"}
	actor := uuid.New().String()
	seq := 0
	var out relMix
	emit := func(e outbox.Event) { out.events = append(out.events, e) }
	custPayload := func(c *relEnt, before, after map[string]any) []byte {
		p, _ := json.Marshal(map[string]any{"tenant_key": c.tenant, "entity_type": "customer", "entity_id": c.id.String(),
			"code": c.state["code"], "version": c.version, "before": before, "after": after,
			"actor": map[string]any{"principal_type": "user", "principal_id": actor}})
		return p
	}
	custEvent := func(c *relEnt, verb string, before, after map[string]any) outbox.Event {
		id := c.id
		return outbox.Event{EventType: "entity.customer." + verb, SchemaVersion: 1, AggregateType: "DDM_ENTITY", AggregateID: &id,
			Payload: custPayload(c, before, after)}
	}
	newCustomer := func(tenant string) *relEnt {
		seq++
		c := &relEnt{id: uuid.New(), tenant: tenant, version: 1, state: map[string]any{
			"code": fmt.Sprintf("C-%06d", seq), "name": fmt.Sprintf("%s %s GmbH", relLast[rng.IntN(len(relLast))], relCities[rng.IntN(len(relCities))]),
			"email": fmt.Sprintf("c%d@example.org", seq), "city": relCities[rng.IntN(len(relCities))], "status": "draft", "score": rng.IntN(1000)}}
		after := cloneState(c.state)
		delete(after, "code")
		emit(custEvent(c, "created", map[string]any{}, after))
		return c
	}
	newPerson := func(tenant string) *relEnt {
		seq++
		p := &relEnt{id: uuid.New(), tenant: tenant, version: 1, state: map[string]any{
			"display_name": relFirst[rng.IntN(len(relFirst))] + " " + relLast[rng.IntN(len(relLast))],
			"email":        fmt.Sprintf("p%d@example.org", seq), "phone": fmt.Sprintf("+49 30 %07d", rng.IntN(10000000))}}
		emit(contacts.PersonEvent("created", contacts.Person{Tenant: tenant, ID: p.id, Version: 1, After: cloneState(p.state)}))
		return p
	}
	customers := make([]*relEnt, 0, w.Customers)
	persons := make([]*relEnt, 0, w.Persons)
	for i := range max(w.Customers, w.Persons) {
		if i < w.Customers {
			customers = append(customers, newCustomer(tenants[i%len(tenants)]))
		}
		if i < w.Persons {
			persons = append(persons, newPerson(tenants[i%len(tenants)]))
		}
	}
	var rels []*relRel
	relShare := w.RelShare * float64(w.Events) / float64(max(w.Events-len(out.events), 1))
	// pick returns an entity of ents in tenant t (-1: any): one of the
	// first hot with probability share.
	pick := func(ents []*relEnt, hot int, share float64, t int) int {
		n := len(ents)
		if hot > 0 && rng.Float64() < share {
			n = hot
		}
		i := rng.IntN(n)
		if t >= 0 {
			i = i - i%len(tenants) + t
			if i >= len(ents) {
				i -= len(tenants)
			}
		}
		return i
	}
	dropRels := func(e *relEnt) {
		rels = slices.DeleteFunc(rels, func(r *relRel) bool {
			if r.cust == e || r.pers == e {
				r.cust.rels--
				r.pers.rels--
				return true
			}
			return false
		})
	}
	for len(out.events) < w.Events {
		if rng.Float64() < relShare {
			out.relEvents++
			x := rng.Float64()
			switch {
			case len(rels) < 100 || x < w.RelCreate:
				ci := pick(customers, w.HotCustomers, w.HotRelShare, -1)
				pi := pick(persons, w.HotPersons, w.HotRelShare, ci%len(tenants))
				r := &relRel{id: uuid.New(), cust: customers[ci], pers: persons[pi], version: 1, role: roles[rng.IntN(len(roles))], primary: rng.IntN(4) == 0}
				r.cust.rels++
				r.pers.rels++
				rels = append(rels, r)
				emit(contacts.ContactEvent("created", contacts.Contact{Tenant: r.cust.tenant, ID: r.id, Customer: r.cust.id, Person: r.pers.id,
					Version: 1, After: map[string]any{"role": r.role, "primary": r.primary}}))
			case x < w.RelCreate+w.RelUpdate:
				r := rels[rng.IntN(len(rels))]
				r.version++
				before, after := map[string]any{}, map[string]any{}
				if rng.IntN(4) == 0 {
					before["primary"], r.primary = r.primary, !r.primary
					after["primary"] = r.primary
				} else {
					before["role"], r.role = r.role, roles[rng.IntN(len(roles))]
					after["role"] = r.role
				}
				emit(contacts.ContactEvent("updated", contacts.Contact{Tenant: r.cust.tenant, ID: r.id, Customer: r.cust.id, Person: r.pers.id,
					Version: r.version, Before: before, After: after}))
			default:
				i := rng.IntN(len(rels))
				r := rels[i]
				rels = slices.Delete(rels, i, i+1)
				r.cust.rels--
				r.pers.rels--
				r.version++
				emit(contacts.ContactEvent("deleted", contacts.Contact{Tenant: r.cust.tenant, ID: r.id, Customer: r.cust.id, Person: r.pers.id,
					Version: r.version, Before: map[string]any{"role": r.role}}))
			}
			continue
		}
		isCustomer := rng.IntN(2) == 0
		ents, hotRel := persons, w.HotPersons
		if isCustomer {
			ents, hotRel = customers, w.HotCustomers
		}
		x := rng.Float64()
		if x < w.Deletes {
			i := hotRel + rng.IntN(len(ents)-hotRel)
			e := ents[i]
			e.version++
			dropRels(e)
			if isCustomer {
				emit(custEvent(e, "deleted", cloneState(e.state), map[string]any{}))
				if len(out.events) < w.Events {
					ents[i] = newCustomer(e.tenant)
				}
			} else {
				emit(contacts.PersonEvent("deleted", contacts.Person{Tenant: e.tenant, ID: e.id, Version: e.version, Before: cloneState(e.state)}))
				if len(out.events) < w.Events {
					ents[i] = newPerson(e.tenant)
				}
			}
			continue
		}
		e := ents[pick(ents, w.Hot, w.HotShare, -1)]
		e.version++
		before, after := map[string]any{}, map[string]any{}
		set := func(k string, v any) { before[k], after[k], e.state[k] = e.state[k], v, v }
		rename := x < w.Deletes+w.Renames
		if rename {
			out.renames++
		}
		switch {
		case isCustomer && rename:
			set("name", fmt.Sprintf("%s %s AG", relLast[rng.IntN(len(relLast))], relCities[rng.IntN(len(relCities))]))
		case isCustomer:
			switch rng.IntN(3) {
			case 0:
				set("status", relStatuses[rng.IntN(len(relStatuses))])
			case 1:
				set("city", relCities[rng.IntN(len(relCities))])
			default:
				set("score", rng.IntN(1000))
				set("status", "active")
			}
		case rename && rng.IntN(2) == 0:
			set("display_name", relFirst[rng.IntN(len(relFirst))]+" "+relLast[rng.IntN(len(relLast))])
		case rename:
			seq++
			set("email", fmt.Sprintf("p%d@example.com", seq))
		default:
			set("phone", fmt.Sprintf("+49 30 %07d", rng.IntN(10000000)))
		}
		if isCustomer {
			emit(custEvent(e, "updated", before, after))
		} else {
			emit(contacts.PersonEvent("updated", contacts.Person{Tenant: e.tenant, ID: e.id, Version: e.version, Before: before, After: after}))
		}
	}
	out.liveCustomers, out.livePers = len(customers), len(persons)
	return out
}

func cloneState(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

var (
	relCities   = []string{"Berlin", "Hamburg", "München", "Köln", "Zürich", "Wien", "Leipzig", "Bremen"}
	relStatuses = []string{"draft", "active", "suspended", "active", "active"}
	relFirst    = []string{"Ada", "Grace", "Alan", "Edsger", "Barbara", "Donald", "Frances", "Ken"}
	relLast     = []string{"Lovelace", "Hopper", "Turing", "Dijkstra", "Liskov", "Knuth", "Allen", "Thompson"}
)

func benchRelations(b *testing.B, wl relWorkload, pin bool) {
	if _, ok := os.LookupEnv("GOGC"); !ok {
		was := debug.SetGCPercent(400) // the binary's default, as for the realistic workload
		b.Cleanup(func() { debug.SetGCPercent(was) })
	}
	for range b.N {
		w := setupRelations(b)
		mix := wl.make()
		evs := mix.events
		n := len(evs)
		mem := make([]*outbox.Event, n)
		for i := range evs {
			e := evs[i]
			e.ID = int64(i + 1)
			mem[i] = &e
		}
		ops := relRawDocs(b, w, mem)
		var docBytes, maxDoc int
		for _, os := range ops {
			for _, op := range os {
				docBytes += len(op.Doc)
				maxDoc = max(maxDoc, len(op.Doc))
			}
		}

		rawRate := func() (indexer.BulkRate, testenv.CPU) {
			c0 := testenv.ReadCPU()
			var sum indexer.BulkRate
			for _, alias := range []string{w.alias, w.persons} {
				raw := testenv.Name(alias + "_raw")
				def := *w.defs[alias]
				def.Writers = w.set.Fingerprint(alias) // as the consumer's: the relation lists mapped, _ss unindexed
				if err := mapping.CreatePhysical(w.ctx, w.eng, &def, raw, false); err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { w.eng.DeleteIndex(w.ctx, raw) })
				rate, err := indexer.RawBulkRateConcurrent(w.ctx, w.eng, raw, ops[alias], benchBatch, 2)
				if err != nil {
					b.Fatal(err)
				}
				sum.Docs += rate.Docs
				sum.Requests += rate.Requests
				sum.Conflicts += rate.Conflicts
				sum.Elapsed += rate.Elapsed
				sum.Concurrency = rate.Concurrency
			}
			sum.PerSecond = float64(sum.Docs) / sum.Elapsed.Seconds()
			return sum, testenv.ReadCPU().Sub(c0)
		}
		if pin {
			restore, err := testenv.Pin(1)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(restore)
		}
		raw1, raw1CPU := rawRate()
		b.ResetTimer()

		cfg := relay.Config{Schema: w.db.Schema, Logger: slog.New(slog.DiscardHandler)}
		relayKnobs(b, &cfg)
		batched := make(chan struct{}, 1)
		var batchMu sync.Mutex
		var batchSizes []int
		cfg.OnBatch = func(bs relay.BatchStats) {
			batchMu.Lock()
			batchSizes = append(batchSizes, bs.Claimed)
			batchMu.Unlock()
			select {
			case batched <- struct{}{}:
			default:
			}
		}
		cons := w.newConsumer(func(c *search.Config) {
			stateCacheKnob(b)(c)
			// SEARCHSYNC_BENCH_LINKED_ROUND: the documents of a round
			// (search.Config.LinkedRound), to compare with the default.
			if v := os.Getenv("SEARCHSYNC_BENCH_LINKED_ROUND"); v != "" {
				n, err := strconv.Atoi(v)
				if err != nil {
					b.Fatalf("SEARCHSYNC_BENCH_LINKED_ROUND=%q: %v", v, err)
				}
				c.LinkedRound = n
			}
		})
		cfg.Routes = []relay.Route{{Consumer: cons, Match: func(et, at string) bool {
			return strings.HasPrefix(et, "entity.customer.") || strings.HasPrefix(et, "entity.person.") || strings.HasPrefix(et, "relation.customer_contact.")
		}}}
		r, err := relay.New(w.db.Pool, cfg)
		if err != nil {
			b.Fatal(err)
		}
		stop := runRelay(b, r)
		partitions := relay.Config{}.WithDefaults().Partitions
		testenv.Eventually(b, 2*time.Minute, func() bool { return r.Stats().Partitions >= partitions }, "the relay holds every partition")
		tx, err := w.db.Pool.Begin(w.ctx)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := w.w.Write(w.ctx, tx, evs...); err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		if f := os.Getenv("SEARCHSYNC_BENCH_CPUPROFILE"); f != "" {
			out, err := os.Create(f)
			if err != nil {
				b.Fatal(err)
			}
			if err := pprof.StartCPUProfile(out); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { pprof.StopCPUProfile(); out.Close() })
		}
		ls0 := cons.LinkedStats()
		c0 := testenv.ReadCPU()
		gc0 := gcCPU()
		start := time.Now()
		heap := startHeapPeak()
		if err := tx.Commit(w.ctx); err != nil {
			b.Fatal(err)
		}
		acked := func() uint64 { st := r.Stats(); return st.Dispatched + st.Failed + st.Skipped }
		deadline := time.After(10 * time.Minute)
		for acked() < uint64(n) {
			select {
			case <-batched:
			case <-time.After(250 * time.Millisecond):
			case <-deadline:
				b.Fatalf("%d of %d events acked after 10m", acked(), n)
			}
		}
		e2e := time.Since(start)
		cpu := testenv.ReadCPU().Sub(c0)
		gc := gcCPU() - gc0
		peak := heap()
		pprof.StopCPUProfile()
		b.StopTimer()
		w.waitPending(time.Minute)
		stop()
		st := r.Stats()
		if st.Failed > 0 || st.Skipped > 0 {
			b.Fatalf("relay: %d failed, %d skipped of %d events", st.Failed, st.Skipped, n)
		}
		if got := w.searchable(w.alias, ""); got != int64(mix.liveCustomers) {
			b.Fatalf("%d customers searchable, want %d", got, mix.liveCustomers)
		}
		if got := w.searchable(w.persons, ""); got != int64(mix.livePers) {
			b.Fatalf("%d persons searchable, want %d", got, mix.livePers)
		}
		raw2, raw2CPU := rawRate()

		ls := cons.LinkedStats()
		rate, rawPerSec := reportEndToEnd(b, n, e2e, raw1, raw2, cpu, gc, peak, pin)
		b.ReportMetric(float64(ls.Reads-ls0.Reads), "linked_reads")
		b.ReportMetric(float64(ls.Writes-ls0.Writes), "linked_writes")
		b.ReportMetric(float64(ls.Unchanged-ls0.Unchanged), "linked_unchanged")
		b.ReportMetric(float64(ls.Conflicts-ls0.Conflicts), "linked_conflicts")
		b.ReportMetric(float64(ls.FanOut-ls0.FanOut), "linked_fanout")
		b.ReportMetric(float64(ls.FanOutSkip-ls0.FanOutSkip), "linked_fanout_skip")
		slices.Sort(batchSizes)
		med := 0
		if len(batchSizes) > 0 {
			med = batchSizes[len(batchSizes)/2]
		}
		b.Logf("%d events (%d of relations, %d renames; %d customers and %d persons live) in %s = %.0f/s; raw before %s, after %s; ratio %.2f; raw documents %.0f bytes on average, at most %d",
			n, mix.relEvents, mix.renames, mix.liveCustomers, mix.livePers, e2e.Round(time.Millisecond), rate, raw1, raw2, rate/rawPerSec, float64(docBytes)/float64(n), maxDoc)
		b.Logf("end to end: %s; %d batches (median %d events), %d claims; claim %s, deliver %s, ack %s; linked %+v; customers %s; persons %s",
			cpu, st.Batches, med, st.Claims, st.ClaimTime.Round(time.Millisecond), st.DeliverTime.Round(time.Millisecond), st.AckTime.Round(time.Millisecond),
			ls, w.indexWork(w.alias), w.indexWork(w.persons))
		b.Logf("raw before: %s; raw after: %s", raw1CPU, raw2CPU)
	}
}

// relRawDocs is one bulk operation per event, by alias: the full document
// after it of the event's entity (a relation event: of its customer),
// folded in memory as the linked writer folds it (its relation lists with
// the other entities' copied fields and its versions; no fan-out), with a
// version counting the document's writes.
func relRawDocs(b *testing.B, w *relWorld, evs []*outbox.Event) map[string][]indexer.BulkOp {
	type key struct{ index, id string }
	state := map[key]map[string]any{}
	writes := map[key]int64{}
	fields := map[string][]string{}
	for alias := range w.defs {
		fields[alias] = w.set.RelationFields(alias)
	}
	others := func(index, id string) (int64, map[string]any) {
		d := state[key{index, id}]
		if d == nil {
			return 0, nil
		}
		f, err := projections.NewLinkedFold(w.defs[index].FoldRules(), fields[index], d, 0, nil)
		if err != nil {
			return 0, nil
		}
		doc, v := f.EntityDoc()
		return v, doc
	}
	ops := map[string][]indexer.BulkOp{}
	for _, e := range evs {
		rs, err := w.set.ProjectAll(e, nil, nil)
		if err != nil || len(rs) == 0 {
			b.Fatalf("project event %d (%s): %v", e.ID, e.EventType, err)
		}
		for _, r := range rs {
			k := key{r.Index, r.ID}
			f, err := projections.NewLinkedFold(w.defs[r.Index].FoldRules(), fields[r.Index], state[k], 0, others)
			if err != nil {
				b.Fatal(err)
			}
			f.Apply(r)
			state[k] = f.Doc()
		}
		k := key{rs[0].Index, rs[0].ID}
		writes[k]++
		body, err := projections.Encode(state[k])
		if err != nil {
			b.Fatal(err)
		}
		ops[k.index] = append(ops[k.index], indexer.BulkOp{Type: indexer.OpIndex, ID: k.id, Version: writes[k], Doc: body, Compact: true})
	}
	return ops
}
