package search_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/delivery"
	"github.com/searchsync/searchsync/examples/contacts"
	"github.com/searchsync/searchsync/examples/customer"
	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/linked"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/projections"
	"github.com/searchsync/searchsync/sink/search"
)

// propMismatch starts the message of a document that differs from the
// reference fold; the mutation check looks for it.
const propMismatch = "RELATION-PROPERTY MISMATCH"

// TestRelationPropertyInterleavings writes a seeded random history of
// customers, persons and customer-contact relations to the outbox and
// delivers it through three consumers that interleave aggregates
// arbitrarily (shards reassigned between them at random, in-flight batches
// of a lost shard landing late, rewinds after "crashes", outcomes honoured
// as the relay does). Every document must then equal the reference fold
// computed here from the history, and a replay of every event (one
// consumer, then three) must leave every document byte for byte and at the
// same _seq_no and _version.
//
// SEARCHSYNC_PROPERTY_SEED=<n> replays a seed.
func TestRelationPropertyInterleavings(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("SEARCHSYNC_PROPERTY_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("SEARCHSYNC_PROPERTY_SEED=%q: %v", s, err)
		}
		seed = n
	}
	t.Logf("seed %d (SEARCHSYNC_PROPERTY_SEED=%d replays it)", seed, seed)
	start := time.Now()
	w := setupRelations(t)

	h := genHistory(seed, 120, 180, 600)
	evs := h.produce(w)
	t.Logf("history: %d events in %d transactions (%d customers, %d persons, %d relations), produced in %s",
		len(evs), len(h.txs), len(h.custs), len(h.pers), len(h.rels), time.Since(start).Round(time.Millisecond))

	t0 := time.Now()
	// One consumer writes its linked documents in rounds of a few, so that
	// events of one batch are split across rounds.
	small := func(c *search.Config) { c.LinkedRound = 5 }
	cons := []*search.Consumer{w.newConsumer(nil), w.newConsumer(small), w.newConsumer(nil)}
	st := runInterleaved(t, w.ctx, cons, evs, seed+1, true)
	var ls linked.Stats
	for _, c := range cons {
		x := c.LinkedStats()
		ls.Writes, ls.Unchanged, ls.Conflicts, ls.FanOut = ls.Writes+x.Writes, ls.Unchanged+x.Unchanged, ls.Conflicts+x.Conflicts, ls.FanOut+x.FanOut
	}
	t.Logf("interleaved delivery in %s: %s; linked writes %d, unchanged %d, conflicts %d, fan-out %d",
		time.Since(t0).Round(time.Millisecond), st, ls.Writes, ls.Unchanged, ls.Conflicts, ls.FanOut)

	want := h.reference()
	got := readAll(t, w, h)
	if bad := compareDocs(t, h, want, got); bad > 0 {
		t.Fatalf("%s: %d of %d documents differ from the reference fold (seed %d)", propMismatch, bad, len(want), seed)
	}

	// Every event again, through one consumer: nothing changes.
	t1 := time.Now()
	all := w.replayAll()
	one := w.newConsumer(nil)
	for from := 0; from < len(all); from += 250 {
		batch := all[from:min(from+250, len(all))]
		for i, o := range one.Deliver(w.ctx, batch) {
			if !o.Kind.Delivered() {
				t.Fatalf("replay: event %d (%s): %s %s", batch[i].ID, batch[i].EventType, o.Kind, o.Reason)
			}
		}
	}
	assertUnchanged(t, "replay through one consumer", got, readAll(t, w, h))
	// And through three, interleaved, with redeliveries.
	cons = []*search.Consumer{w.newConsumer(small), w.newConsumer(nil), w.newConsumer(nil)}
	st = runInterleaved(t, w.ctx, cons, w.replayAll(), seed+2, true)
	assertUnchanged(t, "replay through three consumers", got, readAll(t, w, h))
	t.Logf("replays in %s (%s); total %s", time.Since(t1).Round(time.Millisecond), st, time.Since(start).Round(time.Millisecond))
}

// TestRelationPropertyFailsWithoutTheSourceGuard is the mutation check of
// the property test: built with the per-source version guard of the linked
// fold turned off (build tag searchsync_mutate_no_source_guard), the
// property test must find documents that differ.
func TestRelationPropertyFailsWithoutTheSourceGuard(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the property test on a mutant")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, "test", "-tags", "searchsync_mutate_no_source_guard",
		"-run", "^TestRelationPropertyInterleavings$", "-count=1", "-v", ".")
	cmd.Env = os.Environ()
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the property test passed without the source guard: its workload does not exercise the guard\n%s", out)
	}
	m := regexp.MustCompile(propMismatch + `: (\d+) of (\d+) documents differ`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("the mutant failed, but not with a document mismatch (%v)\n%s", err, out)
	}
	seed := regexp.MustCompile(`seed (\d+) \(`).FindSubmatch(out)
	t.Logf("without the source guard: %s of %s documents wrong (mutant seed %s)", m[1], m[2], seed[1])
}

// ---- the history and its reference fold ----

type pEnt struct {
	kind    byte // 'c' customer, 'p' person
	id      uuid.UUID
	n       int
	version int64
	exists  bool
	deleted bool
	hot     bool
	rels    map[uuid.UUID]*pRel // live relations
}

type pRel struct {
	id         uuid.UUID
	cust, pers *pEnt
	version    int64
	alive      bool
}

// pOp is what one event of the history does, for the reference fold.
type pOp struct {
	ent   *pEnt
	rel   *pRel
	verb  string // created, updated, deleted
	after map[string]any
	id    int64 // outbox id, once produced
}

type pTx struct {
	evs []outbox.Event
	ops []*pOp
}

type history struct {
	seed  uint64
	custs []*pEnt
	pers  []*pEnt
	rels  []*pRel
	txs   []*pTx
	ops   []*pOp // in outbox id order, once produced
}

var roles = []string{"billing", "sales", "tech", "legal", "owner"}

func genHistory(seed uint64, nCust, nPers, nRels int) *history {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	h := &history{seed: seed}
	uid := func() uuid.UUID {
		var u uuid.UUID
		for i := range u {
			u[i] = byte(rng.UintN(256))
		}
		u[6] = u[6]&0x0f | 0x40
		u[8] = u[8]&0x3f | 0x80
		return u
	}
	var tx *pTx
	begin := func() { tx = &pTx{} }
	commit := func() {
		if len(tx.evs) > 0 {
			h.txs = append(h.txs, tx)
		}
		tx = nil
	}
	entityFields := func(e *pEnt, full bool) map[string]any {
		m := map[string]any{}
		gen := rng.IntN(1000)
		if e.kind == 'c' {
			if full || rng.IntN(3) > 0 {
				m["display_name"] = fmt.Sprintf("Customer %d/%d", e.n, gen)
			}
			if full || rng.IntN(2) == 0 {
				m["status"] = []string{"active", "draft", "suspended"}[rng.IntN(3)]
			}
			if full && rng.IntN(2) == 0 {
				m["segment"] = []string{"smb", "enterprise"}[rng.IntN(2)]
			}
			return m
		}
		if full || e.hot || rng.IntN(3) > 0 {
			m["display_name"] = fmt.Sprintf("Person %d/%d", e.n, gen)
		}
		if (full && rng.IntN(4) > 0) || (!full && rng.IntN(2) == 0) {
			m["email"] = fmt.Sprintf("p%d.%d@example.com", e.n, gen)
		}
		if full && rng.IntN(3) == 0 {
			m["phone"] = fmt.Sprintf("+49 %d", gen)
		}
		return m
	}
	entityEvent := func(e *pEnt, verb string, after map[string]any) {
		var ev outbox.Event
		if e.kind == 'c' {
			ev = customer.Event(verb, ch(e.id, e.version, after))
		} else {
			ev = contacts.PersonEvent(verb, contacts.Person{ID: e.id, Version: e.version, After: after})
		}
		tx.evs = append(tx.evs, ev)
		tx.ops = append(tx.ops, &pOp{ent: e, verb: verb, after: after})
	}
	relEvent := func(r *pRel, verb string, after map[string]any) {
		tx.evs = append(tx.evs, contacts.ContactEvent(verb, contacts.Contact{ID: r.id, Customer: r.cust.id, Person: r.pers.id, Version: r.version, After: after}))
		tx.ops = append(tx.ops, &pOp{rel: r, verb: verb, after: after})
	}
	createEntity := func(e *pEnt) {
		e.version += 1 + int64(rng.IntN(3))
		e.exists, e.deleted = true, false
		entityEvent(e, "created", entityFields(e, true))
	}
	newEntity := func(kind byte) *pEnt {
		e := &pEnt{kind: kind, id: uid(), rels: map[uuid.UUID]*pRel{}}
		if kind == 'c' {
			e.n = len(h.custs)
			h.custs = append(h.custs, e)
		} else {
			e.n = len(h.pers)
			h.pers = append(h.pers, e)
		}
		return e
	}
	relFields := func(full bool) map[string]any {
		m := map[string]any{}
		if full || rng.IntN(3) > 0 {
			m["role"] = roles[rng.IntN(len(roles))]
		}
		if (full && rng.IntN(2) == 0) || (!full && (len(m) == 0 || rng.IntN(2) == 0)) {
			m["primary"] = rng.IntN(2) == 0
		}
		return m
	}
	deleteRel := func(r *pRel) {
		r.version += 1 + int64(rng.IntN(2))
		r.alive = false
		delete(r.cust.rels, r.id)
		delete(r.pers.rels, r.id)
		relEvent(r, "deleted", nil)
	}
	live := func(es []*pEnt, hotBias int) *pEnt {
		if hotBias > 0 && rng.IntN(100) < hotBias {
			var hot []*pEnt
			for _, e := range es {
				if e.hot && e.exists && !e.deleted {
					hot = append(hot, e)
				}
			}
			if len(hot) > 0 {
				return hot[rng.IntN(len(hot))]
			}
		}
		for range 50 {
			if e := es[rng.IntN(len(es))]; e.exists && !e.deleted {
				return e
			}
		}
		return nil
	}

	// The entities, a few at a time; a few hot ones: customers with many
	// contacts, persons renamed often and contacts of many customers.
	for i := range nCust + nPers {
		if i%3 == 0 {
			if tx != nil {
				commit()
			}
			begin()
		}
		var e *pEnt
		if i < nCust {
			e = newEntity('c')
			e.hot = e.n < 4
		} else {
			e = newEntity('p')
			e.hot = e.n < 5
		}
		createEntity(e)
	}
	commit()

	for len(h.rels) < nRels {
		begin()
		for range 1 + rng.IntN(4) {
			k := rng.IntN(100)
			if len(h.rels) == 0 {
				k = 0
			}
			switch {
			case k < 40: // a new relation
				c, p := live(h.custs, 35), live(h.pers, 20)
				if c == nil || p == nil {
					continue
				}
				r := &pRel{id: uid(), cust: c, pers: p, version: 1, alive: true}
				h.rels = append(h.rels, r)
				c.rels[r.id], p.rels[r.id] = r, r
				relEvent(r, "created", relFields(true))
			case k < 58: // a relation changes
				r := h.rels[rng.IntN(len(h.rels))]
				if !r.alive {
					continue
				}
				r.version += 1 + int64(rng.IntN(2))
				relEvent(r, "updated", relFields(false))
			case k < 66: // a relation ends
				r := h.rels[rng.IntN(len(h.rels))]
				if r.alive {
					deleteRel(r)
				}
			case k < 90: // an entity changes (hot persons often)
				var e *pEnt
				if rng.IntN(2) == 0 {
					e = live(h.pers, 60)
				} else {
					e = live(h.custs, 20)
				}
				if e == nil {
					continue
				}
				e.version += 1 + int64(rng.IntN(2))
				entityEvent(e, "updated", entityFields(e, false))
			case k < 95: // an entity is deleted with its relations
				es := h.pers
				if rng.IntN(2) == 0 {
					es = h.custs
				}
				e := live(es, 10)
				if e == nil {
					continue
				}
				rels := slices.Collect(maps.Values(e.rels))
				slices.SortFunc(rels, func(a, b *pRel) int { return strings.Compare(a.id.String(), b.id.String()) })
				first := rng.IntN(2) == 0 // the entity's delete before or after its relations'
				del := func() {
					e.version += 1 + int64(rng.IntN(2))
					e.deleted = true
					entityEvent(e, "deleted", nil)
				}
				if first {
					del()
				}
				for _, r := range rels {
					deleteRel(r)
				}
				if !first {
					del()
				}
			case k < 99: // a deleted entity comes back
				var dead []*pEnt
				for _, e := range slices.Concat(h.custs, h.pers) {
					if e.deleted {
						dead = append(dead, e)
					}
				}
				if len(dead) > 0 {
					createEntity(dead[rng.IntN(len(dead))])
				}
			default: // a new entity
				kind := byte('c')
				if rng.IntN(2) == 0 {
					kind = 'p'
				}
				createEntity(newEntity(kind))
			}
		}
		commit()
	}
	return h
}

// produce writes the history to the outbox, one transaction each, and
// returns its events in id order.
func (h *history) produce(w *relWorld) []*outbox.Event {
	w.t.Helper()
	var out []*outbox.Event
	for _, tx := range h.txs {
		got := w.produce(tx.evs...)
		if len(got) != len(tx.evs) {
			w.t.Fatalf("%d events produced of %d", len(got), len(tx.evs))
		}
		for i, e := range got {
			if e.EventType != tx.evs[i].EventType || *e.AggregateID != *tx.evs[i].AggregateID {
				w.t.Fatalf("produced events out of order: %s %s, want %s %s", e.EventType, e.AggregateID, tx.evs[i].EventType, tx.evs[i].AggregateID)
			}
			tx.ops[i].id = e.ID
			h.ops = append(h.ops, tx.ops[i])
		}
		out = append(out, got...)
	}
	slices.SortStableFunc(h.ops, func(a, b *pOp) int { return int(a.id - b.id) })
	return out
}

// refDoc is the expected document of an entity.
type refDoc struct {
	kind   byte
	fields map[string]any // the entity's fields (nil: never existed)
	live   bool
	exists bool
	del    bool
	items  []any // the relation field's items, sorted by relation id
}

// reference folds the history in outbox id order, by the truth model: an
// entity's document is its state (partial updates merged, a re-create
// replaces, a delete keeps the fields with deleted: true) and the items of
// its alive relations whose last event came after the entity's last
// delete, each with the relation's merged fields, its id, the other
// endpoint's id and the other entity's current copied fields.
func (h *history) reference() map[uuid.UUID]*refDoc {
	type es struct {
		fields          map[string]any
		exists, deleted bool
		lastDel         int64
	}
	type rs struct {
		r      *pRel
		fields map[string]any
		alive  bool
		lastID int64
	}
	ents := map[uuid.UUID]*es{}
	rels := map[uuid.UUID]*rs{}
	var relOrder []*rs
	for _, op := range h.ops {
		if op.ent != nil {
			s := ents[op.ent.id]
			if s == nil {
				s = &es{}
				ents[op.ent.id] = s
			}
			switch op.verb {
			case "created":
				s.fields, s.exists, s.deleted = maps.Clone(op.after), true, false
			case "updated":
				maps.Copy(s.fields, op.after)
			case "deleted":
				s.deleted, s.lastDel = true, op.id
			}
			continue
		}
		s := rels[op.rel.id]
		if s == nil {
			s = &rs{r: op.rel}
			rels[op.rel.id] = s
			relOrder = append(relOrder, s)
		}
		switch op.verb {
		case "created":
			s.fields, s.alive = maps.Clone(op.after), true
		case "updated":
			maps.Copy(s.fields, op.after)
		case "deleted":
			s.alive = false
		}
		s.lastID = op.id
	}
	out := map[uuid.UUID]*refDoc{}
	for _, e := range slices.Concat(h.custs, h.pers) {
		s := ents[e.id]
		d := &refDoc{kind: e.kind, fields: s.fields, exists: s.exists, del: s.deleted, live: s.exists && !s.deleted}
		out[e.id] = d
	}
	// copied: the other entity's fields an item copies (none when it does
	// not exist or is deleted).
	copied := func(id uuid.UUID, from, to []string) map[string]any {
		s := ents[id]
		m := map[string]any{}
		if s == nil || !s.exists || s.deleted {
			return m
		}
		for i, f := range from {
			if v, ok := s.fields[f]; ok {
				m[to[i]] = v
			}
		}
		return m
	}
	slices.SortFunc(relOrder, func(a, b *rs) int { return strings.Compare(a.r.id.String(), b.r.id.String()) })
	for _, s := range relOrder {
		if !s.alive {
			continue
		}
		c, p := s.r.cust.id, s.r.pers.id
		if s.lastID > ents[c].lastDel {
			it := maps.Clone(s.fields)
			it["relation_id"], it["person_id"] = s.r.id.String(), p.String()
			maps.Copy(it, copied(p, []string{"display_name", "email"}, []string{"name", "email"}))
			out[c].items = append(out[c].items, it)
		}
		if s.lastID > ents[p].lastDel {
			it := maps.Clone(s.fields)
			it["relation_id"], it["customer_id"] = s.r.id.String(), c.String()
			maps.Copy(it, copied(c, []string{"display_name"}, []string{"name"}))
			out[p].items = append(out[p].items, it)
		}
	}
	return out
}

// ---- reading and comparing ----

type gotDoc struct {
	doc indexer.Doc
	m   map[string]any
}

func readAll(t *testing.T, w *relWorld, h *history) map[uuid.UUID]gotDoc {
	t.Helper()
	out := map[uuid.UUID]gotDoc{}
	for _, part := range []struct {
		alias string
		es    []*pEnt
	}{{w.alias, h.custs}, {w.persons, h.pers}} {
		for from := 0; from < len(part.es); from += 500 {
			var ids []string
			for _, e := range part.es[from:min(from+500, len(part.es))] {
				ids = append(ids, e.id.String())
			}
			docs, err := w.eng.MGet(w.ctx, part.alias, ids)
			if err != nil {
				t.Fatal(err)
			}
			for id, d := range docs {
				var m map[string]any
				if err := json.Unmarshal(d.Source, &m); err != nil {
					t.Fatal(err)
				}
				out[uuid.MustParse(id)] = gotDoc{doc: d, m: m}
			}
		}
	}
	return out
}

// metaKeys are the keys of an entity's document that its projection sets
// besides the payload's fields.
var metaKeys = map[string]bool{"tenant_key": true, "entity_type": true, "code": true, "updated_by": true,
	"updated_at": true, "last_event": true, "deleted": true, projections.LiveKey: true, projections.MetaKey: true}

func canon(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("<%v>", err)
	}
	return string(b)
}

// compareDocs reports every document that differs from the reference and
// returns how many do.
func compareDocs(t *testing.T, h *history, want map[uuid.UUID]*refDoc, got map[uuid.UUID]gotDoc) int {
	t.Helper()
	bad := 0
	for _, e := range slices.Concat(h.custs, h.pers) {
		wd := want[e.id]
		field, kind := "contacts", "customer"
		if e.kind == 'p' {
			field, kind = "contact_of", "person"
		}
		var diffs []string
		g, ok := got[e.id]
		switch {
		case !ok:
			diffs = append(diffs, "missing")
		default:
			for k, v := range wd.fields {
				if canon(g.m[k]) != canon(v) {
					diffs = append(diffs, fmt.Sprintf("%s = %s, want %s", k, canon(g.m[k]), canon(v)))
				}
			}
			for k := range g.m {
				if _, own := wd.fields[k]; !own && !metaKeys[k] && k != field {
					diffs = append(diffs, fmt.Sprintf("unexpected %s = %s", k, canon(g.m[k])))
				}
			}
			if g.m["deleted"] != wd.del {
				diffs = append(diffs, fmt.Sprintf("deleted = %v, want %v", g.m["deleted"], wd.del))
			}
			if g.m[projections.LiveKey] != wd.live {
				diffs = append(diffs, fmt.Sprintf("_live = %v, want %v", g.m[projections.LiveKey], wd.live))
			}
			gi, has := g.m[field]
			switch {
			case len(wd.items) == 0 && has:
				diffs = append(diffs, fmt.Sprintf("%s = %s, want none", field, canon(gi)))
			case len(wd.items) > 0 && canon(gi) != canon(wd.items):
				diffs = append(diffs, fmt.Sprintf("%s =\n\t\t%s\n\twant\n\t\t%s", field, canon(gi), canon(wd.items)))
			}
		}
		if len(diffs) > 0 {
			bad++
			if bad <= 15 {
				t.Errorf("%s: %s %s (version %d, hot %v): %s\n\tdocument: %s", propMismatch, kind, e.id, e.version, e.hot,
					strings.Join(diffs, "; "), g.doc.Source)
			}
		}
	}
	return bad
}

func assertUnchanged(t *testing.T, what string, before, after map[uuid.UUID]gotDoc) {
	t.Helper()
	changed := 0
	for id, b := range before {
		a := after[id]
		if !bytes.Equal(a.doc.Source, b.doc.Source) || a.doc.SeqNo != b.doc.SeqNo || a.doc.Version != b.doc.Version {
			changed++
			if changed <= 5 {
				t.Errorf("%s changed %s: seq_no %d → %d, version %d → %d\n\t%s\n\t%s", what, id,
					b.doc.SeqNo, a.doc.SeqNo, b.doc.Version, a.doc.Version, b.doc.Source, a.doc.Source)
			}
		}
	}
	if changed > 0 || len(after) != len(before) {
		t.Fatalf("%s: %d of %d documents changed (%d documents now)", what, changed, len(before), len(after))
	}
}

// ---- the interleaved delivery ----

// propShard is one partition of the outbox (by hash of the aggregate), as
// a relay leases it: its owner delivers it in order from committed.
type propShard struct {
	evs       []*outbox.Event
	committed int
	owner     int
	epoch     int
	inflight  bool
}

type propPart struct {
	shard, epoch int
	at           []int // batch positions of the shard's events, in order
}

type propLate struct {
	evs   []*outbox.Event
	after int // the owner's batches to wait
}

type propStats struct {
	batches, events, late, lateEvents, mixed, lost, rewinds, reassigned, notDelivered int
}

func (s propStats) String() string {
	return fmt.Sprintf("%d batches of %d events, %d late batches (%d events) of lost shards and %d more ahead of fresh events, %d in-flight batches of lost shards, %d rewinds, %d reassignments, %d outcomes not delivered",
		s.batches, s.events, s.late, s.lateEvents, s.mixed, s.lost, s.rewinds, s.reassigned, s.notDelivered)
}

type propSched struct {
	mu     sync.Mutex
	cond   *sync.Cond
	rng    *rand.Rand
	shards []*propShard
	late   [][]*propLate // per worker
	chaos  bool
	stats  propStats
	err    error
}

// runInterleaved delivers evs (in id order) through the consumers, one
// goroutine each, until every event is delivered. Events are sharded by
// aggregate; a worker takes batches of random size from the shards it
// owns, interleaved at random (order per aggregate kept) and advances a
// shard over the delivered prefix of its events (the rest comes again, as
// the relay does). With chaos, shards move between workers at random
// points (the old owner's batch in flight lands late and is not
// committed; it may also deliver an already delivered range of the lost
// shard later still), and workers rewind shards (redelivery after a
// crash).
func runInterleaved(t *testing.T, ctx context.Context, cons []*search.Consumer, evs []*outbox.Event, seed uint64, chaos bool) propStats {
	t.Helper()
	const nShards = 12
	s := &propSched{rng: rand.New(rand.NewPCG(seed, seed+7)), chaos: chaos, late: make([][]*propLate, len(cons))}
	s.cond = sync.NewCond(&s.mu)
	for i := range nShards {
		s.shards = append(s.shards, &propShard{owner: i % len(cons)})
	}
	for _, e := range evs {
		hs := fnv.New32a()
		hs.Write([]byte(e.AggregateType))
		hs.Write(e.AggregateID[:])
		sh := s.shards[hs.Sum32()%nShards]
		sh.evs = append(sh.evs, e)
	}
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	// A worker waiting for work wakes up when the time is over.
	stop := context.AfterFunc(ctx, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.cond.Broadcast()
	})
	defer stop()
	var wg sync.WaitGroup
	for wi, c := range cons {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.work(ctx, wi, c)
		}()
	}
	wg.Wait()
	if s.err != nil {
		t.Fatal(s.err)
	}
	if ctx.Err() != nil {
		for i, sh := range s.shards {
			t.Logf("shard %d: %d of %d committed, owner %d, epoch %d, in flight %v", i, sh.committed, len(sh.evs), sh.owner, sh.epoch, sh.inflight)
		}
		t.Fatalf("interleaved delivery did not finish: %v (%s)", ctx.Err(), s.stats)
	}
	return s.stats
}

func (s *propSched) done() bool {
	for _, sh := range s.shards {
		if sh.committed < len(sh.evs) || sh.inflight {
			return false
		}
	}
	for _, l := range s.late {
		if len(l) > 0 {
			return false
		}
	}
	return true
}

func (s *propSched) work(ctx context.Context, wi int, c *search.Consumer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if s.err != nil || ctx.Err() != nil {
			s.cond.Broadcast()
			return
		}
		if s.done() {
			s.cond.Broadcast()
			return
		}
		batch, parts, late := s.take(wi)
		if batch == nil {
			s.cond.Wait()
			continue
		}
		s.mu.Unlock()
		out := c.Deliver(ctx, batch)
		s.mu.Lock()
		s.settle(wi, batch, parts, late, out)
		// No mischief once every event is delivered: the other workers may
		// have gone (this one delivered a batch of a shard it had lost).
		if s.chaos && !s.done() {
			s.mischief(wi)
		}
		s.cond.Broadcast()
	}
}

// take picks the worker's next batch: a late batch that is due, or events
// of the shards it owns.
func (s *propSched) take(wi int) ([]*outbox.Event, []*propPart, bool) {
	// A late batch that is due comes alone or ahead of fresh events of
	// other aggregates in the same batch.
	var prefix *propLate
	for i, l := range s.late[wi] {
		l.after--
		if l.after <= 0 {
			s.late[wi] = slices.Delete(s.late[wi], i, i+1)
			if s.rng.IntN(2) == 0 {
				return l.evs, nil, true
			}
			prefix = l
			break
		}
	}
	var mine []int
	for i, sh := range s.shards {
		if sh.owner == wi && !sh.inflight && sh.committed < len(sh.evs) {
			mine = append(mine, i)
		}
	}
	if len(mine) == 0 {
		// Take over a shard nobody is delivering (a relay's rebalance).
		var free []int
		for i, sh := range s.shards {
			if !sh.inflight && sh.committed < len(sh.evs) {
				free = append(free, i)
			}
		}
		if len(free) == 0 {
			if prefix != nil {
				return prefix.evs, nil, true
			}
			if len(s.late[wi]) > 0 {
				l := s.late[wi][0]
				s.late[wi] = s.late[wi][1:]
				return l.evs, nil, true
			}
			return nil, nil, false
		}
		i := free[s.rng.IntN(len(free))]
		s.shards[i].owner = wi
		s.shards[i].epoch++
		mine = []int{i}
	}
	s.rng.Shuffle(len(mine), func(i, j int) { mine[i], mine[j] = mine[j], mine[i] })
	mine = mine[:1+s.rng.IntN(len(mine))]
	size := 1 + s.rng.IntN(40)
	next := map[int]int{}
	parts := map[int]*propPart{}
	var batch []*outbox.Event
	for len(batch) < size && len(mine) > 0 {
		k := s.rng.IntN(len(mine))
		i := mine[k]
		sh := s.shards[i]
		for range 1 + s.rng.IntN(4) {
			pos := sh.committed + next[i]
			if pos >= len(sh.evs) || len(batch) >= size {
				break
			}
			p := parts[i]
			if p == nil {
				p = &propPart{shard: i, epoch: sh.epoch}
				parts[i] = p
			}
			p.at = append(p.at, len(batch))
			batch = append(batch, sh.evs[pos])
			next[i]++
		}
		if sh.committed+next[i] >= len(sh.evs) {
			mine = slices.Delete(mine, k, k+1)
		}
	}
	if prefix != nil {
		aggs := map[uuid.UUID]bool{}
		for _, e := range prefix.evs {
			aggs[*e.AggregateID] = true
		}
		if slices.ContainsFunc(batch, func(e *outbox.Event) bool { return aggs[*e.AggregateID] }) {
			// Never two events of one aggregate out of order in a batch:
			// the late one comes next time.
			prefix.after = 1
			s.late[wi] = append(s.late[wi], prefix)
		} else {
			n := len(prefix.evs)
			for _, p := range parts {
				for j := range p.at {
					p.at[j] += n
				}
			}
			batch = append(slices.Clone(prefix.evs), batch...)
			s.stats.mixed++
		}
	}
	var ps []*propPart
	for _, p := range parts {
		s.shards[p.shard].inflight = true
		ps = append(ps, p)
	}
	return batch, ps, false
}

// settle honours the outcomes as the relay does: a shard advances over
// the delivered prefix of its events; from the first event not delivered
// on, they come again. A batch of a shard the worker lost is not
// committed.
func (s *propSched) settle(wi int, batch []*outbox.Event, parts []*propPart, late bool, out []delivery.Outcome) {
	s.stats.batches++
	s.stats.events += len(batch)
	if len(out) != len(batch) {
		s.err = fmt.Errorf("%d outcomes for %d events", len(out), len(batch))
		return
	}
	for i, o := range out {
		if o.Kind == delivery.Poison {
			s.err = fmt.Errorf("event %d (%s) is poison: %s", batch[i].ID, batch[i].EventType, o.Reason)
			return
		}
		if !o.Kind.Delivered() {
			s.stats.notDelivered++
		}
	}
	if late {
		s.stats.late++
		s.stats.lateEvents += len(batch)
		return
	}
	for _, p := range parts {
		sh := s.shards[p.shard]
		if sh.epoch != p.epoch || sh.owner != wi {
			s.stats.lost++
			continue // the lease was lost meanwhile: not committed
		}
		sh.inflight = false
		n := 0
		for _, at := range p.at {
			if !out[at].Kind.Delivered() {
				break
			}
			n++
		}
		sh.committed += n
	}
}

// mischief moves a shard to another worker or rewinds one, at random.
func (s *propSched) mischief(wi int) {
	r := s.rng
	if r.IntN(100) < 12 {
		i := r.IntN(len(s.shards))
		sh := s.shards[i]
		if sh.committed > 0 && sh.committed <= len(sh.evs) {
			back := 1 + r.IntN(min(sh.committed, 25))
			if !sh.inflight || sh.owner != wi {
				// The owner restarts from an older committed position
				// (its batch in flight, if any, is not committed).
				sh.committed -= back
				sh.epoch++
				sh.inflight = false
				s.stats.rewinds++
			}
		}
	}
	if r.IntN(100) < 25 {
		i := r.IntN(len(s.shards))
		sh := s.shards[i]
		to := r.IntN(len(s.late))
		if to == sh.owner {
			to = (to + 1) % len(s.late)
		}
		old := sh.owner
		sh.owner, sh.epoch, sh.inflight = to, sh.epoch+1, false
		s.stats.reassigned++
		// The old owner, not yet aware, delivers an already delivered
		// range of the shard later (a batch it had read before losing it).
		if sh.committed > 0 && r.IntN(100) < 70 {
			from := r.IntN(sh.committed)
			end := min(sh.committed, from+1+r.IntN(40))
			s.late[old] = append(s.late[old], &propLate{evs: slices.Clone(sh.evs[from:end]), after: 1 + r.IntN(4)})
		}
	}
}
