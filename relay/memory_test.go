package relay_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"
	"weak"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/delivery"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/relay"
)

// batchWatcher is a consumer that remembers a weak pointer to the first event of
// every batch it is handed (nothing else of them), and at its check-th
// delivery, while the backlog lasts, reports which of the batches handed
// before are still reachable.
type batchWatcher struct {
	check int

	mu      sync.Mutex
	batches []weak.Pointer[outbox.Event]
	alive   chan []int // the indexes of the batches still reachable
}

func (k *batchWatcher) Name() string { return "batch-watcher" }

func (k *batchWatcher) Deliver(_ context.Context, evs []*outbox.Event) []delivery.Outcome {
	k.mu.Lock()
	k.batches = append(k.batches, weak.Make(evs[0]))
	n := len(k.batches)
	k.mu.Unlock()
	if n == k.check {
		// Collect twice: the cleanups of the first free what the second
		// finds unreachable.
		runtime.GC()
		runtime.GC()
		var alive []int
		k.mu.Lock()
		for i, p := range k.batches[:n-1] {
			if p.Value() != nil {
				alive = append(alive, i)
			}
		}
		k.mu.Unlock()
		k.alive <- alive
	}
	out := make([]delivery.Outcome, len(evs))
	for i := range out {
		out[i] = delivery.Ok()
	}
	return out
}

// TestAckedBatchesAreCollectedWhileTheBacklogLasts drains a backlog of
// many batches over a few hot aggregates (so every batch passes the one
// before it, see the package doc) and checks, in the middle of it, that the
// batches acked long ago are garbage: the relay's memory depends on its
// batch size and the batches in flight, not on the backlog's length.
func TestAckedBatchesAreCollectedWhileTheBacklogLasts(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	const batch, batches = 50, 40
	aggs := make([]uuid.UUID, 10)
	for i := range aggs {
		aggs[i] = uuid.New()
	}
	var evs []outbox.Event
	for i := range batch * batches {
		evs = append(evs, event(&aggs[i%len(aggs)], "entity.customer.updated", "DDM_ENTITY", i/len(aggs)+1))
	}
	write(t, db, evs...)

	k := &batchWatcher{check: 30, alive: make(chan []int, 1)}
	cfg := fast()
	cfg.BatchSize, cfg.MaxBatchSize = batch, batch
	cfg.Routes = []relay.Route{{Consumer: k}}
	start(t, db, cfg)
	var alive []int
	select {
	case alive = <-k.alive:
	case <-time.After(time.Minute):
		t.Fatalf("fewer than %d batches delivered within a minute", k.check)
	}
	// In flight at the check: the batch being delivered, the one claimed
	// beside it, InFlight (2) batches delivered and not recorded yet.
	var old []int
	for _, i := range alive {
		if i < k.check-1-4 {
			old = append(old, i)
		}
	}
	if len(old) > 0 {
		t.Fatalf("at delivery %d, batches %v (of %d) are still reachable: acked batches are kept while the backlog lasts", k.check, old, k.check-1)
	}
	testenv.Eventually(t, time.Minute, func() bool { return countStatus(t, db, "dispatched") == len(evs) },
		fmt.Sprintf("all %d events dispatched", len(evs)))
}
