package search_test

import (
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/delivery"
	"github.com/searchsync/searchsync/examples/customer"
	"github.com/searchsync/searchsync/outbox"
)

const (
	ok       = delivery.OK
	stale    = delivery.Stale
	poison   = delivery.Poison
	notTried = delivery.NotAttempted
)

// Events written by the producer API become documents; a diff payload never
// drops fields it did not mention; an older version after a newer one and
// the same event twice change nothing.
func TestEventsBecomeDocuments(t *testing.T) {
	b := setup(t)
	id := uuid.New()
	created := b.produce(customer.Created(ch(id, 1, map[string]any{"status": "draft", "display_name": "Ada Lovelace",
		"email": "ada@example.org", "address": map[string]any{"city": "London", "street": "St James's Square"}})))
	b.deliver(created, ok)
	doc, v := b.doc(b.alias, id)
	if v != 1 || doc["display_name"] != "Ada Lovelace" || doc["code"] != "C-"+id.String()[:8] || doc["tenant_key"] != "public" || doc["deleted"] != false {
		t.Fatalf("created: v%d %v", v, doc)
	}

	// A diff payload: only status and the city change.
	upd := b.produce(customer.Updated(customer.Change{ID: id, Version: 2,
		Before: map[string]any{"status": "draft", "address": map[string]any{"city": "London"}},
		After:  map[string]any{"status": "active", "address": map[string]any{"city": "Cambridge"}}}))
	b.deliver(upd, ok)
	doc, v = b.doc(b.alias, id)
	addr, _ := doc["address"].(map[string]any)
	if v != 2 || doc["status"] != "active" || doc["email"] != "ada@example.org" || doc["display_name"] != "Ada Lovelace" ||
		addr["city"] != "Cambridge" || addr["street"] != "St James's Square" {
		t.Fatalf("after diff: v%d %v", v, doc)
	}

	// The same event again, and an older version after the newer one.
	b.deliver(upd, stale)
	old := b.produce(customer.Updated(ch(id, 1, map[string]any{"status": "blocked"})))
	b.deliver(old, stale)
	doc, v = b.doc(b.alias, id)
	if v != 2 || doc["status"] != "active" {
		t.Fatalf("stale writes changed the document: v%d %v", v, doc)
	}
	if n := b.searchable(b.alias, `{"term":{"status":"active"}}`); n != 1 {
		t.Fatalf("searchable: %d", n)
	}

	// schema_version 1 (name instead of display_name) is upcast.
	v1 := customer.Updated(customer.Change{ID: id, Version: 3, Schema: 1, After: map[string]any{"name": "Augusta Ada King"}})
	b.deliver(b.produce(v1), ok)
	doc, _ = b.doc(b.alias, id)
	if doc["display_name"] != "Augusta Ada King" || doc["name"] != nil {
		t.Fatalf("upcast: %v", doc)
	}
}

// In soft-delete mode a delete leaves a versioned tombstone that the alias
// hides, and a stale write after it does not bring the document back.
func TestSoftDelete(t *testing.T) {
	b := setup(t)
	id, other := uuid.New(), uuid.New()
	b.deliver(b.produce(
		customer.Created(ch(id, 1, map[string]any{"status": "active", "display_name": "Grace"})),
		customer.Created(ch(other, 1, map[string]any{"status": "active"})),
	), ok, ok)
	b.deliver(b.produce(customer.Deleted(ch(id, 5, nil))), ok)

	if n := b.searchable(b.alias, ""); n != 1 {
		t.Fatalf("alias shows %d documents, want 1 (the tombstone hidden)", n)
	}
	doc, v := b.doc(b.alias, id)
	if v != 5 || doc["deleted"] != true || doc["display_name"] != "Grace" {
		t.Fatalf("tombstone: v%d %v", v, doc)
	}
	// A stale update and a stale re-create (retries, replays) arrive late.
	out := b.deliver(b.produce(
		customer.Updated(ch(id, 4, map[string]any{"status": "blocked"})),
		customer.Created(ch(id, 3, map[string]any{"status": "active"})),
	), stale, stale)
	if !strings.Contains(out[0].Reason, "version") {
		t.Fatalf("stale reason %q", out[0].Reason)
	}
	if n := b.searchable(b.alias, ""); n != 1 {
		t.Fatalf("stale write resurrected the document: %d visible", n)
	}
	// A newer version (a real re-creation) does.
	b.deliver(b.produce(customer.Created(ch(id, 6, map[string]any{"status": "active"}))), ok)
	if n := b.searchable(b.alias, ""); n != 2 {
		t.Fatalf("re-created document not visible: %d", n)
	}
}

// Hard deletes are versioned deletes.
func TestHardDelete(t *testing.T) {
	b := setup(t, hardDeletes)
	id := uuid.New()
	b.deliver(b.produce(customer.Created(ch(id, 1, map[string]any{"status": "active"}))), ok)
	b.deliver(b.produce(customer.Deleted(ch(id, 2, nil))), ok)
	if doc, _ := b.doc(b.alias, id); doc != nil {
		t.Fatalf("not deleted: %v", doc)
	}
	// Within index.gc_deletes the tombstone version still rejects a stale write.
	b.deliver(b.produce(customer.Updated(ch(id, 1, map[string]any{"status": "x"}))), stale)
	if doc, _ := b.doc(b.alias, id); doc != nil {
		t.Fatalf("stale write resurrected: %v", doc)
	}
}

// Several events of one aggregate in a batch become one write with the last
// event's version; every event is OK.
func TestCoalescing(t *testing.T) {
	b := setup(t)
	id := uuid.New()
	evs := []customer.Change{ch(id, 1, map[string]any{"status": "draft", "email": "a@x"})}
	for v := int64(2); v <= 10; v++ {
		evs = append(evs, ch(id, v, map[string]any{"credit_limit": v * 100}))
	}
	var batch = b.produce(customer.Created(evs[0]))
	for _, c := range evs[1:] {
		batch = append(batch, b.produce(customer.Updated(c))...)
	}
	before := b.cons.Stats()
	b.deliver(batch, ok, ok, ok, ok, ok, ok, ok, ok, ok, ok)
	after := b.cons.Stats()
	if w := after.Writes - before.Writes; w != 1 {
		t.Fatalf("%d writes for one aggregate", w)
	}
	if c := after.Coalesced - before.Coalesced; c != 9 {
		t.Fatalf("coalesced %d", c)
	}
	doc, v := b.doc(b.alias, id)
	if v != 10 || doc["credit_limit"] != float64(1000) || doc["email"] != "a@x" {
		t.Fatalf("v%d %v", v, doc)
	}
}

// Poison — a field of the wrong type for the mapping, a missing version,
// schema_version 99 — fails with the reason while other aggregates flow; a
// poison event in the middle of a coalesced run still lets the events before
// it through.
func TestPoison(t *testing.T) {
	b := setup(t)
	a, m, s, good := uuid.New(), uuid.New(), uuid.New(), uuid.New()
	noVersion := ch(a, 3, map[string]any{"status": "x"})
	noVersion.NoVersion = true
	schema99 := ch(s, 1, map[string]any{"status": "x"})
	schema99.Schema = 99
	batch := b.produce(
		customer.Created(ch(a, 1, map[string]any{"status": "draft"})),      // 0 ok
		customer.Updated(ch(a, 2, map[string]any{"status": "active"})),     // 1 ok
		customer.Updated(noVersion),                                        // 2 poison: no version
		customer.Updated(ch(a, 4, map[string]any{"status": "blocked"})),    // 3 not attempted
		customer.Created(ch(m, 1, map[string]any{"status": "draft"})),      // 4 ok
		customer.Updated(ch(m, 2, map[string]any{"credit_limit": "lots"})), // 5 poison: mapping
		customer.Updated(ch(m, 3, map[string]any{"status": "active"})),     // 6 not attempted
		customer.Created(schema99),                                         // 7 poison: schema 99
		customer.Created(ch(good, 1, map[string]any{"status": "active"})),  // 8 ok
	)
	out := b.deliver(batch, ok, ok, poison, notTried, ok, poison, notTried, poison, ok)
	for i, want := range map[int]string{
		2: `no version at "version"`,
		5: "mapper_parsing_exception",
		7: "schema_version 99 is newer than any upcaster or projection knows",
	} {
		if !strings.Contains(out[i].Reason, want) {
			t.Errorf("event %d reason %q, want %q", i, out[i].Reason, want)
		}
	}
	if doc, v := b.doc(b.alias, a); v != 2 || doc["status"] != "active" {
		t.Errorf("aggregate a: v%d %v (want the state up to the last good event)", v, doc)
	}
	if doc, v := b.doc(b.alias, m); v != 1 || doc["status"] != "draft" {
		t.Errorf("aggregate m: v%d %v", v, doc)
	}
	if doc, _ := b.doc(b.alias, s); doc != nil {
		t.Errorf("schema 99 indexed: %v", doc)
	}
	if doc, v := b.doc(b.alias, good); v != 1 || doc == nil {
		t.Errorf("good aggregate: v%d %v", v, doc)
	}
	// Negative and non-integer versions.
	neg, str := ch(uuid.New(), 0, nil), ch(uuid.New(), 0, nil)
	neg.RawVersion, str.RawVersion = -3, "7"
	out = b.deliver(b.produce(customer.Created(neg), customer.Created(str)), poison, poison)
	if !strings.Contains(out[0].Reason, "negative") || !strings.Contains(out[1].Reason, "not an integer") {
		t.Errorf("reasons %q / %q", out[0].Reason, out[1].Reason)
	}
}

// Shared tenancy: one index, the tenant key in every document.
func TestTenancyShared(t *testing.T) {
	b := setup(t)
	c1, c2 := ch(uuid.New(), 1, map[string]any{"status": "a"}), ch(uuid.New(), 1, map[string]any{"status": "a"})
	c1.Tenant, c2.Tenant = "acme", "globex"
	b.deliver(b.produce(customer.Created(c1), customer.Created(c2)), ok, ok)
	for _, tenant := range []string{"acme", "globex"} {
		if n := b.searchable(b.alias, `{"term":{"tenant_key":"`+tenant+`"}}`); n != 1 {
			t.Fatalf("tenant %s: %d documents", tenant, n)
		}
	}
}

// Per-tenant tenancy: one alias and index per tenant, created on the first
// event; a tenant key that cannot name an index is poison.
func TestTenancyPerTenant(t *testing.T) {
	b := setup(t, perTenant)
	c1, c2, c3 := ch(uuid.New(), 1, nil), ch(uuid.New(), 1, nil), ch(uuid.New(), 1, nil)
	c1.Tenant, c2.Tenant, c3.Tenant = "acme", "globex", "Not A Tenant!"
	out := b.deliver(b.produce(customer.Created(c1), customer.Created(c2), customer.Created(c3)), ok, ok, poison)
	if !strings.Contains(out[2].Reason, `tenant key "Not A Tenant!" cannot name an index`) {
		t.Fatalf("reason %q", out[2].Reason)
	}
	for _, tenant := range []string{"acme", "globex"} {
		alias := b.alias + "_" + tenant
		targets, err := b.eng.AliasTargets(b.ctx, alias)
		if err != nil || len(targets) != 1 || targets[0] != alias+"_v1" {
			t.Fatalf("alias %s: %v %v", alias, targets, err)
		}
		if n := b.searchable(alias, ""); n != 1 {
			t.Fatalf("%s: %d documents", alias, n)
		}
	}
	if targets, _ := b.eng.AliasTargets(b.ctx, b.alias); len(targets) != 0 {
		t.Fatalf("per-tenant mode created the shared alias: %v", targets)
	}
}

// A batch that replays an old full-state event followed by a new partial
// one, while the engine holds a version in between: the old event is stale
// and the partial one merges onto the engine's state, as if delivered one by
// one.
func TestBatchOverNewerState(t *testing.T) {
	b := setup(t)
	id := uuid.New()
	v1 := customer.Created(ch(id, 1, map[string]any{"status": "draft", "email": "old@x"}))
	b.deliver(b.produce(v1), ok)
	b.deliver(b.produce(customer.Updated(ch(id, 5, map[string]any{"email": "new@x"}))), ok)
	b.deliver(b.produce(
		customer.Created(ch(id, 4, map[string]any{"status": "draft", "email": "old@x"})),
		customer.Updated(ch(id, 6, map[string]any{"status": "active"})),
	), stale, ok)
	doc, v := b.doc(b.alias, id)
	if v != 6 || doc["email"] != "new@x" || doc["status"] != "active" {
		t.Fatalf("v%d %v", v, doc)
	}
}

// A batch large enough to be projected and folded on several goroutines:
// 100 customers × (created + 2 partial updates) in one Deliver, interleaved.
func TestLargeBatch(t *testing.T) {
	b := setup(t)
	ids := make([]uuid.UUID, 100)
	var evs []outbox.Event
	for i := range ids {
		ids[i] = uuid.New()
		evs = append(evs, customer.Created(ch(ids[i], 1, map[string]any{"status": "draft", "email": "e@x"})))
	}
	for v := int64(2); v <= 3; v++ {
		for i := range ids {
			evs = append(evs, customer.Updated(ch(ids[i], v, map[string]any{"credit_limit": v})))
		}
	}
	batch := b.produce(evs...)
	want := make([]delivery.Kind, len(batch))
	for i := range want {
		want[i] = ok
	}
	b.deliver(batch, want...)
	if n := b.searchable(b.alias, `{"bool":{"filter":[{"term":{"credit_limit":3}},{"term":{"email":"e@x"}}]}}`); n != 100 {
		t.Fatalf("%d documents at their final state", n)
	}
}
