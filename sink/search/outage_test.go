package search_test

import (
	"context"
	"log/slog"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/examples/customer"
	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/relay"
	"github.com/searchsync/searchsync/sink/search"
)

// failCounter is the engine behind the proxy, counting the calls of the
// consumer (deliveries and probes) that failed.
type failCounter struct {
	indexer.Engine
	fails atomic.Int64
}

func (f *failCounter) count(err error) error {
	if err != nil {
		f.fails.Add(1)
	}
	return err
}

func (f *failCounter) Ping(ctx context.Context) error { return f.count(f.Engine.Ping(ctx)) }

func (f *failCounter) Bulk(ctx context.Context, ops []indexer.BulkOp) ([]indexer.BulkResult, error) {
	res, err := f.Engine.Bulk(ctx, ops)
	return res, f.count(err)
}

func (f *failCounter) MGet(ctx context.Context, index string, ids []string) (map[string]indexer.Doc, error) {
	docs, err := f.Engine.MGet(ctx, index, ids)
	return docs, f.count(err)
}

// The engine is down, then back: while it is down the relay keeps trying
// (deliveries, or probes of the paused consumer), yet no event gets an
// attempt, nothing fails, nothing is dispatched; once it is back the
// backlog drains.
func TestEngineOutage(t *testing.T) {
	b := setup(t)
	u, _ := url.Parse(testenv.EngineURL(t))
	px := testenv.NewTCPProxy(t, u.Host)
	real, err := indexer.New(indexer.Config{URLs: []string{"http://" + px.Addr}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	eng := &failCounter{Engine: real}
	cons := b.consumer(func(c *search.Config) {
		c.Engine = eng
		c.Writer = indexer.NewWriter(eng, indexer.WriterConfig{RetryElapsed: 3 * time.Second})
	})

	px.Down()
	r, err := relay.New(b.db.Pool, relay.Config{Schema: b.db.Schema, Partitions: 2, LeaseTTL: 3 * time.Second,
		PollInterval: 100 * time.Millisecond, BatchSize: 50,
		Backoff: relay.Backoff{Initial: time.Second, Max: 5 * time.Second, Multiplier: 2, Jitter: 0.2},
		Logger:  slog.New(slog.DiscardHandler),
		Routes:  []relay.Route{{Consumer: cons}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	const n = 60
	var evs []outbox.Event
	for range n / 2 {
		id := uuid.New()
		evs = append(evs, customer.Created(ch(id, 1, map[string]any{"status": "draft"})),
			customer.Updated(ch(id, 2, map[string]any{"status": "active"})))
	}
	b.produce(evs...)

	count := func(status string) (n int) {
		b.db.Pool.QueryRow(b.ctx, `SELECT count(*) FROM aa_outbox_event WHERE status = $1`, status).Scan(&n)
		return n
	}
	// Five failed calls: with probes backing off from 1 s, several seconds
	// of outage during which the relay kept at it.
	testenv.Eventually(t, 60*time.Second, func() bool { return eng.fails.Load() >= 5 },
		"the relay keeps trying the consumer while the engine is down")
	var tried int
	b.db.Pool.QueryRow(b.ctx, `SELECT count(*) FROM aa_outbox_event WHERE attempts > 0`).Scan(&tried)
	if tried != 0 {
		t.Errorf("%d events got attempts during the outage; an outage is not a failure of the events", tried)
	}
	if f := count("failed"); f != 0 {
		t.Fatalf("%d events failed during the outage", f)
	}
	if d := count("dispatched"); d != 0 {
		t.Fatalf("%d events dispatched while the engine was down", d)
	}
	px.Up()
	testenv.Eventually(t, 60*time.Second, func() bool { return count("dispatched") == n }, "backlog drained")
	if f := count("failed"); f != 0 {
		t.Fatalf("%d events failed", f)
	}
	if got := b.searchable(b.alias, `{"term":{"status":"active"}}`); got != n/2 {
		t.Fatalf("%d documents, want %d", got, n/2)
	}
}
