package relay_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/delivery"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/relay"
)

// orderChecker is a consumer that fails the test when an event arrives
// before its aggregate's previous event was delivered (answered OK), or
// after its aggregate's next event was (with one relay and no lost acks,
// not even a redelivery may do that), and asks for one retry of every event
// that firstTry picks.
type orderChecker struct {
	t        *testing.T
	prev     map[int64]int64 // event id -> previous event id of its aggregate (0: none)
	next     map[int64]int64 // event id -> next event id of its aggregate (0: none)
	firstTry func(n int64) bool

	mu       sync.Mutex
	ok       map[int64]bool
	tried    map[int64]bool
	bad      int
	inFlight atomic.Int32 // Deliver calls running at once
	maxCalls atomic.Int32
	overlap  chan struct{} // closed when two Deliver calls ran at once
	once     sync.Once
}

func (c *orderChecker) Name() string { return "order" }

func (c *orderChecker) Deliver(_ context.Context, events []*outbox.Event) []delivery.Outcome {
	n := c.inFlight.Add(1)
	defer c.inFlight.Add(-1)
	for {
		m := c.maxCalls.Load()
		if n <= m || c.maxCalls.CompareAndSwap(m, n) {
			break
		}
	}
	if n > 1 {
		c.once.Do(func() { close(c.overlap) })
	}
	// A consumer that takes a moment, so that deliveries overlap; until
	// two ran at once it waits for the second (at most 10 s: a claim
	// beside it on a loaded machine may take longer than a moment).
	select {
	case <-c.overlap:
		time.Sleep(25 * time.Millisecond)
	case <-time.After(10 * time.Second):
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]delivery.Outcome, len(events))
	stopped := map[string]bool{}
	for i, e := range events {
		if stopped[e.AggregateKey()] {
			out[i] = delivery.Outcome{Kind: delivery.NotAttempted}
			continue
		}
		if p := c.prev[e.ID]; p != 0 && !c.ok[p] {
			if c.bad < 5 {
				c.t.Errorf("event %d delivered before event %d of its aggregate", e.ID, p)
			}
			c.bad++
		}
		if nx := c.next[e.ID]; nx != 0 && c.ok[nx] {
			if c.bad < 5 {
				c.t.Errorf("event %d delivered again after event %d of its aggregate", e.ID, nx)
			}
			c.bad++
		}
		if c.firstTry(e.ID) && !c.tried[e.ID] {
			c.tried[e.ID] = true
			out[i] = delivery.Retryf("first try of %d", e.ID)
			stopped[e.AggregateKey()] = true
			continue
		}
		c.ok[e.ID] = true
		out[i] = delivery.Ok()
	}
	return out
}

// TestPipelinedBatchesKeepTheOrderThroughRetries runs full batches of many
// aggregates, so that the relay delivers two batches at once, claims the
// next beside them and acks beside them: no event may reach the consumer
// before its aggregate's previous one was delivered, also when that one was
// retried (its outcome written by an ack that ran beside later deliveries).
func TestPipelinedBatchesKeepTheOrderThroughRetries(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	const aggs, perAgg = 200, 6
	ids := make([]uuid.UUID, aggs)
	for i := range ids {
		ids[i] = uuid.New()
	}
	// Two events per aggregate at a time, round by round, so that every
	// batch holds runs of many aggregates (a retried event is followed by
	// one the batch leaves untouched).
	var evs []outbox.Event
	var aggOf []int
	for v := 1; v <= perAgg; v += 2 {
		for a := range ids {
			evs = append(evs, event(&ids[a], "entity.customer.updated", "DDM_ENTITY", v),
				event(&ids[a], "entity.customer.updated", "DDM_ENTITY", v+1))
			aggOf = append(aggOf, a, a)
		}
	}
	written := write(t, db, evs...)
	prev, next := map[int64]int64{}, map[int64]int64{}
	last := map[int]int64{}
	for i, id := range written {
		if p := last[aggOf[i]]; p != 0 {
			prev[id], next[p] = p, id
		}
		last[aggOf[i]] = id
	}
	c := &orderChecker{t: t, prev: prev, next: next, ok: map[int64]bool{}, tried: map[int64]bool{}, overlap: make(chan struct{}),
		firstTry: func(id int64) bool { return id%23 == 3 }}

	var pipelined atomic.Int64
	cfg := fast()
	cfg.BatchSize = 30
	cfg.InFlight = 2
	// Longer than the test waits: a relay that forgets a due retry, or
	// takes a short claim beside a delivery for a drained outbox, fails it.
	cfg.PollInterval = time.Minute
	cfg.Backoff = relay.Backoff{Initial: 5 * time.Millisecond, Max: 20 * time.Millisecond, Multiplier: 2}
	cfg.Routes = []relay.Route{{Consumer: c}}
	cfg.OnBatch = func(bs relay.BatchStats) {
		if bs.Pipelined {
			pipelined.Add(1)
		}
	}
	start(t, db, cfg)

	testenv.Eventually(t, 30*time.Second, func() bool { return countStatus(t, db, "dispatched") == len(written) },
		"every event dispatched")
	if c.bad > 0 {
		t.Errorf("%d events out of order", c.bad)
	}
	if pipelined.Load() == 0 {
		t.Error("no batch was claimed beside a delivery: the test did not exercise pipelining")
	}
	if m := c.maxCalls.Load(); m != int32(cfg.InFlight) {
		t.Errorf("at most %d deliveries ran at once, want in_flight = %d", m, cfg.InFlight)
	}
	retried := 0
	for _, id := range written {
		if id%23 == 3 {
			retried++
		}
	}
	if r := countStatus(t, db, "failed"); r != 0 {
		t.Errorf("%d failed events", r)
	}
	t.Logf("%d events, %d retried once, %d batches claimed beside a delivery", len(written), retried, pipelined.Load())
}

// slowConsumer takes a moment per batch, so that a backlog lasts a few
// batches.
type slowConsumer struct{}

func (slowConsumer) Name() string { return "slow" }

func (slowConsumer) Deliver(_ context.Context, events []*outbox.Event) []delivery.Outcome {
	time.Sleep(10 * time.Millisecond)
	out := make([]delivery.Outcome, len(events))
	for i := range out {
		out[i] = delivery.Ok()
	}
	return out
}

// TestBatchesGrowWhileABacklogLasts: with a backlog, every claim that comes
// back full doubles the next one's size up to max_batch_size; once the
// outbox is drained, the next backlog starts again at batch_size.
func TestBatchesGrowWhileABacklogLasts(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	backlog := func(n int) {
		evs := make([]outbox.Event, n)
		for i := range evs {
			agg := uuid.New()
			evs[i] = event(&agg, "entity.customer.updated", "DDM_ENTITY", 1)
		}
		write(t, db, evs...)
	}
	var mu sync.Mutex
	var sizes []int
	cfg := fast()
	cfg.BatchSize, cfg.MaxBatchSize = 50, 300
	cfg.Routes = []relay.Route{{Consumer: slowConsumer{}}}
	cfg.OnBatch = func(bs relay.BatchStats) {
		mu.Lock()
		sizes = append(sizes, bs.Claimed)
		mu.Unlock()
	}
	// A batch is recorded after its ack commits: the outbox shows it
	// dispatched a moment before OnBatch has run.
	recorded := func(n int) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			sum := 0
			for _, s := range sizes {
				sum += s
			}
			return sum == n
		}
	}
	backlog(2000)
	r, _ := start(t, db, cfg)
	testenv.Eventually(t, 60*time.Second, func() bool { return countStatus(t, db, "dispatched") == 2000 },
		"the first backlog dispatched")
	testenv.Eventually(t, 10*time.Second, recorded(2000), "every batch of the first backlog recorded")
	mu.Lock()
	first := slices.Clone(sizes)
	sizes = nil
	mu.Unlock()
	// 50, 100, 200, then 300 (the maximum) while the backlog lasts.
	if len(first) < 4 || !slices.Equal(first[:4], []int{50, 100, 200, 300}) || slices.Max(first) != 300 {
		t.Errorf("batch sizes of the first backlog: %v, want 50, 100, 200, then at most 300", first)
	}
	// Two claims after the drain (polls): the first found nothing, so the
	// next backlog starts small.
	claims := r.Stats().Claims
	testenv.Eventually(t, 30*time.Second, func() bool { return r.Stats().Claims >= claims+2 }, "the relay polls an empty outbox")
	backlog(400)
	testenv.Eventually(t, 60*time.Second, func() bool { return countStatus(t, db, "dispatched") == 2400 },
		"the second backlog dispatched")
	testenv.Eventually(t, 10*time.Second, recorded(400), "every batch of the second backlog recorded")
	mu.Lock()
	defer mu.Unlock()
	if len(sizes) == 0 || sizes[0] != 50 {
		t.Errorf("batch sizes of the second backlog: %v, want the first one of batch_size 50", sizes)
	}
	t.Logf("batch sizes: first backlog %v, second %v", first, sizes)
}
