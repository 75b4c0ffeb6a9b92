package search_test

import (
	"context"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/delivery"
	"github.com/searchsync/searchsync/examples/customer"
	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/indexer/enginetest"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/sink/search"
)

const unavailable = delivery.Unavailable

// checkUnavailable asserts the outcome of every aggregate's first event is
// Unavailable with a reason containing each of want, and the later ones
// NotAttempted.
func checkUnavailable(t *testing.T, evs []*outbox.Event, out []delivery.Outcome, want ...string) {
	t.Helper()
	head := map[string]bool{}
	for i, e := range evs {
		k := e.AggregateKey()
		wantKind := unavailable
		if head[k] {
			wantKind = notTried
		}
		head[k] = true
		if out[i].Kind != wantKind {
			t.Fatalf("event %d: %s %q, want %s", e.ID, out[i].Kind, out[i].Reason, wantKind)
		}
		for _, w := range want {
			if wantKind == unavailable && !strings.Contains(out[i].Reason, w) {
				t.Fatalf("event %d: reason %q does not contain %q", e.ID, out[i].Reason, w)
			}
		}
	}
}

// The engine unreachable (the proxy in front of it stopped: connection
// refused): every event is Unavailable at once, whether it needs the current
// document (_mget) or not (_bulk); Probe fails. The engine back: Probe
// succeeds and the same events are delivered.
func TestEngineUnreachableIsUnavailable(t *testing.T) {
	b := setup(t)
	u, _ := url.Parse(testenv.EngineURL(t))
	px := testenv.NewTCPProxy(t, u.Host)
	eng, err := indexer.New(indexer.Config{URLs: []string{"http://" + px.Addr}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cons := b.consumer(func(c *search.Config) { c.Engine = eng })
	if err := cons.Probe(b.ctx); err != nil {
		t.Fatalf("probe: %v", err)
	}
	a, c := uuid.New(), uuid.New()
	full := b.produce(customer.Created(ch(a, 1, map[string]any{"status": "draft"})))
	if out := cons.Deliver(b.ctx, full); out[0].Kind != ok {
		t.Fatalf("before the outage: %v", out)
	}

	px.Down()
	evs := b.produce(
		customer.Updated(ch(a, 2, map[string]any{"status": "active"})), // merges onto the current document: _mget
		customer.Created(ch(c, 1, map[string]any{"status": "draft"})),
		customer.Updated(ch(a, 3, map[string]any{"status": "blocked"})),
	)
	start := time.Now()
	out := cons.Deliver(b.ctx, evs)
	checkUnavailable(t, evs, out, "unreachable")
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Deliver took %s against an unreachable engine; an outage must reach the relay at once", d)
	}
	err = cons.Probe(b.ctx)
	if err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("probe while the engine is unreachable: %v", err)
	}
	t.Logf("unavailable: %s; probe: %v", out[0].Reason, err)

	px.Up()
	testenv.Eventually(t, 15*time.Second, func() bool { return cons.Probe(b.ctx) == nil }, "probe succeeds once the engine is back")
	b.deliver(evs, ok, ok, ok)
	if doc, v := b.doc(b.alias, a); v != 3 || doc["status"] != "blocked" {
		t.Fatalf("after the outage: v%d %v", v, doc)
	}
}

// The index behind the alias deleted while searchsync runs: Unavailable
// (never poison, never a silently auto-created index), the reason naming the
// index and the commands that bring it back; Probe fails until it exists
// again.
func TestIndexDeletedWhileRunning(t *testing.T) {
	b := setup(t)
	a := uuid.New()
	b.deliver(b.produce(customer.Created(ch(a, 1, map[string]any{"status": "draft"}))), ok)
	if err := b.cons.Probe(b.ctx); err != nil {
		t.Fatalf("probe: %v", err)
	}
	targets, err := b.eng.AliasTargets(b.ctx, b.alias)
	if err != nil || len(targets) != 1 {
		t.Fatalf("alias %s: %v, %v", b.alias, targets, err)
	}
	physical := targets[0]
	if err := b.eng.DeleteIndex(b.ctx, physical); err != nil {
		t.Fatal(err)
	}

	want := []string{"index " + physical + " (alias " + b.alias + ") missing", "index_not_found_exception",
		"restart `searchsync run`", "`searchsync reindex " + b.alias + " --force`"}
	// A full document (_bulk through the alias) and a partial one (_mget).
	for _, e := range []outbox.Event{
		customer.Created(ch(uuid.New(), 1, map[string]any{"status": "draft"})),
		customer.Updated(ch(a, 2, map[string]any{"status": "active"})),
	} {
		evs := b.produce(e)
		out := b.cons.Deliver(b.ctx, evs)
		checkUnavailable(t, evs, out, want...)
		t.Logf("unavailable: %s", out[0].Reason)
	}
	if info, err := b.eng.GetIndex(b.ctx, b.alias); err != nil || info != nil {
		t.Fatalf("a write re-created %s as an index: %+v, %v", b.alias, info, err)
	}
	err = b.cons.Probe(b.ctx)
	if err == nil || !strings.Contains(err.Error(), physical) || !strings.Contains(err.Error(), "searchsync reindex "+b.alias) {
		t.Fatalf("probe without the index: %v", err)
	}

	// What `searchsync run` does at start-up.
	if _, err := b.cons.EnsureIndexes(b.ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.cons.Probe(b.ctx); err != nil {
		t.Fatalf("probe after the index was recreated: %v", err)
	}
	b.deliver(b.produce(customer.Updated(ch(a, 3, map[string]any{"status": "active"}))), ok)
}

// A write block on the index (the disk flood-stage watermark's): the
// events are Unavailable naming the block, Probe fails while it stays and
// succeeds once it is lifted.
func TestWriteBlockIsUnavailable(t *testing.T) {
	b := setup(t)
	targets, err := b.eng.AliasTargets(b.ctx, b.alias)
	if err != nil || len(targets) != 1 {
		t.Fatalf("alias %s: %v, %v", b.alias, targets, err)
	}
	physical := targets[0]
	enginetest.SetWriteBlock(t, testenv.EngineURL(t), physical, true)
	t.Cleanup(func() { enginetest.SetWriteBlock(t, testenv.EngineURL(t), physical, false) })
	evs := b.produce(customer.Created(ch(uuid.New(), 1, map[string]any{"status": "draft"})))
	start := time.Now()
	out := b.cons.Deliver(b.ctx, evs)
	checkUnavailable(t, evs, out, "cluster block on "+b.alias, "cluster_block_exception")
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Deliver took %s; a block must reach the relay at once", d)
	}
	err = b.cons.Probe(b.ctx)
	if err == nil || !strings.Contains(err.Error(), "refuses writes: index "+physical) {
		t.Fatalf("probe with the block: %v", err)
	}
	t.Logf("unavailable: %s; probe: %v", out[0].Reason, err)
	enginetest.SetWriteBlock(t, testenv.EngineURL(t), physical, false)
	if err := b.cons.Probe(b.ctx); err != nil {
		t.Fatalf("probe after the block was lifted: %v", err)
	}
	b.deliver(evs, ok)
}

// hungEngine is a TEST-ONLY server that takes connections and never answers
// (a stalled node, a black-holed network).
func hungEngine(t *testing.T) string {
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
			conns = append(conns, c) // held open, never answered
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

// An engine that takes connections and never answers: Unavailable after the
// request timeout (the batch is not held until the lease runs out), and the
// probe fails the same way.
func TestHungEngineIsUnavailable(t *testing.T) {
	b := setup(t)
	eng, err := indexer.New(indexer.Config{URLs: []string{hungEngine(t)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cons := b.consumer(func(c *search.Config) { c.Engine = eng; c.RequestTimeout = 300 * time.Millisecond })
	a := uuid.New()
	evs := b.produce(
		customer.Created(ch(uuid.New(), 1, map[string]any{"status": "draft"})),
		customer.Updated(ch(a, 2, map[string]any{"status": "active"})), // _mget first
	)
	start := time.Now()
	out := cons.Deliver(b.ctx, evs)
	checkUnavailable(t, evs, out, "no answer within 300ms")
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Deliver took %s with a 300ms request timeout", d)
	}
	if err := cons.Probe(b.ctx); err == nil || !strings.Contains(err.Error(), "no answer within 300ms") {
		t.Fatalf("probe of a hung engine: %v", err)
	}
}

// Probe is cancelled with its context and then fails (the relay bounds each
// probe).
func TestProbeHonoursItsContext(t *testing.T) {
	b := setup(t)
	ctx, cancel := context.WithCancel(b.ctx)
	cancel()
	if err := b.cons.Probe(ctx); err == nil {
		t.Fatal("probe with a cancelled context succeeded")
	}
}
