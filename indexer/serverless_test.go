package indexer_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/searchsync/searchsync/delivery"
	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/testenv"
)

// serverlessEngine is an engine configured for Amazon OpenSearch
// Serverless (service aoss) whose requests pass the independent SigV4
// verifier and then a proxy that refuses what a collection of type c
// refuses, in front of the real node.
func serverlessEngine(t *testing.T, c testenv.Collection) (indexer.Engine, *testenv.ServerlessProxy, indexer.Config) {
	const secretKey = "serverless-test-secret/K7MDENG+bPxRfiCY"
	awsProfile(t, "searchsync-aoss", "AKIDSEARCHSYNCAOSS", secretKey)
	proxy := testenv.NewServerlessProxy(t, c)
	gate, _, _ := sigV4Gate(t, proxy.URL, secretKey)
	cfg := indexer.Config{Kind: "opensearch", URLs: []string{gate},
		AWS: &indexer.AWSConfig{Region: "eu-west-1", Service: "aoss", Profile: "searchsync-aoss"}}
	eng, err := indexer.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { indexer.Close(eng) })
	return eng, proxy, cfg
}

// onlyRefused fails t when the proxy refused anything but the ping (HEAD
// /, which Serverless answers 404 and the engine takes as its answer) and
// the requests expected.
func onlyRefused(t *testing.T, refused []string, expected ...string) {
	t.Helper()
	for _, r := range refused {
		if r != "HEAD /" && !slices.Contains(expected, r) {
			t.Errorf("the seam sent a request Serverless refuses: %s (all refused: %q)", r, refused)
		}
	}
}

// TestServerlessSearchCollection runs the Engine and Admin seam against a
// search collection: what searchsync delivers with (index and alias set-up,
// _bulk with ids and external versions, _mget, search, count, the access
// check, the ping and the blocks of a paused consumer's probe) works and
// sends only what Serverless serves; what Serverless lacks (_refresh, the
// cluster state and health, index stats, scroll, _reindex, tasks) is
// refused by the seam with an UnsupportedError, unsent.
func TestServerlessSearchCollection(t *testing.T) {
	eng, proxy, cfg := serverlessEngine(t, testenv.SearchCollection)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if !indexer.Serverless(eng) {
		t.Fatal("engine.aws.service aoss: not taken for Serverless")
	}

	// The proxy refuses what Serverless refuses, as Serverless answers.
	rt, err := indexer.Transport(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ method, path string }{
		{http.MethodGet, "/"}, {http.MethodGet, "/_cluster/health"}, {http.MethodPost, "/_refresh"},
		{http.MethodGet, "/_cluster/state/blocks"}, {http.MethodGet, "/_stats"}, {http.MethodPost, "/_reindex"},
		{http.MethodPost, "/_search/scroll"}, {http.MethodGet, "/_tasks"}, {http.MethodGet, "/_plugins/_security/authinfo"},
	} {
		req, _ := http.NewRequestWithContext(ctx, c.method, cfg.URLs[0]+c.path, nil)
		res, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusNotFound {
			t.Errorf("%s %s through the proxy: %d, want 404 as Serverless answers", c.method, c.path, res.StatusCode)
		}
	}
	refusedByProxy := len(proxy.Refused())

	index := testenv.Name("aoss")
	alias := index + "_a"
	if err := eng.CreateIndex(ctx, index, json.RawMessage(`{"settings":{"number_of_shards":1,"number_of_replicas":0},"aliases":{"`+alias+`":{}}}`)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.DeleteIndex(context.Background(), index) })
	if err := eng.Ping(ctx); err != nil {
		t.Fatalf("ping: %v", err)
	}
	if blocks, err := eng.WriteBlocks(ctx, index); err != nil || len(blocks) != 0 {
		t.Fatalf("write blocks: %v %v", blocks, err)
	}
	if err := indexer.CheckAccess(ctx, eng, alias); err != nil {
		t.Fatalf("access check: %v", err)
	}
	if who := indexer.WhoAmI(ctx, eng); who != "" {
		t.Errorf("who am I: %q, want none on Serverless", who)
	}
	if targets, err := eng.AliasTargets(ctx, alias); err != nil || !slices.Equal(targets, []string{index}) {
		t.Fatalf("alias targets: %v %v", targets, err)
	}
	if info, err := eng.GetIndex(ctx, index); err != nil || info == nil {
		t.Fatalf("get index: %v %v", info, err)
	}

	op := func(v int64, name string) indexer.BulkOp {
		return indexer.BulkOp{Type: indexer.OpIndex, Index: alias, ID: "c1", Version: v, RequireAlias: true, Doc: json.RawMessage(`{"name":"` + name + `"}`)}
	}
	res, err := eng.Bulk(ctx, []indexer.BulkOp{op(3, "Ada"), op(2, "older")})
	if err != nil || res[0].Status != http.StatusCreated || res[1].Status != http.StatusConflict {
		t.Fatalf("bulk with external versions: %v %+v", err, res)
	}
	docs, err := eng.MGet(ctx, alias, []string{"c1"})
	if err != nil || docs["c1"].Version != 3 || !strings.Contains(string(docs["c1"].Source), "Ada") {
		t.Fatalf("mget: %v %+v", err, docs)
	}
	// No _refresh: the document becomes searchable on the engine's own
	// schedule (Serverless: seconds), waited for with a deadline.
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := eng.Count(ctx, alias, json.RawMessage(`{"query":{"term":{"_id":"c1"}}}`))
		if err != nil {
			t.Fatal(err)
		}
		sr, err := eng.Search(ctx, alias, json.RawMessage(`{"query":{"term":{"_id":"c1"}}}`))
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 && len(sr.Hits) == 1 && sr.Hits[0].Version == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not searchable within 30s: count %d, hits %+v", n, sr.Hits)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := eng.UpdateAliases(ctx, []indexer.AliasAction{{Add: true, Index: index, Alias: index + "_b"}}); err != nil {
		t.Fatalf("update aliases: %v", err)
	}
	adm := eng.(indexer.Admin)
	if _, total, err := adm.GroupCounts(ctx, alias, nil, nil); err != nil || total != 1 {
		t.Fatalf("group counts: %d %v", total, err)
	}
	if err := adm.PutSettings(ctx, index, map[string]any{"max_result_window": 20000}); err != nil {
		t.Fatalf("put settings: %v", err)
	}

	// What Serverless lacks: refused by the seam, not sent.
	for name, call := range map[string]func() error{
		"refresh":   func() error { return eng.Refresh(ctx, index) },
		"refreshes": func() error { _, err := adm.Refreshes(ctx, index); return err },
		"scroll": func() error {
			return adm.Scroll(ctx, index, nil, 10, nil, func(int64, []indexer.ScrollHit) error { return nil })
		},
		"health": func() error { _, _, err := adm.Health(ctx, index, "", 0); return err },
		"start copy": func() error {
			_, err := adm.StartCopy(ctx, indexer.Copy{Source: index, Dest: index + "_x"})
			return err
		},
		"task":        func() error { _, err := adm.Task(ctx, "n:1", 0); return err },
		"cancel task": func() error { return adm.CancelTask(ctx, "n:1") },
	} {
		err := call()
		var ue *indexer.UnsupportedError
		if !errors.As(err, &ue) || indexer.IsTemporary(err) || !strings.Contains(err.Error(), "Amazon OpenSearch Serverless") {
			t.Errorf("%s: %v, want an UnsupportedError", name, err)
		}
	}
	onlyRefused(t, proxy.Refused()[refusedByProxy:])
}

// TestServerlessTimeSeriesCollection: a collection that refuses explicit
// document ids (time series, vector search) stops the start-up access
// check with a ConfigError that names the cause and the fix, and a bulk
// item refused that way is Unavailable (the collection), never poison (the
// event).
func TestServerlessTimeSeriesCollection(t *testing.T) {
	eng, proxy, _ := serverlessEngine(t, testenv.TimeSeriesCollection)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	index := testenv.Name("aossts")
	alias := index + "_a"
	if err := eng.CreateIndex(ctx, index, json.RawMessage(`{"settings":{"number_of_shards":1,"number_of_replicas":0},"aliases":{"`+alias+`":{}}}`)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.DeleteIndex(context.Background(), index) })

	err := indexer.CheckAccess(ctx, eng, alias)
	var ce *indexer.ConfigError
	if !errors.As(err, &ce) || indexer.IsTemporary(err) || !strings.Contains(err.Error(), "Document ID is not supported") ||
		!strings.Contains(err.Error(), "only collections of type search allow") {
		t.Fatalf("access check on a time series collection: %v, want a ConfigError naming the collection type", err)
	}

	op := indexer.BulkOp{Type: indexer.OpIndex, Index: alias, ID: "c1", Version: 1, RequireAlias: true, Doc: json.RawMessage(`{"name":"Ada"}`)}
	res, err := eng.Bulk(ctx, []indexer.BulkOp{op})
	if err != nil || res[0].Status != http.StatusBadRequest {
		t.Fatalf("bulk with an id: %v %+v", err, res)
	}
	o := indexer.Classify(op, res[0])
	if o.Kind != delivery.Unavailable || !strings.Contains(o.Reason, "point engine.urls at a search collection") {
		t.Fatalf("classified %s %q, want Unavailable naming the collection type", o.Kind, o.Reason)
	}
	if docs, err := eng.MGet(ctx, alias, []string{"c1"}); err != nil || len(docs) != 0 {
		t.Fatalf("the refused document was written: %v %v", docs, err)
	}
	onlyRefused(t, proxy.Refused(), "POST /_bulk (document ids)")
}
