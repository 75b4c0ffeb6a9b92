package indexer_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/indexer/enginetest"
	"github.com/searchsync/searchsync/internal/testenv"
)

func newElasticsearch(t testing.TB, url string) indexer.Engine {
	t.Helper()
	e, err := indexer.New(indexer.Config{Kind: "elasticsearch", URLs: []string{url}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { indexer.Close(e) })
	return e
}

// TestElasticsearch runs the contract suite with the Elasticsearch adapter
// (go-elasticsearch/v8) against the real Elasticsearch 7.17 node of
// scripts/services.sh, and against a real Elasticsearch 8 container where a
// Docker engine is reachable.
func TestElasticsearch(t *testing.T) {
	t.Parallel()
	t.Run("Elasticsearch7", func(t *testing.T) {
		t.Parallel()
		enginetest.Run(t, testenv.ElasticsearchURL(t), newElasticsearch)
	})
	if testenv.DockerAvailable() {
		t.Run("Elasticsearch8", func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			u, stop, err := testenv.ElasticsearchContainer(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(stop)
			enginetest.Run(t, u, newElasticsearch)
		})
	}
}

// The v8 client refuses the OpenSearch node (no X-Elastic-Product header): that is a
// configuration error (wrong engine.kind), neither an engine answer nor a
// transport failure worth retrying.
func TestElasticsearchAdapterRefusesOpenSearch(t *testing.T) {
	t.Parallel()
	eng := newElasticsearch(t, testenv.EngineURL(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := eng.Ping(ctx)
	if err == nil {
		t.Fatal("ping of an OpenSearch node with the Elasticsearch client succeeded")
	}
	if _, ok := indexer.AsEngineError(err); ok || indexer.IsTransport(err) || indexer.IsTemporary(err) {
		t.Errorf("ping: %v; want a configuration error", err)
	}
	if !strings.Contains(err.Error(), "engine.kind") {
		t.Errorf("ping: %v; want a hint about engine.kind", err)
	}
}
