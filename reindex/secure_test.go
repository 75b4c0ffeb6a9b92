package reindex

import (
	"net/http"
	"testing"

	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/secret"
	"github.com/searchsync/searchsync/internal/testenv"
)

// A reindex on the secured OpenSearch node as the least-privilege writer:
// every call it makes (index and alias admin, bulk, mget, scroll, _reindex
// and its task, settings, health) is allowed by the searchsync_writer role
// of scripts/opensearch-secure.sh, over TLS verified with the test CA.
func TestReindexOnSecuredOpenSearchAsWriter(t *testing.T) {
	t.Parallel()
	sec := testenv.Secure(t)
	tc, err := sec.TLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	for _, clientSeed := range []bool{false, true} {
		t.Run(seedName(clientSeed), func(t *testing.T) {
			t.Parallel()
			tr := http.DefaultTransport.(*http.Transport).Clone()
			tr.TLSClientConfig = tc.Clone()
			hc := &http.Client{Transport: tr}
			t.Cleanup(tr.CloseIdleConnections)
			ecfg := indexer.Config{URLs: []string{sec.URL}, Username: sec.WriterUser, Password: secret.Ref(sec.WriterPassword)}
			reindexOn(t, setupEngine(t, ecfg, hc), clientSeed)
		})
	}
}
