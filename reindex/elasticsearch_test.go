package reindex

import (
	"cmp"
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/mapping"
)

// A reindex (mapping change after compaction) runs the same against the real
// Elasticsearch 7.17 node: the Engine and Admin seams through go-elasticsearch/v8
// (scroll, _reindex and its task, settings, health included).
// Both seeds: the engine's _reindex and the client-side scroll and bulk.
func TestReindexOnElasticsearch(t *testing.T) {
	t.Parallel()
	for _, clientSeed := range []bool{false, true} {
		t.Run(seedName(clientSeed), func(t *testing.T) {
			t.Parallel()
			ecfg := indexer.Config{Kind: "elasticsearch", URLs: []string{testenv.ElasticsearchURL(t)}}
			reindexOn(t, setupEngine(t, ecfg, nil), clientSeed)
		})
	}
}

func seedName(clientSeed bool) string {
	if clientSeed {
		return "client_seed"
	}
	return "server_side_seed"
}

// reindexOn builds a live index from 1500 events, compacts half of them,
// writes 300 more and reindexes with a mapping change through b.eng.
func reindexOn(t *testing.T, b *bundle, clientSeed bool) {
	t.Helper()
	b.write(1500)
	b.dispatchAll()
	old := b.buildLive(b.def(nil))
	b.checkTruth(b.alias)
	t.Logf("compaction removed %d events", b.compact(0.5))
	b.write(300)
	b.dispatchAll()
	lcfg := b.config(b.def(nil))
	live, err := New(lcfg)
	if err != nil {
		t.Fatal(err)
	}
	live.target = old
	live.update(func(p *Progress) { p.LastID = 0 })
	if err := live.replay(b.ctx); err != nil {
		t.Fatal(err)
	}

	def := b.def(emailAsText)
	cfg := b.config(def)
	cfg.ClientSeed = clientSeed
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Run(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.OldIndex != old || res.NewIndex != mapping.PhysicalName(b.alias, 2) || !res.Verify.OK || res.Verify.Compared == 0 {
		t.Fatalf("result: %+v\n%s", res, res.Verify)
	}
	targets, err := b.eng.AliasTargets(b.ctx, b.alias)
	if err != nil || len(targets) != 1 || targets[0] != res.NewIndex {
		t.Fatalf("alias points to %v (%v)", targets, err)
	}
	b.checkTruth(b.alias)
	if st, err := mapping.Check(b.ctx, b.eng, def); err != nil || st.Drift {
		t.Fatalf("after the reindex: %+v %v", st, err)
	}
}

// setupEngine is setup with the bundle's engine on another cluster (ecfg,
// hc as indexer.New takes them). The bundle's indexes there are deleted at
// cleanup.
func setupEngine(t *testing.T, ecfg indexer.Config, hc *http.Client) *bundle {
	t.Helper()
	b := setup(t)
	b.ecfg = ecfg
	eng, err := indexer.New(b.ecfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	if want := cmp.Or(ecfg.Kind, "opensearch"); eng.Kind() != want {
		t.Fatalf("engine kind %s, want %s", eng.Kind(), want)
	}
	b.eng = eng
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for n := 1; n <= 3; n++ {
			_ = eng.DeleteIndex(c, mapping.PhysicalName(b.alias, n))
		}
		indexer.Close(eng)
	})
	return b
}
