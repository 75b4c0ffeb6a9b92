package testenv

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"
)

// ElasticProductProxy starts a TEST-ONLY reverse proxy to target (the
// OpenSearch node) that adds X-Elastic-Product: Elasticsearch to every
// answer, so that the go-elasticsearch v8 client, which refuses servers
// without it, can be exercised against the real node where no Elasticsearch
// runs (CI). It changes nothing else: requests and bodies pass through
// unchanged. It returns the proxy's URL and stops it at cleanup.
func ElasticProductProxy(t testing.TB, target string) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ModifyResponse = func(r *http.Response) error {
		r.Header.Set("X-Elastic-Product", "Elasticsearch")
		return nil
	}
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	return srv.URL
}
