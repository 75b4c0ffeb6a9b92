package indexer_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"

	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/indexer/enginetest"
	"github.com/searchsync/searchsync/internal/testenv"
)

func newOpenSearch(t testing.TB, url string) indexer.Engine {
	t.Helper()
	e, err := indexer.New(indexer.Config{Kind: "opensearch", URLs: []string{url}}, nil)
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
		e, err := indexer.New(indexer.Config{Kind: kind}, nil)
		if err != nil || e.Kind() != want {
			t.Errorf("New(kind %q) = %v, %v; want %s", kind, e, err, want)
		}
	}
	if _, err := indexer.New(indexer.Config{Kind: "solr"}, nil); err == nil {
		t.Error("New(kind solr) succeeded")
	}
}

// Basic auth from the configuration reaches the engine, with both adapters
// (a TEST-ONLY proxy checks the credentials in front of the real node, which
// runs without security; it adds the Elasticsearch product header too).
func TestBasicAuth(t *testing.T) {
	t.Parallel()
	u, _ := url.Parse(testenv.EngineURL(t))
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ModifyResponse = func(r *http.Response) error {
		r.Header.Set("X-Elastic-Product", "Elasticsearch")
		return nil
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if user, pass, ok := r.BasicAuth(); !ok || user != "searchsync" || pass != "s3cret" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"error":{"type":"security_exception","reason":"missing authentication credentials"},"status":401}`))
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	for _, kind := range []string{"opensearch", "elasticsearch"} {
		ctx := context.Background()
		good, err := indexer.New(indexer.Config{Kind: kind, URLs: []string{srv.URL}, Username: "searchsync", Password: "s3cret"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := good.Ping(ctx); err != nil {
			t.Errorf("%s with credentials: %v", kind, err)
		}
		bad, _ := indexer.New(indexer.Config{Kind: kind, URLs: []string{srv.URL}, Username: "searchsync", Password: "wrong"}, nil)
		_, err = bad.Count(ctx, "whatever", nil)
		if ee, ok := indexer.AsEngineError(err); !ok || ee.Status != 401 || ee.Type != "security_exception" {
			t.Errorf("%s with wrong credentials: %v; want 401 security_exception", kind, err)
		}
		indexer.Close(good)
		indexer.Close(bad)
	}
}
