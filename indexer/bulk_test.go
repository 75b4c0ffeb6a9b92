package indexer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/indexer/enginetest"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/sink"
)

const testDefinition = `{"settings":{"index":{"number_of_shards":1,"number_of_replicas":0}},
 "mappings":{"properties":{"name":{"type":"text"},"age":{"type":"integer"}}}}`

// testIndex creates a uniquely named index on the real node.
func testIndex(t *testing.T, eng indexer.Engine) string {
	t.Helper()
	name := testenv.Name("bw")
	if err := eng.CreateIndex(context.Background(), name, json.RawMessage(testDefinition)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.DeleteIndex(context.Background(), name) })
	return name
}

func tctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

func op(idx, id string, v int64, doc string) indexer.BulkOp {
	return indexer.BulkOp{Type: indexer.OpIndex, Index: idx, ID: id, Version: v, Doc: json.RawMessage(doc)}
}

func kinds(outs []indexer.Outcome) []sink.Kind {
	k := make([]sink.Kind, len(outs))
	for i, o := range outs {
		k[i] = o.Kind
	}
	return k
}

func TestWriterClassifiesEveryItem(t *testing.T) {
	t.Parallel()
	c := tctx(t)
	eng := newOpenSearch(t, testenv.EngineURL(t))
	idx := testIndex(t, eng)
	w := indexer.NewWriter(eng, indexer.WriterConfig{FlushCount: 2})
	if outs := w.Write(c, []indexer.BulkOp{op(idx, "a", 5, `{"age":1}`)}); outs[0].Kind != sink.OK {
		t.Fatalf("first write: %+v", outs[0])
	}
	ops := []indexer.BulkOp{
		op(idx, "a", 6, `{"age":2}`),                               // newer: ok
		op(idx, "a", 4, `{"age":0}`),                               // older: stale
		op(idx, "b", 1, `{"age":"ten"}`),                           // mapping: poison
		op(idx, "c", 1, `{"age":`),                                 // invalid JSON: poison, never sent
		{Type: indexer.OpDelete, Index: idx, ID: "zz", Version: 3}, // delete of a missing doc: ok
		op(idx, "d", -1, `{}`),                                     // negative version: poison, never sent
		op(idx, "e", 1, `{"age":3}`),                               // ok
	}
	outs := w.Write(c, ops)
	want := []sink.Kind{sink.OK, sink.Stale, sink.Poison, sink.Poison, sink.OK, sink.Poison, sink.OK}
	for i := range want {
		if outs[i].Kind != want[i] {
			t.Errorf("op %d: %+v; want %s", i, outs[i], want[i])
		}
	}
	if !strings.Contains(outs[1].Reason, "version_conflict_engine_exception") {
		t.Errorf("stale reason %q", outs[1].Reason)
	}
	if r := outs[2]; r.Result.Status != 400 || !strings.Contains(r.Reason, "mapper_parsing_exception") || !strings.Contains(r.Reason, "age") {
		t.Errorf("poison reason %q (result %+v): want the engine's type and reason", r.Reason, r.Result)
	}
	if !strings.Contains(outs[3].Reason, "not valid JSON") || outs[3].Attempts != 0 {
		t.Errorf("invalid JSON: %+v", outs[3])
	}
	// 5 ops were sent, FlushCount 2: 3 requests (plus the first write).
	st := w.Stats()
	if st.Requests != 4 || st.OK != 4 || st.Stale != 1 || st.Poison != 3 {
		t.Errorf("stats = %+v", st)
	}
}

func TestWriterSplitsByBytes(t *testing.T) {
	t.Parallel()
	eng := newOpenSearch(t, testenv.EngineURL(t))
	idx := testIndex(t, eng)
	w := indexer.NewWriter(eng, indexer.WriterConfig{FlushBytes: 300, Concurrency: 3})
	big := `{"name":"` + strings.Repeat("x", 200) + `"}`
	var ops []indexer.BulkOp
	for i := range 6 {
		ops = append(ops, op(idx, fmt.Sprint(i), 1, big))
	}
	for i, o := range w.Write(tctx(t), ops) {
		if o.Kind != sink.OK {
			t.Errorf("op %d: %+v", i, o)
		}
	}
	if st := w.Stats(); st.Requests != 6 {
		t.Errorf("requests = %d; want one per op (each is near FlushBytes)", st.Requests)
	}
}

// setBlock sets or clears index.blocks.read_only_allow_delete through the
// engine's REST API (test setup, not part of the adapter).
func setBlock(t *testing.T, index string, on bool) {
	t.Helper()
	body := fmt.Sprintf(`{"index.blocks.read_only_allow_delete": %v}`, on)
	if !on {
		body = `{"index.blocks.read_only_allow_delete": null}`
	}
	req, _ := http.NewRequest(http.MethodPut, testenv.EngineURL(t)+"/"+index+"/_settings", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("set block on %s: %s", index, resp.Status)
	}
}

// A real 429 from the real node: OpenSearch answers items for an index with
// the read_only_allow_delete block (what the disk flood-stage watermark
// sets) with 429 cluster_block_exception. Only those items are retried, with
// backoff, and succeed once the block is lifted; the other items of the same
// request are done at the first attempt.
func TestWriterRetries429ItemsAlone(t *testing.T) {
	t.Parallel()
	c := tctx(t)
	eng := newOpenSearch(t, testenv.EngineURL(t))
	blocked, free := testIndex(t, eng), testIndex(t, eng)
	setBlock(t, blocked, true)
	t.Cleanup(func() { setBlock(t, blocked, false) })

	// First prove what the engine answers.
	res, err := eng.Bulk(c, []indexer.BulkOp{op(blocked, "probe", 1, `{}`)})
	if err != nil || res[0].Status != 429 || res[0].ErrType != "cluster_block_exception" {
		t.Fatalf("bulk on a read_only_allow_delete index = %+v, %v; want 429 cluster_block_exception", res, err)
	}

	w := indexer.NewWriter(eng, indexer.WriterConfig{RetryInitial: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond, RetryElapsed: 30 * time.Second})
	var outs []indexer.Outcome
	done := make(chan struct{})
	go func() {
		defer close(done)
		outs = w.Write(c, []indexer.BulkOp{op(free, "1", 1, `{}`), op(blocked, "2", 1, `{}`), op(free, "3", 1, `{}`), op(blocked, "4", 1, `{}`)})
	}()
	testenv.Eventually(t, 20*time.Second, func() bool { return w.Stats().ItemRetries >= 4 }, "the blocked items are retried")
	if st := w.Stats(); st.OK != 2 {
		t.Errorf("while blocked: stats %+v; want the 2 free items done", st)
	}
	setBlock(t, blocked, false)
	<-done
	if got := kinds(outs); got[0] != sink.OK || got[1] != sink.OK || got[2] != sink.OK || got[3] != sink.OK {
		t.Fatalf("outcomes = %+v", outs)
	}
	if outs[0].Attempts != 1 || outs[1].Attempts < 3 {
		t.Errorf("attempts: free %d, blocked %d; want 1 and several", outs[0].Attempts, outs[1].Attempts)
	}
	// Each retry request carried only the 2 blocked items.
	if st := w.Stats(); st.ItemRetries != 2*(st.Requests-1) {
		t.Errorf("stats %+v: retries must carry only the failing items", st)
	}
}

// While the block stays, the items end as Retry after RetryElapsed, with the
// engine's answer as the reason.
func TestWriterGivesUpAsRetry(t *testing.T) {
	t.Parallel()
	eng := newOpenSearch(t, testenv.EngineURL(t))
	blocked := testIndex(t, eng)
	setBlock(t, blocked, true)
	t.Cleanup(func() { setBlock(t, blocked, false) })
	w := indexer.NewWriter(eng, indexer.WriterConfig{RetryInitial: 20 * time.Millisecond, RetryElapsed: 300 * time.Millisecond})
	outs := w.Write(tctx(t), []indexer.BulkOp{op(blocked, "1", 1, `{}`)})
	o := outs[0]
	if o.Kind != sink.Retry || o.Result.Status != 429 || !strings.Contains(o.Reason, "cluster_block_exception") || o.Attempts < 2 {
		t.Errorf("outcome %+v; want Retry with the 429 cluster_block_exception after several attempts", o)
	}
}

func TestWriterEngineDown(t *testing.T) {
	t.Parallel()
	eng := newOpenSearch(t, enginetest.ClosedURL(t))
	w := indexer.NewWriter(eng, indexer.WriterConfig{RetryInitial: 10 * time.Millisecond, RetryElapsed: 200 * time.Millisecond})
	outs := w.Write(tctx(t), []indexer.BulkOp{op("x", "1", 1, `{}`), op("x", "2", 1, `{}`)})
	for i, o := range outs {
		if o.Kind != sink.Retry || !strings.Contains(o.Reason, "unreachable") {
			t.Errorf("op %d: %+v; want Retry, engine unreachable", i, o)
		}
	}
	if st := w.Stats(); st.TransportErrors < 2 || st.Requests != st.TransportErrors {
		t.Errorf("stats %+v; want the whole request retried", st)
	}

	// A cancelled context: nothing is sent.
	cc, cancel := context.WithCancel(context.Background())
	cancel()
	if outs := w.Write(cc, []indexer.BulkOp{op("x", "1", 1, `{}`)}); outs[0].Kind != sink.NotAttempted {
		t.Errorf("cancelled: %+v; want NotAttempted", outs[0])
	}
}

// dropProxy is a TEST-ONLY proxy to the real node that drops the first n
// connections without answering (a transport failure), then passes
// everything through unchanged.
func dropProxy(t *testing.T, n int32) string {
	u, _ := url.Parse(testenv.EngineURL(t))
	rp := httputil.NewSingleHostReverseProxy(u)
	var seen atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if seen.Add(1) <= n {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.(*net.TCPConn).SetLinger(0)
				conn.Close()
			}
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestWriterRetriesTransportFailures(t *testing.T) {
	t.Parallel()
	real := newOpenSearch(t, testenv.EngineURL(t))
	idx := testIndex(t, real)
	eng := newOpenSearch(t, dropProxy(t, 2))
	w := indexer.NewWriter(eng, indexer.WriterConfig{RetryInitial: 10 * time.Millisecond, RetryElapsed: 10 * time.Second})
	outs := w.Write(tctx(t), []indexer.BulkOp{op(idx, "1", 1, `{}`), op(idx, "2", 1, `{}`)})
	for i, o := range outs {
		if o.Kind != sink.OK || o.Attempts != 3 {
			t.Errorf("op %d: %+v; want OK at the third attempt", i, o)
		}
	}
	if st := w.Stats(); st.TransportErrors != 2 {
		t.Errorf("stats %+v", st)
	}
}

func TestWriterAddFlushesByCountAndInterval(t *testing.T) {
	t.Parallel()
	c := tctx(t)
	eng := newOpenSearch(t, testenv.EngineURL(t))
	idx := testIndex(t, eng)

	var mu sync.Mutex
	got := map[string]indexer.Outcome{}
	record := func(id string) func(indexer.Outcome) {
		return func(o indexer.Outcome) { mu.Lock(); got[id] = o; mu.Unlock() }
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(got) }

	// By count: the interval is an hour, so only the count can send them.
	w := indexer.NewWriter(eng, indexer.WriterConfig{FlushCount: 3, FlushInterval: time.Hour})
	for i := range 3 {
		if err := w.Add(c, op(idx, fmt.Sprint("c", i), 1, `{}`), record(fmt.Sprint("c", i))); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return count() == 3 }, "3 ops sent by count")

	// By interval.
	w2 := indexer.NewWriter(eng, indexer.WriterConfig{FlushCount: 1000, FlushInterval: 50 * time.Millisecond})
	w2.Add(c, op(idx, "i0", 1, `{}`), record("i0"))
	w2.Add(c, op(idx, "i1", 1, `{"age":"x"}`), record("i1"))
	testenv.Eventually(t, 10*time.Second, func() bool { return count() == 5 }, "2 ops sent by interval")
	mu.Lock()
	if got["i0"].Kind != sink.OK || got["i1"].Kind != sink.Poison || got["c2"].Kind != sink.OK {
		t.Errorf("outcomes %+v", got)
	}
	mu.Unlock()

	// Close flushes what is queued, is idempotent, and refuses later Adds.
	w2.Add(c, op(idx, "z", 1, `{}`), record("z"))
	if err := w2.Close(c); err != nil {
		t.Fatal(err)
	}
	if count() != 6 {
		t.Errorf("Close did not flush: %d outcomes", count())
	}
	if err := w2.Close(c); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := w2.Add(c, op(idx, "late", 1, `{}`), record("late")); err != indexer.ErrWriterClosed {
		t.Errorf("Add after Close: %v", err)
	}
	w.Close(c)
}

func TestClassify(t *testing.T) {
	t.Parallel()
	idx := indexer.BulkOp{Type: indexer.OpIndex, Index: "i", ID: "1", Version: 1}
	dl := indexer.BulkOp{Type: indexer.OpDelete, Index: "i", ID: "1", Version: 1}
	for _, c := range []struct {
		op   indexer.BulkOp
		r    indexer.BulkResult
		want sink.Kind
	}{
		{idx, indexer.BulkResult{Status: 201}, sink.OK},
		{idx, indexer.BulkResult{Status: 200}, sink.OK},
		{dl, indexer.BulkResult{Status: 404, Result: "not_found"}, sink.OK},
		{idx, indexer.BulkResult{Status: 404, ErrType: "index_not_found_exception"}, sink.Retry},
		{idx, indexer.BulkResult{Status: 409, ErrType: "version_conflict_engine_exception"}, sink.Stale},
		{idx, indexer.BulkResult{Status: 429, ErrType: "es_rejected_execution_exception"}, sink.Retry},
		{idx, indexer.BulkResult{Status: 503, ErrType: "unavailable_shards_exception"}, sink.Retry},
		{idx, indexer.BulkResult{Status: 403, ErrType: "cluster_block_exception"}, sink.Retry},
		{idx, indexer.BulkResult{Status: 400, ErrType: "mapper_parsing_exception"}, sink.Poison},
		{idx, indexer.BulkResult{Status: 400, ErrType: "illegal_argument_exception"}, sink.Poison},
		{idx, indexer.BulkResult{Status: 400, ErrType: "strict_dynamic_mapping_exception"}, sink.Poison},
	} {
		if got := indexer.Classify(c.op, c.r); got.Kind != c.want {
			t.Errorf("Classify(%s, %+v) = %s; want %s", c.op.Type, c.r, got.Kind, c.want)
		}
	}
}

// limitProxy is a TEST-ONLY proxy to the real node that answers 413 with an
// empty body (what the node's HTTP layer does above http.max_content_length,
// a static node setting) for request bodies over max bytes, and passes the
// rest through unchanged.
func limitProxy(t *testing.T, max int64) string {
	u, _ := url.Parse(testenv.EngineURL(t))
	rp := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > max {
			w.WriteHeader(http.StatusRequestEntityTooLarge)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// A request over the engine's size limit is halved until it fits; an op that
// alone is too large is poison.
func TestWriterSplitsTooLargeRequests(t *testing.T) {
	t.Parallel()
	real := newOpenSearch(t, testenv.EngineURL(t))
	idx := testIndex(t, real)
	eng := newOpenSearch(t, limitProxy(t, 1000))
	w := indexer.NewWriter(eng, indexer.WriterConfig{})
	doc := `{"name":"` + strings.Repeat("y", 150) + `"}`
	var ops []indexer.BulkOp
	for i := range 8 {
		ops = append(ops, op(idx, fmt.Sprint(i), 1, doc))
	}
	ops = append(ops, op(idx, "huge", 1, `{"name":"`+strings.Repeat("z", 2000)+`"}`))
	outs := w.Write(tctx(t), ops)
	for i, o := range outs[:8] {
		if o.Kind != sink.OK {
			t.Errorf("op %d: %+v", i, o)
		}
	}
	if o := outs[8]; o.Kind != sink.Poison || o.Result.Status != 413 {
		t.Errorf("huge op: %+v; want Poison 413", o)
	}
}
