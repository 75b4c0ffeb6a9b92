package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

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

// TestRelationsThreeRelaysKilled: three `searchsync run` processes deliver
// customers, persons and the customer-contact relation (the customer and
// contacts examples) to the search consumer, and the relation events to a
// webhook, under a steady relation-heavy load; every 5 s for 45 s one relay
// is killed with SIGKILL and started again. Afterwards:
//
//   - nothing failed, and the webhook saw every relation in order;
//   - every document of both physical indexes (documents that are not live
//     included) equals the reference: the same outbox delivered in id order,
//     in batches, by an in-process search consumer into indexes of its own;
//   - every live customer with contacts is found through its alias by one
//     contact's name;
//   - a replay of the whole outbox through the relays leaves every document
//     byte for byte as it was, at the same _seq_no and _version.
func TestRelationsThreeRelaysKilled(t *testing.T) {
	t.Parallel()
	rw := newRelWorld(t)
	w := rw.world
	procs := []*proc{w.runSlot(0, "relay-0"), w.runSlot(1, "relay-1"), w.runSlot(2, "relay-2")}
	mix := newContactMix(uint64(time.Now().UnixNano()))
	stop := rw.produce(mix)
	// "Follows": everything committed 5 s ago is dispatched (on a loaded
	// machine the relays run seconds behind a steady load).
	testenv.Eventually(t, 120*time.Second, func() bool {
		return w.count(`SELECT count(*) FROM aa_outbox_event WHERE status <> 'dispatched' AND created_at < now() - interval '5 seconds'`) == 0
	}, "the relays follow the load before the chaos")

	began := time.Now()
	kills := 0
	for step := 0; time.Since(began) < 45*time.Second; step++ {
		i := step % len(procs)
		procs[i].cmd.Process.Signal(syscall.SIGKILL)
		<-procs[i].done
		kills++
		time.Sleep(200 * time.Millisecond) // a restart is not instantaneous in production either
		procs[i] = w.runSlot(i, fmt.Sprintf("relay-%d-restart-%d", i, step))
		time.Sleep(5 * time.Second) // the chaos period
	}
	stop()
	rw.dispatched("every event dispatched after the chaos")

	events := w.count(`SELECT count(*) FROM aa_outbox_event`)
	relIDs := rw.relationEventIDs()
	if !w.hook.has(relIDs) {
		t.Errorf("the webhook lacks relation events")
	}
	if n, which := w.hook.outOfOrder(); n != 0 {
		t.Errorf("%d relations reached the webhook out of order (first arrivals): %v", n, which)
	}

	// The reference fold of the truth: every event in id order.
	rw.deliverReference()
	got := map[string]map[string]indexer.Doc{}
	for _, pair := range [][2]string{{rw.cust, rw.refCust}, {rw.pers, rw.refPers}} {
		g, want := rw.docs(pair[0]), rw.docs(pair[1])
		got[pair[0]] = g
		rw.compare(pair[0], g, want)
	}
	rw.checkTruth(mix)
	rw.searchByContactName(rw.docs(rw.refCust))
	if t.Failed() {
		t.FailNow()
	}

	// Replay: every event pending again, delivered again by the relays.
	replayed := time.Now()
	rw.replay()
	rw.dispatched("every event dispatched again after the replay")
	w.hook.mu.Lock()
	for _, id := range relIDs {
		if n := w.hook.count[id]; n < 2 {
			w.hook.mu.Unlock()
			t.Fatalf("relation event %d reached the webhook %d times: the replay did not deliver it again", id, n)
		}
	}
	w.hook.mu.Unlock()
	for _, alias := range []string{rw.cust, rw.pers} {
		before, after := got[alias], rw.docs(alias)
		if len(before) != len(after) {
			t.Errorf("%s: %d documents before the replay, %d after", alias, len(before), len(after))
		}
		bad := 0
		for id, b := range before {
			a, ok := after[id]
			if ok && string(a.Source) == string(b.Source) && a.SeqNo == b.SeqNo && a.Version == b.Version && a.PrimaryTerm == b.PrimaryTerm {
				continue
			}
			if bad++; bad <= 3 {
				t.Errorf("%s/%s changed by the replay:\n before seq_no %d version %d %s\n  after seq_no %d version %d %s",
					alias, id, b.SeqNo, b.Version, b.Source, a.SeqNo, a.Version, a.Source)
			}
		}
		if bad > 0 {
			t.Errorf("%s: the replay changed %d of %d documents", alias, bad, len(before))
		}
	}
	t.Logf("%d events (%d of relations), %d kills; customers %d documents (%d live), persons %d (%d live); %s; replay %.1fs; endpoint duplicates %d",
		events, len(relIDs), kills, len(got[rw.cust]), live(got[rw.cust]), len(got[rw.pers]), live(got[rw.pers]), mix.summary(),
		time.Since(replayed).Seconds(), w.hook.duplicates())
}

// relWorld is a world whose relays write customers and persons through
// the examples' projections and relation into aliases of the test's own,
// and the relation events to the webhook.
type relWorld struct {
	*world
	ctx              context.Context
	eng              indexer.Engine
	cust, pers       string // the world's aliases
	refCust, refPers string // the reference's
}

// relProjections is the customer and contacts examples' projection files
// with the customers index renamed cust and the persons index pers.
func relProjections(t *testing.T, cust, pers string) (customerFile, contactsFile string) {
	t.Helper()
	replace := func(text, old, new string, n int) string {
		if c := strings.Count(text, old); c != n {
			t.Fatalf("the example's projection file holds %q %d times, not %d", old, c, n)
		}
		return strings.ReplaceAll(text, old, new)
	}
	customerFile = replace(string(customer.ProjectionFile()), "index: customers", "index: "+cust, 1)
	contactsFile = replace(string(contacts.ProjectionFile()), "index: customers", "index: "+cust, 1)
	contactsFile = replace(contactsFile, "index: persons", "index: "+pers, 2)
	return customerFile, contactsFile
}

func newRelWorld(t *testing.T) *relWorld {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	t.Cleanup(cancel)
	cust, pers := testenv.Name("e2ec"), testenv.Name("e2ep")
	rw := &relWorld{world: &world{t: t, db: testenv.NewDB(t), alias: cust}, ctx: ctx,
		cust: cust, pers: pers, refCust: cust + "_ref", refPers: pers + "_ref"}
	w := rw.world
	t.Cleanup(w.dumpOnFailure) // before the schema is dropped
	eng, err := indexer.New(indexer.Config{URLs: []string{testenv.EngineURL(t)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rw.eng = eng
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, a := range []string{rw.cust, rw.pers, rw.refCust, rw.refPers} {
			for n := 1; n <= 3; n++ {
				_ = eng.DeleteIndex(c, mapping.PhysicalName(a, n))
			}
		}
	})
	w.engineIx = mapping.PhysicalName(cust, 1)
	w.hook = newEndpoint(t)

	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "defs"), 0o755)
	for alias, file := range map[string]string{cust: "customers.json", pers: "persons.json"} {
		def, err := os.ReadFile("../mapping/defs/" + file)
		if err != nil {
			t.Fatal(err)
		}
		from := `"alias": "` + strings.TrimSuffix(file, ".json") + `"`
		if !strings.Contains(string(def), from) {
			t.Fatalf("%s lacks %s", file, from)
		}
		def = []byte(strings.Replace(string(def), from, `"alias": "`+alias+`"`, 1))
		if err := os.WriteFile(filepath.Join(dir, "defs", alias+".json"), def, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cf, pf := relProjections(t, cust, pers)
	os.WriteFile(filepath.Join(dir, "customer.yaml"), []byte(cf), 0o644)
	os.WriteFile(filepath.Join(dir, "contacts.yaml"), []byte(pf), 0o644)
	w.listen = testenv.FreeAddr(t)
	cfg := fmt.Sprintf(`database: {url: %q, schema: %s}
relay:
%s
engine: {kind: opensearch, urls: [%q]}
indexes: {definitions: defs, projections: [customer.yaml, contacts.yaml]}
http: {listen: %q}
log: {level: info, format: json}
compaction: {interval: -1s}
consumers:
  - {name: search, type: search, search: {indexes: [%s, %s]}}
  - {name: hook, type: webhook, webhook: {url: "%s/", secret: %q, concurrency: 8, timeout: 60s}}
routes:
  - {consumer: search, event_types: ["entity.customer.*", "entity.person.*"], aggregate_types: [DDM_ENTITY]}
  - {consumer: search, event_types: ["relation.customer_contact.*"], aggregate_types: [DDM_ENTITY_RELATION]}
  - {consumer: hook, event_types: ["relation.customer_contact.*"], aggregate_types: [DDM_ENTITY_RELATION]}
`, w.db.URL, w.db.Schema, shortForm, testenv.EngineURL(t), w.listen, cust, pers, w.hook.URL, secret)
	w.cfg = filepath.Join(dir, "searchsync.yaml")
	if err := os.WriteFile(w.cfg, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return rw
}

// produce writes the mix until the returned stop is called: every 50 ms a
// transaction of one to six steps (about 80 events/s with the relations a
// delete takes along), and every 3 s a burst of renames of a hot person
// (whose name many customers copy) or of a hot customer.
func (rw *relWorld) produce(mix *contactMix) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	writer := outbox.NewWriter(outbox.WriterConfig{Schema: rw.db.Schema})
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		lastBurst := time.Now()
		for {
			select {
			case <-ctx.Done():
				done <- nil
				return
			case <-tick.C:
			}
			var evs []outbox.Event
			for range mix.steps(6) {
				evs = append(evs, mix.step()...)
			}
			if time.Since(lastBurst) >= 3*time.Second {
				evs = append(evs, mix.burst(10)...)
				lastBurst = time.Now()
			}
			if len(evs) == 0 {
				continue
			}
			// The mix already counts these events in its state: they are
			// written even when the producer is being stopped.
			wctx, cancelW := context.WithTimeout(context.Background(), 30*time.Second)
			err := pgx.BeginFunc(wctx, rw.db.Pool, func(tx pgx.Tx) error { _, err := writer.Write(wctx, tx, evs...); return err })
			cancelW()
			if err != nil {
				done <- fmt.Errorf("write: %w", err)
				return
			}
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				rw.t.Errorf("producer: %v", err)
			}
		})
	}
	rw.t.Cleanup(stop)
	return stop
}

// dispatched waits until no event is pending and fails when one failed.
func (rw *relWorld) dispatched(what string) {
	rw.t.Helper()
	testenv.Eventually(rw.t, 300*time.Second, func() bool {
		return rw.count(`SELECT count(*) FROM aa_outbox_event WHERE status = 'pending'`) == 0
	}, "%s", what)
	if n := rw.count(`SELECT count(*) FROM aa_outbox_event WHERE status <> 'dispatched'`); n != 0 {
		rw.t.Fatalf("%s: %d events not dispatched (failed)", what, n)
	}
}

func (rw *relWorld) relationEventIDs() []int64 {
	rw.t.Helper()
	rows, err := rw.db.Pool.Query(rw.ctx, `SELECT id FROM aa_outbox_event WHERE aggregate_type = 'DDM_ENTITY_RELATION' ORDER BY id`)
	if err != nil {
		rw.t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		rw.t.Fatal(err)
	}
	return ids
}

// deliverReference makes the reference: a search consumer of the same
// projections writing the reference aliases gets every event of the
// outbox in id order, in batches of 100, and must deliver each.
func (rw *relWorld) deliverReference() {
	t := rw.t
	t.Helper()
	cf, pf := relProjections(t, rw.refCust, rw.refPers)
	set := projections.NewSet()
	if err := set.AddFile("customer.yaml", []byte(cf)); err != nil {
		t.Fatal(err)
	}
	if err := set.AddFile("contacts.yaml", []byte(pf)); err != nil {
		t.Fatal(err)
	}
	defs, err := mapping.Load("")
	if err != nil {
		t.Fatal(err)
	}
	mk := func(alias, base string) *mapping.Def {
		d := *defs[base]
		d.Alias = alias
		return &d
	}
	c, err := search.New(search.Config{Name: "reference", Engine: rw.eng, Projections: set,
		Defs: mapping.Defs{rw.refCust: mk(rw.refCust, "customers"), rw.refPers: mk(rw.refPers, "persons")}})
	if err != nil {
		t.Fatal(err)
	}
	rw.retry("create the reference's indexes", func() error { _, err := c.EnsureIndexes(rw.ctx); return err })
	rows, err := rw.db.Pool.Query(rw.ctx, `SELECT id, tenant_id, event_type, schema_version, aggregate_type, aggregate_id,
		correlation_id, payload, created_at FROM aa_outbox_event ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*outbox.Event, error) {
		var e outbox.Event
		err := r.Scan(&e.ID, &e.TenantID, &e.EventType, &e.SchemaVersion, &e.AggregateType, &e.AggregateID, &e.CorrelationID, &e.Payload, &e.CreatedAt)
		return &e, err
	})
	if err != nil {
		t.Fatal(err)
	}
	// A batch the engine refuses for a while (the shared engine's circuit
	// breaker answers 429 under memory pressure) is delivered again whole:
	// the events it applied are stale the second time. Poison fails at once.
	for i := 0; i < len(evs); i += 100 {
		batch := evs[i:min(i+100, len(evs))]
		rw.retry(fmt.Sprintf("the reference: events %d to %d", batch[0].ID, batch[len(batch)-1].ID), func() error {
			for j, o := range c.Deliver(rw.ctx, batch) {
				if o.Kind == delivery.Poison {
					t.Fatalf("reference: event %d (%s): %s %s", batch[j].ID, batch[j].EventType, o.Kind, o.Reason)
				}
				if !o.Kind.Delivered() {
					return fmt.Errorf("event %d (%s): %s %s", batch[j].ID, batch[j].EventType, o.Kind, o.Reason)
				}
			}
			return nil
		})
	}
}

// retry calls f until it succeeds, for at most a minute: the engine is
// shared with other tests and answers 429 (circuit breaker) now and then on
// a loaded machine.
func (rw *relWorld) retry(what string, f func() error) {
	rw.t.Helper()
	deadline := time.Now().Add(time.Minute)
	wait := 100 * time.Millisecond
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			rw.t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(wait)
		wait = min(2*wait, 2*time.Second)
	}
}

// docs reads every document of alias's physical index (documents that are
// not live included, which the alias hides): its ids with a scroll, then
// each document with _mget (the stored _source as it is, _seq_no and
// _version).
func (rw *relWorld) docs(alias string) map[string]indexer.Doc {
	t := rw.t
	t.Helper()
	var targets []string
	rw.retry("the index of "+alias, func() (err error) {
		targets, err = rw.eng.AliasTargets(rw.ctx, alias)
		if err == nil && len(targets) != 1 {
			t.Fatalf("alias %s: %v", alias, targets)
		}
		return err
	})
	ix := targets[0]
	rw.retry("refresh "+ix, func() error { return rw.eng.Refresh(rw.ctx, ix) })
	var ids []string
	rw.retry("the ids of "+ix, func() error {
		ids = nil
		return rw.eng.(indexer.Admin).Scroll(rw.ctx, ix, nil, 1000, nil, func(_ int64, hits []indexer.ScrollHit) error {
			for _, h := range hits {
				ids = append(ids, h.ID)
			}
			return nil
		})
	})
	out := make(map[string]indexer.Doc, len(ids))
	for i := 0; i < len(ids); i += 500 {
		chunk := ids[i:min(i+500, len(ids))]
		var got map[string]indexer.Doc
		rw.retry("read "+ix, func() (err error) { got, err = rw.eng.MGet(rw.ctx, ix, chunk); return err })
		for _, id := range chunk {
			d, ok := got[id]
			if !ok {
				t.Fatalf("%s/%s: listed by the scroll, missing from _mget", ix, id)
			}
			out[id] = d
		}
	}
	return out
}

// comparable decodes a document for the comparison with the reference.
// Every field is compared as it is (updated_at, updated_by and last_event
// too: they come from the event's created_at, actor and event_type, the
// same outbox rows the reference reads) except, in _ss, the copies of other
// entities' fields ("o"), which record what the other entity's document
// held when an item was written, and that depends on delivery order by
// construction:
//
//   - a copy's version "v" is the other entity's version when the copy was
//     last changed; a change of the entity that leaves the copied fields as
//     they are does not bring a new version (the copy is replaced only when
//     its values differ), so a relation delivered after such a change
//     records the newer version, in the reference the older one;
//   - a copy whose relation is deleted is no longer kept up to date (the
//     backref is dead): what it holds depends on whether the entity's
//     rename reached it before the relation's delete.
//
// So a copy is compared only where an alive item shows it, and there by
// its values only: those are what the document shows. Besides, a backref
// ("b") names the alias of the document whose item copies this entity
// ("t"): the reference's aliases are not the world's, so alias maps the
// reference's names to the world's.
func comparable(t *testing.T, src []byte, alias map[string]string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(src, &m); err != nil {
		t.Fatal(err)
	}
	ss, _ := m[projections.MetaKey].(map[string]any)
	if b, ok := ss["b"].(map[string]any); ok {
		for _, e := range b {
			if e, ok := e.(map[string]any); ok {
				if to, ok := alias[fmt.Sprint(e["t"])]; ok {
					e["t"] = to
				}
			}
		}
	}
	if o, ok := ss["o"].(map[string]any); ok {
		r, _ := ss["r"].(map[string]any)
		shown := map[string]bool{}
		for key, e := range r {
			e, _ := e.(map[string]any)
			field, _, _ := strings.Cut(key, "/")
			if other, _ := e["o"].(string); e["x"] == true {
				shown[field+"/"+other] = true
			}
		}
		for key, c := range o {
			if !shown[key] {
				delete(o, key)
				continue
			}
			if c, ok := c.(map[string]any); ok {
				delete(c, "v")
			}
		}
		if len(o) == 0 {
			delete(ss, "o")
		}
	}
	return m
}

// compare checks that the world's documents of alias are the reference's.
func (rw *relWorld) compare(alias string, got, want map[string]indexer.Doc) {
	t := rw.t
	t.Helper()
	if len(want) == 0 {
		t.Fatalf("the reference of %s holds no document", alias)
	}
	bad := 0
	for id, wd := range want {
		gd, ok := got[id]
		if !ok {
			if bad++; bad <= 3 {
				t.Errorf("%s/%s: missing; the reference holds %s", alias, id, wd.Source)
			}
			continue
		}
		if g, w := comparable(t, gd.Source, nil), comparable(t, wd.Source, map[string]string{rw.refCust: rw.cust, rw.refPers: rw.pers}); !reflect.DeepEqual(g, w) {
			if bad++; bad <= 3 {
				t.Errorf("%s/%s differs from the reference:\n got %s\nwant %s\n%s", alias, id, gd.Source, wd.Source, rw.history(id))
			}
		}
	}
	for id, gd := range got {
		if _, ok := want[id]; !ok {
			if bad++; bad <= 3 {
				t.Errorf("%s/%s: not in the reference: %s", alias, id, gd.Source)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d documents differ from the reference (%d documents, the reference %d)", alias, bad, len(got), len(want))
		return
	}
	t.Logf("%s: %d documents equal the reference (%d live)", alias, len(want), live(want))
}

func live(docs map[string]indexer.Doc) int {
	n := 0
	for _, d := range docs {
		var m struct {
			Live bool `json:"_live"`
		}
		if json.Unmarshal(d.Source, &m) == nil && m.Live {
			n++
		}
	}
	return n
}

// searchByContactName checks that every live customer whose reference
// lists contacts is found through the world's customers alias by the name
// of its first contact: one query per name, over the ids of the customers
// whose first contact has it.
func (rw *relWorld) searchByContactName(ref map[string]indexer.Doc) {
	t := rw.t
	t.Helper()
	byName := map[string][]string{}
	for id, d := range ref {
		var m struct {
			Live     bool `json:"_live"`
			Contacts []struct {
				Name string `json:"name"`
			} `json:"contacts"`
		}
		if err := json.Unmarshal(d.Source, &m); err != nil {
			t.Fatal(err)
		}
		if !m.Live || len(m.Contacts) == 0 {
			continue
		}
		if m.Contacts[0].Name == "" {
			t.Errorf("reference customer %s: its first contact has no name: %s", id, d.Source)
			continue
		}
		byName[m.Contacts[0].Name] = append(byName[m.Contacts[0].Name], id)
	}
	if len(byName) == 0 {
		t.Fatal("no live customer of the reference has contacts")
	}
	customers := 0
	for name, ids := range byName {
		slices.Sort(ids)
		customers += len(ids)
		body, _ := json.Marshal(map[string]any{"size": len(ids), "_source": false, "query": map[string]any{"bool": map[string]any{
			"must":   []any{map[string]any{"simple_query_string": map[string]any{"query": `"` + name + `"`, "fields": []string{"contacts.name"}}}},
			"filter": []any{map[string]any{"ids": map[string]any{"values": ids}}},
		}}})
		var res *indexer.SearchResult
		rw.retry("search "+rw.cust, func() (err error) { res, err = rw.eng.Search(rw.ctx, rw.cust, body); return err })
		var found []string
		for _, h := range res.Hits {
			found = append(found, h.ID)
		}
		slices.Sort(found)
		if !slices.Equal(found, ids) {
			t.Errorf("a search of %s for the contact name %q finds %v, not %v", rw.cust, name, found, ids)
		}
	}
	t.Logf("%d customers with contacts found by a contact's name (%d names)", customers, len(byName))
}

// replay makes every event deliverable again, as if it had never been
// delivered: pending and available now, with no attempts and no delivery
// rows (the per-consumer state of events whose consumers went different
// ways; there are none once every event is dispatched, but a row left would
// keep the event from a consumer).
func (rw *relWorld) replay() {
	rw.t.Helper()
	_, err := rw.db.Pool.Exec(rw.ctx, `DELETE FROM aa_outbox_delivery;
		UPDATE aa_outbox_event SET status = 'pending', dispatched_at = NULL, attempts = 0, last_error = NULL, available_at = now()`)
	if err != nil {
		rw.t.Fatal(err)
	}
}

// contactMix is a relation-heavy workload of customers, persons and their
// contact relations, with the truth state: creates, partial updates,
// renames, deletes (with the entity's relations deleted in the same
// transaction, first), re-creates of deleted entities at higher versions,
// relations added, changed and removed, and hot customers and persons
// that most relations name.
type contactMix struct {
	mu                 sync.Mutex
	rng                *rand.Rand
	customers, persons []*mixEntity
	links              []*mixLink // alive
	hotC, hotP         int        // the first hotC customers and hotP persons are hot
	n                  struct{ events, creates, recreates, deletes, renames, linked, relinked, unlinked int }
}

type mixEntity struct {
	id      uuid.UUID
	version int64
	alive   bool
	lived   bool // created once: a create is a re-create
}

type mixLink struct {
	id, cust, pers uuid.UUID
	version        int64
}

var (
	mixFirst = []string{"Marie", "Lise", "Emmy", "Rosalind", "Katherine", "Hedy", "Sophie", "Mary"}
	mixLast  = []string{"Curie", "Meitner", "Noether", "Franklin", "Johnson", "Lamarr", "Germain", "Somerville"}
	mixRoles = []string{"sales", "billing", "technical", "management"}
)

func newContactMix(seed uint64) *contactMix {
	m := &contactMix{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), hotC: 6, hotP: 8}
	for range 150 {
		m.customers = append(m.customers, &mixEntity{id: uuid.New()})
	}
	for range 250 {
		m.persons = append(m.persons, &mixEntity{id: uuid.New()})
	}
	return m
}

func (m *contactMix) summary() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return fmt.Sprintf("mix: %d events, %d creates (%d re-creates), %d deletes, %d renames, relations %d added, %d changed, %d removed, %d alive",
		m.n.events, m.n.creates, m.n.recreates, m.n.deletes, m.n.renames, m.n.linked, m.n.relinked, m.n.unlinked, len(m.links))
}

// steps returns how many steps the next transaction takes: 1 to most.
func (m *contactMix) steps(most int) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return 1 + m.rng.IntN(most)
}

// pick returns an entity of es, one of the first hot with probability hotShare.
func (m *contactMix) pick(es []*mixEntity, hot int, hotShare float64) *mixEntity {
	if m.rng.Float64() < hotShare {
		return es[m.rng.IntN(hot)]
	}
	return es[m.rng.IntN(len(es))]
}

func (m *contactMix) personName() string {
	return mixFirst[m.rng.IntN(len(mixFirst))] + " " + mixLast[m.rng.IntN(len(mixLast))]
}

// step returns the events of one step of the mix (one transaction's part).
func (m *contactMix) step() []outbox.Event {
	m.mu.Lock()
	defer m.mu.Unlock()
	var evs []outbox.Event
	switch r := m.rng.IntN(100); {
	case r < 15:
		evs = m.customerStep(m.pick(m.customers, m.hotC, 0.2))
	case r < 40:
		evs = m.personStep(m.pick(m.persons, m.hotP, 0.2))
	case r < 75 || len(m.links) == 0:
		c, p := m.pick(m.customers, m.hotC, 0.5), m.pick(m.persons, m.hotP, 0.3)
		switch {
		case !c.alive:
			evs = m.customerStep(c)
		case !p.alive:
			evs = m.personStep(p)
		default:
			evs = m.link(c, p)
		}
	default:
		evs = m.linkStep(m.links[m.rng.IntN(len(m.links))])
	}
	m.n.events += len(evs)
	return evs
}

// burst returns n renames of a live hot person (copied by the customers it
// is a contact of) or of a live hot customer.
func (m *contactMix) burst(n int) []outbox.Event {
	m.mu.Lock()
	defer m.mu.Unlock()
	var evs []outbox.Event
	if m.rng.IntN(2) == 0 {
		p := m.persons[m.rng.IntN(m.hotP)]
		if !p.alive {
			return nil
		}
		for range n {
			p.version++
			m.n.renames++
			evs = append(evs, contacts.PersonEvent("updated", contacts.Person{ID: p.id, Version: p.version, After: map[string]any{"display_name": m.personName()}}))
		}
	} else {
		c := m.customers[m.rng.IntN(m.hotC)]
		if !c.alive {
			return nil
		}
		for range n {
			c.version++
			m.n.renames++
			evs = append(evs, customer.Updated(customer.Change{ID: c.id, Version: c.version, After: map[string]any{"display_name": fmt.Sprintf("Firma %d", m.rng.IntN(10000))}}))
		}
	}
	m.n.events += len(evs)
	return evs
}

func (m *contactMix) customerStep(c *mixEntity) []outbox.Event {
	c.version++
	switch {
	case !c.alive:
		m.create(c)
		return []outbox.Event{customer.Created(customer.Change{ID: c.id, Version: c.version, After: map[string]any{
			"display_name": fmt.Sprintf("Firma %d", m.rng.IntN(10000)), "status": "draft", "email": fmt.Sprintf("c%d@example.com", m.rng.IntN(100000)),
			"credit_limit": m.rng.IntN(100000), "address": map[string]any{"city": "Berlin", "country": "DE"}}})}
	case m.rng.IntN(10) == 0:
		m.n.deletes++
		c.alive = false
		evs := m.unlinkAll(func(l *mixLink) bool { return l.cust == c.id })
		return append(evs, customer.Deleted(customer.Change{ID: c.id, Version: c.version}))
	}
	var after map[string]any
	switch m.rng.IntN(3) {
	case 0:
		m.n.renames++
		after = map[string]any{"display_name": fmt.Sprintf("Firma %d", m.rng.IntN(10000))}
	case 1:
		after = map[string]any{"status": []string{"active", "draft", "suspended"}[m.rng.IntN(3)]}
	default:
		after = map[string]any{"credit_limit": m.rng.IntN(100000), "tags": []string{"vip", "new"}[:m.rng.IntN(3)]}
	}
	return []outbox.Event{customer.Updated(customer.Change{ID: c.id, Version: c.version, After: after})}
}

func (m *contactMix) personStep(p *mixEntity) []outbox.Event {
	p.version++
	switch {
	case !p.alive:
		m.create(p)
		return []outbox.Event{contacts.PersonEvent("created", contacts.Person{ID: p.id, Version: p.version, After: map[string]any{
			"display_name": m.personName(), "email": fmt.Sprintf("p%d@example.org", m.rng.IntN(100000)), "phone": fmt.Sprintf("+49 30 %07d", m.rng.IntN(10_000_000))}})}
	case m.rng.IntN(12) == 0:
		m.n.deletes++
		p.alive = false
		evs := m.unlinkAll(func(l *mixLink) bool { return l.pers == p.id })
		return append(evs, contacts.PersonEvent("deleted", contacts.Person{ID: p.id, Version: p.version}))
	}
	var after map[string]any
	switch m.rng.IntN(5) {
	case 0, 1:
		m.n.renames++
		after = map[string]any{"display_name": m.personName()}
	case 2:
		after = map[string]any{"email": fmt.Sprintf("p%d@example.org", m.rng.IntN(100000))}
	default: // not copied by any item: no fan-out
		after = map[string]any{"phone": fmt.Sprintf("+49 40 %07d", m.rng.IntN(10_000_000))}
	}
	return []outbox.Event{contacts.PersonEvent("updated", contacts.Person{ID: p.id, Version: p.version, After: after})}
}

func (m *contactMix) create(e *mixEntity) {
	m.n.creates++
	if e.lived {
		m.n.recreates++
	}
	e.alive, e.lived = true, true
}

func (m *contactMix) link(c, p *mixEntity) []outbox.Event {
	l := &mixLink{id: uuid.New(), cust: c.id, pers: p.id, version: 1}
	m.links = append(m.links, l)
	m.n.linked++
	return []outbox.Event{contacts.ContactEvent("created", contacts.Contact{ID: l.id, Customer: l.cust, Person: l.pers, Version: 1,
		After: map[string]any{"role": mixRoles[m.rng.IntN(len(mixRoles))], "primary": m.rng.IntN(4) == 0}})}
}

func (m *contactMix) linkStep(l *mixLink) []outbox.Event {
	l.version++
	if m.rng.IntN(10) < 3 {
		m.drop(l)
		return []outbox.Event{contacts.ContactEvent("deleted", contacts.Contact{ID: l.id, Customer: l.cust, Person: l.pers, Version: l.version})}
	}
	m.n.relinked++
	after := map[string]any{"role": mixRoles[m.rng.IntN(len(mixRoles))]}
	if m.rng.IntN(4) == 0 {
		after = map[string]any{"primary": m.rng.IntN(2) == 0}
	}
	return []outbox.Event{contacts.ContactEvent("updated", contacts.Contact{ID: l.id, Customer: l.cust, Person: l.pers, Version: l.version, After: after})}
}

func (m *contactMix) drop(l *mixLink) {
	m.n.unlinked++
	if i := slices.Index(m.links, l); i >= 0 {
		m.links = slices.Delete(m.links, i, i+1)
	}
}

// unlinkAll deletes the alive relations of which (the events come before
// their entity's delete, in its transaction).
func (m *contactMix) unlinkAll(which func(*mixLink) bool) []outbox.Event {
	var evs []outbox.Event
	for _, l := range slices.Clone(m.links) {
		if which(l) {
			l.version++
			m.drop(l)
			evs = append(evs, contacts.ContactEvent("deleted", contacts.Contact{ID: l.id, Customer: l.cust, Person: l.pers, Version: l.version}))
		}
	}
	return evs
}

// checkTruth checks the reference against the mix's own state, so that a
// fold wrong in the reference and the world alike does not pass: every
// entity is live exactly when the mix holds it alive, at its version, and
// lists exactly the alive relations that name it.
func (rw *relWorld) checkTruth(mix *contactMix) {
	t := rw.t
	t.Helper()
	mix.mu.Lock()
	defer mix.mu.Unlock()
	want := map[string][]string{} // entity id -> relation ids listed
	for _, l := range mix.links {
		want[l.cust.String()] = append(want[l.cust.String()], l.id.String())
		want[l.pers.String()] = append(want[l.pers.String()], l.id.String())
	}
	bad := 0
	for _, side := range []struct {
		alias, field string
		es           []*mixEntity
	}{{rw.refCust, "contacts", mix.customers}, {rw.refPers, "contact_of", mix.persons}} {
		docs := rw.docs(side.alias)
		for _, e := range side.es {
			d, ok := docs[e.id.String()]
			if !e.lived {
				if ok {
					t.Errorf("%s/%s: a document of an entity never created: %s", side.alias, e.id, d.Source)
					bad++
				}
				continue
			}
			var m map[string]any
			if err := json.Unmarshal(d.Source, &m); !ok || err != nil {
				t.Errorf("%s/%s: no document (%v)", side.alias, e.id, err)
				bad++
				continue
			}
			ss, _ := m[projections.MetaKey].(map[string]any)
			var listed []string
			items, _ := m[side.field].([]any)
			for _, it := range items {
				it, _ := it.(map[string]any)
				listed = append(listed, fmt.Sprint(it[projections.RelationItemID]))
			}
			w := slices.Clone(want[e.id.String()])
			slices.Sort(w)
			if m[projections.LiveKey] != e.alive || fmt.Sprint(ss["v"]) != fmt.Sprint(e.version) || !slices.Equal(listed, w) {
				if bad++; bad <= 3 {
					t.Errorf("%s/%s: the mix holds alive %v, version %d, relations %v; the reference %s", side.alias, e.id, e.alive, e.version, w, d.Source)
				}
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d documents of the reference differ from the mix's state", bad)
	}
}

// history lists the events of the outbox that reach document id: its
// entity's and those of the relations that name it (for a failure's log).
func (rw *relWorld) history(id string) string {
	rows, err := rw.db.Pool.Query(rw.ctx, `SELECT id, event_type, aggregate_id::text, payload->>'version', attempts, created_at
		FROM aa_outbox_event WHERE aggregate_id::text = $1 OR payload->>'source_entity_id' = $1 OR payload->>'target_entity_id' = $1
		ORDER BY id LIMIT 300`, id)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var b strings.Builder
	b.WriteString("its events (id, type, aggregate, version, attempts, created):")
	for rows.Next() {
		var (
			eid, attempts int64
			typ, agg, v   string
			at            time.Time
		)
		if err := rows.Scan(&eid, &typ, &agg, &v, &attempts, &at); err != nil {
			return err.Error()
		}
		fmt.Fprintf(&b, "\n  %d %s %s v%s attempts %d %s", eid, typ, agg, v, attempts, at.Format("15:04:05.000"))
	}
	return b.String()
}
