package search_test

import (
	"testing"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/delivery"
	"github.com/searchsync/searchsync/examples/customer"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/sink/search"
)

// A document's partial events that continue the version the consumer wrote
// last merge onto its cached state: no _mget, the same document as with
// one.
func TestStateCacheSavesTheMGet(t *testing.T) {
	b := setup(t)
	id := uuid.New()
	b.deliver(b.produce(customer.Created(ch(id, 1, map[string]any{"status": "draft", "display_name": "Ada",
		"address": map[string]any{"city": "London", "street": "St James's Square"}}))), ok)
	b.deliver(b.produce(customer.Updated(ch(id, 2, map[string]any{"status": "active"}))), ok)
	b.deliver(b.produce(customer.Updated(ch(id, 3, map[string]any{"address": map[string]any{"city": "Cambridge"}})),
		customer.Updated(ch(id, 4, map[string]any{"display_name": "Ada Lovelace"}))), ok, ok)
	doc, v := b.doc(b.alias, id)
	addr, _ := doc["address"].(map[string]any)
	if v != 4 || doc["status"] != "active" || doc["display_name"] != "Ada Lovelace" || addr["city"] != "Cambridge" || addr["street"] != "St James's Square" {
		t.Fatalf("v%d %v", v, doc)
	}
	if st := b.cons.Stats(); st.MGets != 0 || st.StateHits != 2 {
		t.Errorf("%d _mget requests and %d documents from the cache, want 0 and 2", st.MGets, st.StateHits)
	}

	// Without the cache, the same events need an _mget per batch.
	off := b.consumer(func(c *search.Config) { c.StateCache = -1 })
	other := uuid.New()
	for i, out := range [][]delivery.Outcome{
		off.Deliver(b.ctx, b.produce(customer.Created(ch(other, 1, map[string]any{"status": "draft"})))),
		off.Deliver(b.ctx, b.produce(customer.Updated(ch(other, 2, map[string]any{"status": "active"})))),
	} {
		if out[0].Kind != ok {
			t.Fatalf("batch %d without the cache: %s %s", i, out[0].Kind, out[0].Reason)
		}
	}
	if st := off.Stats(); st.MGets != 1 || st.StateHits != 0 {
		t.Errorf("without the cache: %d _mget requests and %d hits, want 1 and 0", st.MGets, st.StateHits)
	}
}

// Another writer of the document (the partition's next owner) wrote later
// versions: the events this consumer gets again are refused as stale from
// its cache, exactly as after an _mget, and its next event reads the
// document again, keeping the other writer's fields.
func TestStateCacheAfterAnotherWriter(t *testing.T) {
	b := setup(t)
	id := uuid.New()
	b.deliver(b.produce(customer.Created(ch(id, 1, map[string]any{"status": "draft", "display_name": "Grace"}))), ok)
	b.deliver(b.produce(customer.Updated(ch(id, 2, map[string]any{"status": "active"}))), ok)

	next := b.consumer(nil) // the next owner
	v3 := b.produce(customer.Updated(ch(id, 3, map[string]any{"email": "grace@example.org"})))
	v4 := b.produce(customer.Updated(ch(id, 4, map[string]any{"display_name": "Grace Hopper"})))
	for _, evs := range [][]*outbox.Event{v3, v4} {
		if out := next.Deliver(b.ctx, evs); out[0].Kind != ok {
			t.Fatalf("the other writer: %s %s", out[0].Kind, out[0].Reason)
		}
	}

	// v3 again (redelivered): continues this consumer's cached v2, and the
	// engine, holding v4, refuses it.
	b.deliver(v3, stale)
	if st := b.cons.Stats(); st.StateHits != 2 || st.MGets != 0 {
		t.Errorf("%d hits and %d _mget requests, want 2 and 0", st.StateHits, st.MGets)
	}
	// v5: the stale write dropped the entry, so the document is read again.
	b.deliver(b.produce(customer.Updated(ch(id, 5, map[string]any{"status": "retired"}))), ok)
	doc, v := b.doc(b.alias, id)
	if v != 5 || doc["status"] != "retired" || doc["display_name"] != "Grace Hopper" || doc["email"] != "grace@example.org" {
		t.Fatalf("v%d %v, want v5 with the other writer's fields", v, doc)
	}
	if st := b.cons.Stats(); st.MGets != 1 {
		t.Errorf("%d _mget requests after the stale write, want 1", st.MGets)
	}

	// A gap (v6 went to the other writer): read again, not served.
	if out := next.Deliver(b.ctx, b.produce(customer.Updated(ch(id, 6, map[string]any{"email": "hopper@example.org"})))); out[0].Kind != ok {
		t.Fatalf("v6: %s %s", out[0].Kind, out[0].Reason)
	}
	b.deliver(b.produce(customer.Updated(ch(id, 7, map[string]any{"status": "active"}))), ok)
	doc, v = b.doc(b.alias, id)
	if v != 7 || doc["email"] != "hopper@example.org" || doc["status"] != "active" {
		t.Fatalf("v%d %v, want v7 with v6's email", v, doc)
	}
	if st := b.cons.Stats(); st.MGets != 2 {
		t.Errorf("%d _mget requests after a gap, want 2", st.MGets)
	}
}
