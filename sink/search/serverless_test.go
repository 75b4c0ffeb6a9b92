package search_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/examples/customer"
	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/sink/search"
)

// TestServerlessConsumer runs the search consumer with engine.aws.service
// aoss through a proxy that refuses what an Amazon OpenSearch Serverless
// search collection refuses: events reach the index under their aggregate
// ids with their versions as external versions (a stale one changes
// nothing), the access check and a paused consumer's probe pass, the
// commit → searchable measurement stops with one WARN (Serverless serves no
// index stats), and nothing Serverless refuses is sent but the ping.
func TestServerlessConsumer(t *testing.T) {
	// The AWS SDK's chain finds these credentials; the subtest runs in
	// parallel with the other tests of the package once this one returns.
	dir := t.TempDir()
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDSEARCHSYNCAOSS")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "serverless-consumer-test")
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "credentials"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Run("search collection", func(t *testing.T) {
		proxy := testenv.NewServerlessProxy(t, testenv.SearchCollection)
		b := setupOn(t, indexer.Config{Kind: "opensearch", URLs: []string{proxy.URL},
			AWS: &indexer.AWSConfig{Region: "eu-west-1", Service: "aoss"}})

		var logs testenv.LogBuffer
		s, err := search.NewSearchable(search.SearchableConfig{Engine: b.eng, Observe: func(string, float64) {},
			Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		cons := b.consumer(func(c *search.Config) { c.Searchable = s })
		if err := cons.CheckAccess(b.ctx); err != nil {
			t.Fatalf("access check: %v", err)
		}
		text := logs.String()
		if s.Disabled() == "" || strings.Count(text, "level=WARN") != 1 || !strings.Contains(text, "OpenSearch Serverless serves no index stats") {
			t.Errorf("searchable on Serverless: disabled %q; log:\n%s", s.Disabled(), text)
		}

		id := uuid.New()
		created := b.produce(customer.Created(ch(id, 1, map[string]any{"status": "draft", "display_name": "Ada Lovelace"})))
		b.cons = cons
		b.deliver(created, ok)
		upd := b.produce(customer.Updated(customer.Change{ID: id, Version: 2,
			Before: map[string]any{"status": "draft"}, After: map[string]any{"status": "active"}}))
		b.deliver(upd, ok)
		b.deliver(b.produce(customer.Updated(ch(id, 1, map[string]any{"status": "blocked"}))), stale)
		doc, v := b.doc(b.alias, id)
		if v != 2 || doc["status"] != "active" || doc["display_name"] != "Ada Lovelace" {
			t.Fatalf("through Serverless: v%d %v", v, doc)
		}
		// Searchable on the engine's own refresh (no _refresh on Serverless).
		deadline := time.Now().Add(30 * time.Second)
		for {
			n, err := b.eng.Count(b.ctx, b.alias, json.RawMessage(`{"query":{"term":{"status":"active"}}}`))
			if err != nil {
				t.Fatal(err)
			}
			if n == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("not searchable within 30s: %d", n)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err := cons.Probe(b.ctx); err != nil {
			t.Fatalf("probe of a paused consumer: %v", err)
		}
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		defer cancel()
		s.Poll(ctx)
		for _, r := range proxy.Refused() {
			if r != "HEAD /" {
				t.Errorf("sent a request Serverless refuses: %s (all: %q)", r, proxy.Refused())
			}
		}
	})
}
