package indexer_test

import (
	"testing"

	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/indexer/enginetest"
	"github.com/searchsync/searchsync/internal/config"
	"github.com/searchsync/searchsync/internal/testenv"
)

func newOpenSearch(t testing.TB, url string) indexer.Engine {
	t.Helper()
	e, err := indexer.New(config.Engine{Kind: "opensearch", URLs: []string{url}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { indexer.Close(e) })
	return e
}

// TestOpenSearch runs the contract suite against the real OpenSearch node.
func TestOpenSearch(t *testing.T) {
	t.Parallel()
	enginetest.Run(t, testenv.EngineURL(t), newOpenSearch)
}

func TestNewKind(t *testing.T) {
	t.Parallel()
	for kind, want := range map[string]string{"": "opensearch", "opensearch": "opensearch", "elasticsearch": "elasticsearch", "OpenSearch": "opensearch"} {
		e, err := indexer.New(config.Engine{Kind: kind}, nil)
		if err != nil || e.Kind() != want {
			t.Errorf("New(kind %q) = %v, %v; want %s", kind, e, err, want)
		}
	}
	if _, err := indexer.New(config.Engine{Kind: "solr"}, nil); err == nil {
		t.Error("New(kind solr) succeeded")
	}
}
