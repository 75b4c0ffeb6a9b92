// Package enginetest is the contract suite every indexer.Engine adapter must
// pass, run against a real engine: index definitions and _meta, aliases and
// atomic swaps, versioned bulk writes (external versions, conflicts, stale
// deletes, mapping rejections read per item), _mget, refresh, search and
// count through a filtered alias, write blocks, transport failures when
// the engine is down, and indexer.Admin (admin.go: scroll, group counts,
// settings, health, the server-side copy task).
package enginetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/testenv"
)

// NewEngine returns an adapter that talks to the engine at url.
type NewEngine func(t testing.TB, url string) indexer.Engine

// Run runs the contract suite against the engine at url. Every test creates
// its own uniquely named indexes and deletes them at cleanup, and runs in
// parallel.
func Run(t *testing.T, url string, newEngine NewEngine) {
	s := &suite{url: url, newEngine: newEngine}
	t.Run("Ping", s.testPing)
	t.Run("WriteBlocks", s.testWriteBlocks)
	t.Run("IndexDefinition", s.testIndexDefinition)
	t.Run("Aliases", s.testAliases)
	t.Run("BulkVersions", s.testBulkVersions)
	t.Run("BulkMappingRejection", s.testBulkMappingRejection)
	t.Run("BulkRequireAlias", s.testBulkRequireAlias)
	t.Run("MGet", s.testMGet)
	t.Run("SearchThroughFilteredAlias", s.testSearchThroughFilteredAlias)
	t.Run("EngineDown", s.testEngineDown)
	t.Run("EngineComesBack", s.testEngineComesBack)
	s.runAdmin(t)
}

type suite struct {
	url       string
	newEngine NewEngine
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

// Definition is the index body the suite uses: settings, mappings with
// _meta, and a soft-delete flag for filtered aliases.
func definition(hash string) json.RawMessage {
	return json.RawMessage(`{
  "settings": {"index": {"number_of_shards": 1, "number_of_replicas": 0}},
  "mappings": {
    "_meta": {"definition_hash": "` + hash + `"},
    "properties": {
      "name":    {"type": "text"},
      "age":     {"type": "integer"},
      "tenant":  {"type": "keyword"},
      "deleted": {"type": "boolean"}
    }
  }
}`)
}

// newIndex creates a uniquely named index and deletes it at cleanup.
func (s *suite) newIndex(t *testing.T, eng indexer.Engine, hash string) string {
	t.Helper()
	name := testenv.Name("ct")
	if err := eng.CreateIndex(ctx(t), name, definition(hash)); err != nil {
		t.Fatalf("create index %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := eng.DeleteIndex(context.Background(), name); err != nil {
			t.Errorf("delete index %s: %v", name, err)
		}
	})
	return name
}

// testBulkRequireAlias: a write through an alias that does not exist fails
// and creates nothing (instead of auto-creating an index named like the
// alias); through an existing alias it reaches the index.
func (s *suite) testBulkRequireAlias(t *testing.T) {
	t.Parallel()
	eng := s.newEngine(t, s.url)
	missing := testenv.Name("noalias")
	res, err := eng.Bulk(ctx(t), []indexer.BulkOp{{Type: indexer.OpIndex, Index: missing, ID: "1", Version: 1, Doc: json.RawMessage(`{"name":"x"}`), RequireAlias: true}})
	if err != nil {
		t.Fatalf("bulk: %v", err)
	}
	if res[0].Status != 404 {
		t.Errorf("write through a missing alias: %+v, want 404", res[0])
	}
	if info, err := eng.GetIndex(ctx(t), missing); err != nil || info != nil {
		t.Errorf("index %s exists after a write with require_alias: %+v, %v", missing, info, err)
	}
	idx := s.newIndex(t, eng, "h")
	alias := idx + "_alias"
	if err := eng.UpdateAliases(ctx(t), []indexer.AliasAction{{Add: true, Index: idx, Alias: alias}}); err != nil {
		t.Fatal(err)
	}
	res, err = eng.Bulk(ctx(t), []indexer.BulkOp{{Type: indexer.OpIndex, Index: alias, ID: "1", Version: 1, Doc: json.RawMessage(`{"name":"x"}`), RequireAlias: true}})
	if err != nil || res[0].Status/100 != 2 {
		t.Fatalf("write through an existing alias: %+v, %v", res, err)
	}
}

// testWriteBlocks: an index with read_only_allow_delete (what the disk
// flood-stage watermark sets) is reported, with the engine's description;
// another index and the same index after the block is lifted are not.
func (s *suite) testWriteBlocks(t *testing.T) {
	t.Parallel()
	eng := s.newEngine(t, s.url)
	blocked, free := s.newIndex(t, eng, "h"), s.newIndex(t, eng, "h")
	if bs, err := eng.WriteBlocks(ctx(t), blocked, free); err != nil || len(bs) != 0 {
		t.Fatalf("blocks before any was set: %v, %v; want none", bs, err)
	}
	s.setBlock(t, blocked, true)
	t.Cleanup(func() { s.setBlock(t, blocked, false) })
	bs, err := eng.WriteBlocks(ctx(t), blocked, free)
	if err != nil || len(bs) != 1 || bs[0].Index != blocked || !strings.Contains(bs[0].Description, "read-only") {
		t.Fatalf("blocks with read_only_allow_delete on %s: %v, %v; want that one block", blocked, bs, err)
	}
	if bs, err := eng.WriteBlocks(ctx(t), free); err != nil || len(bs) != 0 {
		t.Errorf("blocks of %s: %v, %v; want none (the block is another index's)", free, bs, err)
	}
	s.setBlock(t, blocked, false)
	if bs, err := eng.WriteBlocks(ctx(t), blocked); err != nil || len(bs) != 0 {
		t.Errorf("blocks after lifting it: %v, %v; want none", bs, err)
	}
}

// setBlock sets or clears the block on index of the suite's engine.
func (s *suite) setBlock(t *testing.T, index string, on bool) {
	t.Helper()
	SetWriteBlock(t, s.url, index, on)
}

// SetWriteBlock sets or clears index.blocks.read_only_allow_delete (what the
// disk flood-stage watermark sets) on index of the engine at url, through
// the engine's REST API: test setup for outage tests, the Engine seam has no
// settings call.
func SetWriteBlock(t testing.TB, url, index string, on bool) {
	t.Helper()
	body := `{"index.blocks.read_only_allow_delete": true}`
	if !on {
		body = `{"index.blocks.read_only_allow_delete": null}`
	}
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(c, http.MethodPut, url+"/"+index+"/_settings", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("set block on %s: %s", index, resp.Status)
	}
}

func (s *suite) testPing(t *testing.T) {
	t.Parallel()
	eng := s.newEngine(t, s.url)
	if eng.Kind() != "opensearch" && eng.Kind() != "elasticsearch" {
		t.Errorf("Kind() = %q", eng.Kind())
	}
	if err := eng.Ping(ctx(t)); err != nil {
		t.Fatalf("ping: %v", err)
	}
}

func (s *suite) testIndexDefinition(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	eng := s.newEngine(t, s.url)
	name := s.newIndex(t, eng, "h1")

	info, err := eng.GetIndex(c, name)
	if err != nil || info == nil {
		t.Fatalf("get index %s: %v, %v", name, info, err)
	}
	if info.Name != name {
		t.Errorf("Name = %q, want %q", info.Name, name)
	}
	var settings struct {
		Index struct {
			Shards   string `json:"number_of_shards"`
			Replicas string `json:"number_of_replicas"`
		} `json:"index"`
	}
	if err := json.Unmarshal(info.Settings, &settings); err != nil {
		t.Fatalf("settings %s: %v", info.Settings, err)
	}
	if settings.Index.Shards != "1" || settings.Index.Replicas != "0" {
		t.Errorf("settings = %s, want 1 shard, 0 replicas", info.Settings)
	}
	var mappings struct {
		Meta       map[string]string          `json:"_meta"`
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(info.Mappings, &mappings); err != nil {
		t.Fatalf("mappings %s: %v", info.Mappings, err)
	}
	if mappings.Meta["definition_hash"] != "h1" {
		t.Errorf("_meta = %v, want definition_hash h1", mappings.Meta)
	}
	if got := string(mappings.Properties["age"]); got != `{"type":"integer"}` {
		t.Errorf("age mapping = %s", got)
	}

	// A missing index is nil, not an error; deleting it is not an error.
	missing := testenv.Name("ct_missing")
	if info, err := eng.GetIndex(c, missing); err != nil || info != nil {
		t.Errorf("get missing index: %v, %v; want nil, nil", info, err)
	}
	if err := eng.DeleteIndex(c, missing); err != nil {
		t.Errorf("delete missing index: %v", err)
	}

	// Creating it twice is an engine error with type and status.
	err = eng.CreateIndex(c, name, definition("h1"))
	ee, ok := indexer.AsEngineError(err)
	if !ok || ee.Status != 400 || ee.Type != "resource_already_exists_exception" {
		t.Errorf("create existing index: %v; want 400 resource_already_exists_exception", err)
	}
	if indexer.IsTransport(err) || indexer.IsTemporary(err) {
		t.Errorf("create existing index: %v is reported as transport/temporary", err)
	}
}

func (s *suite) testAliases(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	eng := s.newEngine(t, s.url)
	v1 := s.newIndex(t, eng, "h1")
	v2 := s.newIndex(t, eng, "h2")
	alias := testenv.Name("ct_alias")

	if got, err := eng.AliasTargets(c, alias); err != nil || len(got) != 0 {
		t.Fatalf("targets of missing alias = %v, %v; want none", got, err)
	}
	filter := json.RawMessage(`{"bool":{"must_not":{"term":{"deleted":true}}}}`)
	yes := true
	err := eng.UpdateAliases(c, []indexer.AliasAction{{Add: true, Index: v1, Alias: alias, Filter: filter, IsWriteIdx: &yes}})
	if err != nil {
		t.Fatalf("add alias: %v", err)
	}
	if got, err := eng.AliasTargets(c, alias); err != nil || !slices.Equal(got, []string{v1}) {
		t.Fatalf("targets = %v, %v; want [%s]", got, err, v1)
	}

	// The swap is one atomic call: remove from v1, add to v2.
	err = eng.UpdateAliases(c, []indexer.AliasAction{
		{Add: false, Index: v1, Alias: alias},
		{Add: true, Index: v2, Alias: alias, Filter: filter},
	})
	if err != nil {
		t.Fatalf("swap alias: %v", err)
	}
	if got, err := eng.AliasTargets(c, alias); err != nil || !slices.Equal(got, []string{v2}) {
		t.Fatalf("targets after swap = %v, %v; want [%s]", got, err, v2)
	}
	info, err := eng.GetIndex(c, v2)
	if err != nil || !slices.Contains(info.Aliases, alias) {
		t.Errorf("GetIndex(%s).Aliases = %v, %v; want %s", v2, info, err, alias)
	}
	info, err = eng.GetIndex(c, v1)
	if err != nil || slices.Contains(info.Aliases, alias) {
		t.Errorf("GetIndex(%s).Aliases = %v, %v; want without %s", v1, info, err, alias)
	}

	// An action on a missing index fails as a whole and changes nothing.
	err = eng.UpdateAliases(c, []indexer.AliasAction{
		{Add: false, Index: v2, Alias: alias},
		{Add: true, Index: testenv.Name("ct_missing"), Alias: alias},
	})
	if ee, ok := indexer.AsEngineError(err); !ok || ee.Status != 404 {
		t.Errorf("alias action on missing index: %v; want a 404 engine error", err)
	}
	if got, err := eng.AliasTargets(c, alias); err != nil || !slices.Equal(got, []string{v2}) {
		t.Errorf("targets after failed swap = %v, %v; want [%s]", got, err, v2)
	}
}

func index(idx, id string, version int64, doc string) indexer.BulkOp {
	return indexer.BulkOp{Type: indexer.OpIndex, Index: idx, ID: id, Version: version, Doc: json.RawMessage(doc)}
}

func del(idx, id string, version int64) indexer.BulkOp {
	return indexer.BulkOp{Type: indexer.OpDelete, Index: idx, ID: id, Version: version}
}

type want struct {
	status  int
	errType string
	version int64
}

func checkResults(t *testing.T, step string, got []indexer.BulkResult, err error, wants ...want) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: bulk: %v", step, err)
	}
	if len(got) != len(wants) {
		t.Fatalf("%s: %d results, want %d", step, len(got), len(wants))
	}
	for i, w := range wants {
		g := got[i]
		if g.Status != w.status || g.ErrType != w.errType || (w.version != 0 && g.Version != w.version) {
			t.Errorf("%s: item %d = %+v; want status %d, type %q, version %d", step, i, g, w.status, w.errType, w.version)
		}
		if w.errType != "" && g.ErrReason == "" {
			t.Errorf("%s: item %d has no reason: %+v", step, i, g)
		}
	}
}

const conflict = "version_conflict_engine_exception"

func (s *suite) testBulkVersions(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	eng := s.newEngine(t, s.url)
	idx := s.newIndex(t, eng, "h1")

	res, err := eng.Bulk(c, []indexer.BulkOp{index(idx, "a", 5, `{"name":"Ann","age":30}`), index(idx, "b", 1, "{\n  \"name\": \"Bob\"\n}")})
	checkResults(t, "first write", res, err, want{201, "", 5}, want{201, "", 1})
	if res[0].Result != "created" {
		t.Errorf("Result = %q, want created", res[0].Result)
	}

	res, err = eng.Bulk(c, []indexer.BulkOp{
		index(idx, "a", 6, `{"name":"Ann","age":31}`), // newer: applied
		index(idx, "b", 1, `{"name":"Bob again"}`),    // same version: conflict
		index(idx, "a", 3, `{"name":"Old Ann"}`),      // older: conflict
		del(idx, "b", 0),                              // stale delete: conflict
	})
	checkResults(t, "second write", res, err, want{200, "", 6}, want{409, conflict, 0}, want{409, conflict, 0}, want{409, conflict, 0})
	if res[0].Result != "updated" {
		t.Errorf("Result = %q, want updated", res[0].Result)
	}

	res, err = eng.Bulk(c, []indexer.BulkOp{
		del(idx, "a", 7),         // newer delete: applied
		del(idx, "nobody", 1),    // delete of a missing document: 404 without an error
		index(idx, "a", 7, `{}`), // same version as the delete: conflict (tombstone)
	})
	checkResults(t, "deletes", res, err, want{200, "", 7}, want{404, "", 1}, want{409, conflict, 0})
	if res[0].Result != "deleted" || res[1].Result != "not_found" {
		t.Errorf("Results = %q, %q; want deleted, not_found", res[0].Result, res[1].Result)
	}

	docs, err := eng.MGet(c, idx, []string{"a", "b"})
	if err != nil {
		t.Fatalf("mget: %v", err)
	}
	if _, ok := docs["a"]; ok {
		t.Errorf("a is still there after its delete: %s", docs["a"].Source)
	}
	if d := docs["b"]; d.Version != 1 || !strings.Contains(string(d.Source), `"Bob"`) {
		t.Errorf("b = v%d %s; want v1 Bob", d.Version, d.Source)
	}
}

func (s *suite) testBulkMappingRejection(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	eng := s.newEngine(t, s.url)
	idx := s.newIndex(t, eng, "h1")
	res, err := eng.Bulk(c, []indexer.BulkOp{
		index(idx, "ok1", 1, `{"name":"fine","age":1}`),
		index(idx, "bad", 1, `{"name":"wrong","age":"not a number"}`),
		index(idx, "ok2", 1, `{"name":"fine too","age":2}`),
	})
	checkResults(t, "mapping rejection", res, err, want{201, "", 1}, want{400, "mapper_parsing_exception", 0}, want{201, "", 1})
	if len(res) == 3 && !strings.Contains(res[1].ErrReason, "age") {
		t.Errorf("reason %q does not name the field", res[1].ErrReason)
	}
	// An invalid document is refused before it is sent.
	_, err = eng.Bulk(c, []indexer.BulkOp{index(idx, "x", 1, `{"broken"`)})
	if err == nil || indexer.IsTransport(err) {
		t.Errorf("invalid JSON document: %v; want a local error", err)
	}
}

func (s *suite) testMGet(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	eng := s.newEngine(t, s.url)
	idx := s.newIndex(t, eng, "h1")
	_, err := eng.Bulk(c, []indexer.BulkOp{index(idx, "1", 10, `{"name":"one"}`), index(idx, "2", 20, `{"name":"two"}`)})
	if err != nil {
		t.Fatal(err)
	}
	// _mget is real-time: no refresh needed.
	docs, err := eng.MGet(c, idx, []string{"1", "2", "3"})
	if err != nil {
		t.Fatalf("mget: %v", err)
	}
	if len(docs) != 2 || docs["1"].Version != 10 || docs["2"].Version != 20 {
		t.Fatalf("mget = %v; want 1@10 and 2@20", docs)
	}
	var d struct{ Name string }
	if err := json.Unmarshal(docs["2"].Source, &d); err != nil || d.Name != "two" {
		t.Errorf("source of 2 = %s", docs["2"].Source)
	}
	if docs, err := eng.MGet(c, idx, nil); err != nil || len(docs) != 0 {
		t.Errorf("mget of nothing = %v, %v", docs, err)
	}
	_, err = eng.MGet(c, testenv.Name("ct_missing"), []string{"1"})
	if ee, ok := indexer.AsEngineError(err); !ok || ee.Status != 404 {
		t.Errorf("mget on a missing index: %v; want a 404 engine error", err)
	}
}

func (s *suite) testSearchThroughFilteredAlias(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	eng := s.newEngine(t, s.url)
	idx := s.newIndex(t, eng, "h1")
	alias := testenv.Name("ct_alias")
	err := eng.UpdateAliases(c, []indexer.AliasAction{{Add: true, Index: idx, Alias: alias,
		Filter: json.RawMessage(`{"bool":{"must_not":{"term":{"deleted":true}}}}`)}})
	if err != nil {
		t.Fatal(err)
	}
	ops := []indexer.BulkOp{
		index(alias, "1", 1, `{"name":"alice","tenant":"t1"}`),
		index(alias, "2", 1, `{"name":"bob","tenant":"t1"}`),
		index(alias, "3", 1, `{"name":"carol","tenant":"t2"}`),
		index(alias, "4", 2, `{"name":"dave","tenant":"t1","deleted":true}`), // soft-deleted
	}
	if res, err := eng.Bulk(c, ops); err != nil {
		t.Fatal(err)
	} else {
		for i, r := range res {
			if r.Status != 201 {
				t.Fatalf("write through alias: item %d = %+v", i, r)
			}
		}
	}
	if err := eng.Refresh(c, alias); err != nil {
		t.Fatalf("refresh: %v", err)
	}
	n, err := eng.Count(c, alias, nil)
	if err != nil || n != 3 {
		t.Errorf("count through alias = %d, %v; want 3 (the soft-deleted one filtered)", n, err)
	}
	n, err = eng.Count(c, idx, nil)
	if err != nil || n != 4 {
		t.Errorf("count on the index = %d, %v; want 4", n, err)
	}
	res, err := eng.Search(c, alias, json.RawMessage(`{"query":{"term":{"tenant":"t1"}},"sort":[{"_id":"asc"}]}`))
	if err != nil {
		t.Fatalf("search: %v", err)
	}
	if res.Total != 2 || len(res.Hits) != 2 || res.Hits[0].ID != "1" || res.Hits[1].ID != "2" {
		t.Fatalf("search = %+v; want hits 1 and 2", res)
	}
	if h := res.Hits[0]; h.Index != idx || h.Version != 1 || !strings.Contains(string(h.Source), "alice") {
		t.Errorf("hit = %+v; want index %s, version 1, alice", h, idx)
	}
	_, err = eng.Search(c, alias, json.RawMessage(`{"query":{"no_such_query":{}}}`))
	if ee, ok := indexer.AsEngineError(err); !ok || ee.Status != 400 || ee.Type == "" {
		t.Errorf("bad query: %v; want a 400 engine error with a type", err)
	}
}

func (s *suite) testEngineDown(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	eng := s.newEngine(t, ClosedURL(t))
	checks := map[string]error{"ping": eng.Ping(c)}
	_, checks["write blocks"] = eng.WriteBlocks(c, "x")
	_, checks["bulk"] = eng.Bulk(c, []indexer.BulkOp{index("x", "1", 1, `{}`)})
	_, checks["mget"] = eng.MGet(c, "x", []string{"1"})
	_, checks["get index"] = eng.GetIndex(c, "x")
	checks["create index"] = eng.CreateIndex(c, "x", definition("h"))
	for op, err := range checks {
		if err == nil {
			t.Errorf("%s on a closed port succeeded", op)
			continue
		}
		if _, ok := indexer.AsEngineError(err); ok {
			t.Errorf("%s: %v is an EngineError; want a transport error", op, err)
		}
		if !indexer.IsTransport(err) || !indexer.IsTemporary(err) {
			t.Errorf("%s: %v; want IsTransport and IsTemporary", op, err)
		}
	}
	// A cancelled context is not worth retrying.
	cc, cancel := context.WithCancel(c)
	cancel()
	if err := eng.Ping(cc); err == nil || indexer.IsTemporary(err) || !errors.Is(err, context.Canceled) {
		t.Errorf("ping with a cancelled context: %v; want context.Canceled, not temporary", err)
	}
}

// An adapter made while the engine was down works as soon as the engine is
// back (the clients must not keep a dead node out of use for long).
func (s *suite) testEngineComesBack(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	down := ClosedURL(t)
	eng := s.newEngine(t, down)
	if err := eng.Ping(c); !indexer.IsTransport(err) {
		t.Fatalf("ping while down: %v; want a transport error", err)
	}
	_, err := eng.Bulk(c, []indexer.BulkOp{index("x", "1", 1, `{}`)})
	if !indexer.IsTransport(err) {
		t.Fatalf("bulk while down: %v; want a transport error", err)
	}
	// The engine comes back on the same address (a plain pass-through proxy
	// to the real node, listening where nothing listened).
	target, _ := url.Parse(s.url)
	l, err := net.Listen("tcp", strings.TrimPrefix(down, "http://"))
	if err != nil {
		t.Fatalf("listen again on %s: %v", down, err)
	}
	srv := &http.Server{Handler: httputil.NewSingleHostReverseProxy(target)}
	go func() { _ = srv.Serve(l) }() // ErrServerClosed at cleanup
	t.Cleanup(func() { srv.Close() })
	start := time.Now()
	testenv.Eventually(t, 15*time.Second, func() bool { return eng.Ping(c) == nil }, "ping succeeds once the engine is back")
	idx := s.newIndex(t, eng, "h1")
	if res, err := eng.Bulk(c, []indexer.BulkOp{index(idx, "1", 1, `{}`)}); err != nil || res[0].Status != 201 {
		t.Fatalf("bulk after the engine came back: %v, %v", res, err)
	}
	t.Logf("usable %s after the engine came back", time.Since(start).Round(time.Millisecond))
}

// ClosedURL returns the URL of a local port nothing listens on.
func ClosedURL(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return fmt.Sprintf("http://%s", addr)
}
