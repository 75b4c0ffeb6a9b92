package search_test

import (
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/examples/customer"
	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/testenv"
)

// The consumer works the same through the Elasticsearch adapter against the
// real Elasticsearch 7.17 node: index creation, documents, partial merges
// (one _mget), stale writes, soft deletes, mapping poison.
func TestThroughElasticsearchAdapter(t *testing.T) {
	b := setupOn(t, indexer.Config{Kind: "elasticsearch", URLs: []string{testenv.ElasticsearchURL(t)}})
	if b.eng.Kind() != "elasticsearch" {
		t.Fatalf("kind %s", b.eng.Kind())
	}

	id, bad := uuid.New(), uuid.New()
	b.deliver(b.produce(customer.Created(ch(id, 1, map[string]any{"status": "draft", "email": "e@x"}))), ok)
	b.deliver(b.produce(
		customer.Updated(ch(id, 2, map[string]any{"status": "active"})),
		customer.Created(ch(bad, 1, map[string]any{"credit_limit": "lots"})),
	), ok, poison)
	b.deliver(b.produce(customer.Updated(ch(id, 1, map[string]any{"status": "old"}))), stale)
	doc, v := b.doc(b.alias, id)
	if v != 2 || doc["status"] != "active" || doc["email"] != "e@x" {
		t.Fatalf("v%d %v", v, doc)
	}
	b.deliver(b.produce(customer.Deleted(ch(id, 3, nil))), ok)
	if n := b.searchable(b.alias, ""); n != 0 {
		t.Fatalf("%d visible after soft delete", n)
	}
	out := b.deliver(b.produce(customer.Created(ch(bad, 2, map[string]any{"credit_limit": "lots"}))), poison)
	if !strings.Contains(out[0].Reason, "mapper_parsing_exception") {
		t.Fatalf("reason %q", out[0].Reason)
	}
}
