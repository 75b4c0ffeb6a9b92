package indexer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/searchsync/searchsync/delivery"
	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/indexer/enginetest"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/outbox"
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

func kinds(outs []indexer.Outcome) []delivery.Kind {
	k := make([]delivery.Kind, len(outs))
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
	if outs := w.Write(c, []indexer.BulkOp{op(idx, "a", 5, `{"age":1}`)}); outs[0].Kind != delivery.OK {
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
	want := []delivery.Kind{delivery.OK, delivery.Stale, delivery.Poison, delivery.Poison, delivery.OK, delivery.Poison, delivery.OK}
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
		if o.Kind != delivery.OK {
			t.Errorf("op %d: %+v", i, o)
		}
	}
	if st := w.Stats(); st.Requests != 6 {
		t.Errorf("requests = %d; want one per op (each is near FlushBytes)", st.Requests)
	}
}

// setBlock sets or clears index.blocks.read_only_allow_delete on the real
// node (test setup, not part of the adapter).
func setBlock(t *testing.T, index string, on bool) {
	t.Helper()
	enginetest.SetWriteBlock(t, testenv.EngineURL(t), index, on)
}

// A real block from the real node: OpenSearch answers items for an index
// with the read_only_allow_delete block (what the disk flood-stage watermark
// sets) with 429 cluster_block_exception. Those items are Unavailable at
// once (the relay pauses the consumer; the writer does not retry a block),
// the other items of the same request are written.
func TestWriterBlockedItemsAreUnavailable(t *testing.T) {
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
	w := indexer.NewWriter(eng, indexer.WriterConfig{RetryInitial: 20 * time.Millisecond, RetryElapsed: 30 * time.Second})
	start := time.Now()
	outs := w.Write(c, []indexer.BulkOp{op(free, "1", 1, `{}`), op(blocked, "2", 1, `{}`), op(free, "3", 1, `{}`)})
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Write took %s; a block must be reported at once", d)
	}
	if got := kinds(outs); got[0] != delivery.OK || got[1] != delivery.Unavailable || got[2] != delivery.OK {
		t.Fatalf("outcomes = %+v", outs)
	}
	if o := outs[1]; o.Attempts != 1 || !strings.Contains(o.Reason, "cluster block on "+blocked) || !strings.Contains(o.Reason, "cluster_block_exception") {
		t.Errorf("blocked item: %+v; want Unavailable at the first attempt, naming the block", o)
	}
	if st := w.Stats(); st.ItemRetries != 0 || st.Requests != 1 || st.Unavailable != 1 {
		t.Errorf("stats %+v; want one request, no item retries", st)
	}
}

// flaky wraps a real engine and replaces the item answers for index of the
// next n bulk requests by status/errType (what the engine answers when its
// write queue is full, 429 es_rejected_execution_exception, or when a shard
// fails, a 500): conditions a single test node cannot be brought into on
// demand. Everything else is the real engine's answer.
type flaky struct {
	indexer.Engine
	index   string
	status  int
	errType string
	left    atomic.Int32
}

func (f *flaky) Bulk(ctx context.Context, ops []indexer.BulkOp) ([]indexer.BulkResult, error) {
	if f.left.Add(-1) < 0 {
		return f.Engine.Bulk(ctx, ops)
	}
	// The refused items never reach the engine (as with a real rejection).
	var pass []indexer.BulkOp
	for _, o := range ops {
		if o.Index != f.index {
			pass = append(pass, o)
		}
	}
	got, err := f.Engine.Bulk(ctx, pass)
	if err != nil {
		return nil, err
	}
	res := make([]indexer.BulkResult, len(ops))
	for i := range ops {
		if ops[i].Index == f.index {
			res[i] = indexer.BulkResult{Status: f.status, ErrType: f.errType, ErrReason: "injected by the test"}
			continue
		}
		res[i], got = got[0], got[1:]
	}
	return res, nil
}

// Items answered 429 (rejected execution) or 5xx are retried by the writer
// alone, with backoff, and succeed once the engine takes them; the other
// items of the request are done at the first attempt.
func TestWriterRetriesRejectedItemsAlone(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status  int
		errType string
	}{{429, "es_rejected_execution_exception"}, {500, "illegal_state_exception"}} {
		t.Run(strconv.Itoa(tc.status), func(t *testing.T) {
			t.Parallel()
			real := newOpenSearch(t, testenv.EngineURL(t))
			busy, free := testIndex(t, real), testIndex(t, real)
			eng := &flaky{Engine: real, index: busy, status: tc.status, errType: tc.errType}
			eng.left.Store(3)
			w := indexer.NewWriter(eng, indexer.WriterConfig{RetryInitial: 10 * time.Millisecond, RetryElapsed: 30 * time.Second})
			outs := w.Write(tctx(t), []indexer.BulkOp{op(free, "1", 1, `{}`), op(busy, "2", 1, `{}`), op(free, "3", 1, `{}`), op(busy, "4", 1, `{}`)})
			for i, o := range outs {
				if o.Kind != delivery.OK {
					t.Errorf("op %d: %+v; want OK", i, o)
				}
			}
			if outs[0].Attempts != 1 || outs[1].Attempts != 4 {
				t.Errorf("attempts: free %d, busy %d; want 1 and 4", outs[0].Attempts, outs[1].Attempts)
			}
			if st := w.Stats(); st.Requests != 4 || st.ItemRetries != 6 {
				t.Errorf("stats %+v: retries must carry only the 2 failing items", st)
			}
		})
	}
}

// While the engine keeps refusing them, the items end after RetryElapsed
// with their last outcome: Unavailable for 429 (the engine is overloaded),
// Retry for a 5xx (a failure of that item), with the engine's answer.
func TestWriterGivesUpWithTheLastOutcome(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status  int
		errType string
		want    delivery.Kind
	}{{429, "es_rejected_execution_exception", delivery.Unavailable}, {503, "illegal_state_exception", delivery.Retry}} {
		t.Run(strconv.Itoa(tc.status), func(t *testing.T) {
			t.Parallel()
			real := newOpenSearch(t, testenv.EngineURL(t))
			busy := testIndex(t, real)
			eng := &flaky{Engine: real, index: busy, status: tc.status, errType: tc.errType}
			eng.left.Store(1 << 30)
			w := indexer.NewWriter(eng, indexer.WriterConfig{RetryInitial: 20 * time.Millisecond, RetryElapsed: 300 * time.Millisecond})
			o := w.Write(tctx(t), []indexer.BulkOp{op(busy, "1", 1, `{}`)})[0]
			if o.Kind != tc.want || o.Result.Status != tc.status || !strings.Contains(o.Reason, tc.errType) ||
				!strings.Contains(o.Reason, "still failing after") || o.Attempts < 2 {
				t.Errorf("outcome %+v; want %s with the engine's %d %s after several attempts", o, tc.want, tc.status, tc.errType)
			}
		})
	}
}

// An unreachable engine is Unavailable at the first attempt: the writer does
// not retry a request that got no answer (the relay pauses and probes).
func TestWriterEngineDown(t *testing.T) {
	t.Parallel()
	eng := newOpenSearch(t, enginetest.ClosedURL(t))
	w := indexer.NewWriter(eng, indexer.WriterConfig{RetryInitial: 10 * time.Millisecond, RetryElapsed: 10 * time.Second})
	start := time.Now()
	outs := w.Write(tctx(t), []indexer.BulkOp{op("x", "1", 1, `{}`), op("x", "2", 1, `{}`)})
	for i, o := range outs {
		if o.Kind != delivery.Unavailable || !strings.Contains(o.Reason, "unreachable") || o.Attempts != 1 {
			t.Errorf("op %d: %+v; want Unavailable at once, engine unreachable", i, o)
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Write took %s against a closed port", d)
	}
	if st := w.Stats(); st.TransportErrors != 1 || st.Requests != 1 || st.Unavailable != 2 {
		t.Errorf("stats %+v; want one request, not retried", st)
	}

	// Several requests of one Write: after the first failed, the others are
	// not sent (NotAttempted, with the reason).
	w1 := indexer.NewWriter(eng, indexer.WriterConfig{FlushCount: 1, Concurrency: 1})
	outs = w1.Write(tctx(t), []indexer.BulkOp{op("x", "1", 1, `{}`), op("x", "2", 1, `{}`), op("x", "3", 1, `{}`)})
	if outs[0].Kind != delivery.Unavailable {
		t.Errorf("first request: %+v; want Unavailable", outs[0])
	}
	for i, o := range outs[1:] {
		if o.Kind != delivery.NotAttempted || !strings.HasPrefix(o.Reason, "not sent: an earlier request of this write failed: ") || o.Attempts != 0 {
			t.Errorf("op %d: %+v; want NotAttempted, not sent", i+1, o)
		}
	}
	if st := w1.Stats(); st.Requests != 1 {
		t.Errorf("stats %+v; want one request", st)
	}

	// A cancelled context: nothing is sent.
	cc, cancel := context.WithCancel(context.Background())
	cancel()
	if outs := w.Write(cc, []indexer.BulkOp{op("x", "1", 1, `{}`)}); outs[0].Kind != delivery.NotAttempted {
		t.Errorf("cancelled: %+v; want NotAttempted", outs[0])
	}
}

// hungURL is a TEST-ONLY server that takes connections and never answers
// (a stalled node, a black-holed network).
func hungURL(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, never read or answered
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return "http://" + l.Addr().String()
}

// An engine that does not answer is Unavailable after RequestTimeout.
func TestWriterHungEngineIsUnavailable(t *testing.T) {
	t.Parallel()
	eng := newOpenSearch(t, hungURL(t))
	w := indexer.NewWriter(eng, indexer.WriterConfig{RequestTimeout: 300 * time.Millisecond})
	start := time.Now()
	o := w.Write(tctx(t), []indexer.BulkOp{op("x", "1", 1, `{}`)})[0]
	if o.Kind != delivery.Unavailable || !strings.Contains(o.Reason, "opensearch bulk of 1 ops: engine unreachable: no answer within 300ms") {
		t.Errorf("outcome %+v; want Unavailable, no answer within 300ms", o)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Write took %s with a 300ms request timeout", d)
	}
}

// lease is a test delivery.Lease whose deadline has passed when expired is set.
type lease struct{ expired atomic.Bool }

func (l *lease) Token(*outbox.Event) (int, int64, bool) { return 0, 1, true }
func (l *lease) Check() error {
	if l.expired.Load() {
		return delivery.ErrLeaseExpired
	}
	return nil
}

// Once the relay's lease deadline has passed, the writer sends nothing: the
// ops are NotAttempted with the reason, and the engine never sees them.
func TestWriterChecksTheLease(t *testing.T) {
	t.Parallel()
	eng := newOpenSearch(t, testenv.EngineURL(t))
	idx := testIndex(t, eng)
	w := indexer.NewWriter(eng, indexer.WriterConfig{})
	l := &lease{}
	ctx := delivery.WithLease(tctx(t), l)
	if o := w.Write(ctx, []indexer.BulkOp{op(idx, "1", 1, `{}`)})[0]; o.Kind != delivery.OK {
		t.Fatalf("with a valid lease: %+v", o)
	}
	l.expired.Store(true)
	for i, o := range w.Write(ctx, []indexer.BulkOp{op(idx, "2", 1, `{}`), op(idx, "3", 1, `{}`)}) {
		if o.Kind != delivery.NotAttempted || o.Reason != "lease deadline passed" || o.Attempts != 0 {
			t.Errorf("op %d after the lease deadline: %+v; want NotAttempted, lease deadline passed", i, o)
		}
	}
	if st := w.Stats(); st.Requests != 1 {
		t.Errorf("stats %+v; want only the first request sent", st)
	}
	if docs, err := eng.MGet(tctx(t), idx, []string{"2", "3"}); err != nil || len(docs) != 0 {
		t.Errorf("documents written after the lease deadline: %v, %v", docs, err)
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

// A dropped connection is Unavailable at once; the next Write goes through
// (nothing of the writer stays broken).
func TestWriterTransportFailureIsUnavailable(t *testing.T) {
	t.Parallel()
	real := newOpenSearch(t, testenv.EngineURL(t))
	idx := testIndex(t, real)
	eng := newOpenSearch(t, dropProxy(t, 1))
	w := indexer.NewWriter(eng, indexer.WriterConfig{RetryInitial: 10 * time.Millisecond, RetryElapsed: 10 * time.Second})
	ops := []indexer.BulkOp{op(idx, "1", 1, `{}`), op(idx, "2", 1, `{}`)}
	for i, o := range w.Write(tctx(t), ops) {
		if o.Kind != delivery.Unavailable || o.Attempts != 1 {
			t.Errorf("op %d: %+v; want Unavailable at the first attempt", i, o)
		}
	}
	for i, o := range w.Write(tctx(t), ops) {
		if o.Kind != delivery.OK {
			t.Errorf("op %d, written again: %+v; want OK", i, o)
		}
	}
	if st := w.Stats(); st.TransportErrors != 1 || st.Requests != 2 {
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
	if got["i0"].Kind != delivery.OK || got["i1"].Kind != delivery.Poison || got["c2"].Kind != delivery.OK {
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
	if err := w2.Add(c, op(idx, "late", 1, `{}`), record("late")); !errors.Is(err, indexer.ErrWriterClosed) {
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
		want delivery.Kind
	}{
		{idx, indexer.BulkResult{Status: 201}, delivery.OK},
		{idx, indexer.BulkResult{Status: 200}, delivery.OK},
		{dl, indexer.BulkResult{Status: 404, Result: "not_found"}, delivery.OK},
		{idx, indexer.BulkResult{Status: 404, ErrType: "index_not_found_exception"}, delivery.Unavailable},
		{idx, indexer.BulkResult{Status: 409, ErrType: "version_conflict_engine_exception"}, delivery.Stale},
		{idx, indexer.BulkResult{Status: 429, ErrType: "es_rejected_execution_exception"}, delivery.Unavailable},
		{idx, indexer.BulkResult{Status: 429, ErrType: "cluster_block_exception"}, delivery.Unavailable},
		{idx, indexer.BulkResult{Status: 503, ErrType: "unavailable_shards_exception"}, delivery.Unavailable},
		{idx, indexer.BulkResult{Status: 500, ErrType: "illegal_state_exception"}, delivery.Retry},
		{idx, indexer.BulkResult{Status: 503, ErrType: "node_closed_exception"}, delivery.Retry},
		{idx, indexer.BulkResult{Status: 0}, delivery.Retry},
		{idx, indexer.BulkResult{Status: 403, ErrType: "cluster_block_exception"}, delivery.Unavailable},
		{idx, indexer.BulkResult{Status: 403, ErrType: "security_exception"}, delivery.Unavailable},
		{idx, indexer.BulkResult{Status: 401, ErrType: "security_exception"}, delivery.Unavailable},
		{idx, indexer.BulkResult{Status: 400, ErrType: "mapper_parsing_exception"}, delivery.Poison},
		{idx, indexer.BulkResult{Status: 400, ErrType: "illegal_argument_exception"}, delivery.Poison},
		{idx, indexer.BulkResult{Status: 400, ErrType: "strict_dynamic_mapping_exception"}, delivery.Poison},
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
		if o.Kind != delivery.OK {
			t.Errorf("op %d: %+v", i, o)
		}
	}
	if o := outs[8]; o.Kind != delivery.Poison || o.Result.Status != 413 {
		t.Errorf("huge op: %+v; want Poison 413", o)
	}
}
