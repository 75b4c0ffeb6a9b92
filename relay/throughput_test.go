package relay_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/relay"
	"github.com/searchsync/searchsync/sink"
)

// The acks count what they record in aa_consumer_throughput: per second,
// the events handled ("*") are exactly the events whose dispatched_at falls
// in it, and each consumer's count is the events it delivered, once each,
// also when the consumers go different ways (one delivers at once, the
// other after a retry: the event is dispatched by the second ack) and with
// two relays acking at once.
func TestAcksCountDeliveriesPerSecondAndConsumer(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	a, b := newReceiver(t), newReceiver(t)
	var mu sync.Mutex
	refused := map[int64]bool{}
	b.setStatus(func(m sink.Message) int {
		mu.Lock()
		defer mu.Unlock()
		if m.ID%5 == 0 && !refused[m.ID] {
			refused[m.ID] = true // once: b retries it, a has it already
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	cfg := fast()
	cfg.Backoff = relay.Backoff{Initial: 100 * time.Millisecond, Max: 200 * time.Millisecond, Multiplier: 2}
	cfg.Routes = []relay.Route{{Consumer: newHook("a", a.URL)}, {Consumer: newHook("b", b.URL)}}
	start(t, db, cfg)
	start(t, db, cfg)

	const aggs, per = 60, 5
	var total int
	for range per {
		var evs []outbox.Event
		for range aggs {
			agg := uuid.New()
			evs = append(evs, event(&agg, "entity.customer.updated", "DDM_ENTITY", 1))
		}
		write(t, db, evs...)
		total += len(evs)
	}
	testenv.Eventually(t, 60*time.Second, func() bool { return countStatus(t, db, "dispatched") == total }, "all %d dispatched", total)

	ctx := context.Background()
	counted := map[string]int{}
	rows, err := db.Pool.Query(ctx, `SELECT consumer, sum(events)::int FROM aa_consumer_throughput GROUP BY consumer`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var c string
		var n int
		if err := rows.Scan(&c, &n); err != nil {
			t.Fatal(err)
		}
		counted[c] = n
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	for _, c := range []string{"*", "a", "b"} {
		if counted[c] != total {
			t.Errorf("consumer %s: %d counted, want %d (every event once): %v", c, counted[c], total, counted)
		}
	}
	// Second by second, "*" is the outbox's own count of dispatched events.
	var mismatched int
	if err := db.Pool.QueryRow(ctx, `
		SELECT count(*) FROM (
			SELECT date_trunc('second', dispatched_at) AS second, count(*) AS n FROM aa_outbox_event GROUP BY 1) d
		FULL JOIN (
			SELECT second, sum(events) AS n FROM aa_consumer_throughput WHERE consumer = '*' GROUP BY 1) c USING (second)
		WHERE d.n IS DISTINCT FROM c.n`).Scan(&mismatched); err != nil {
		t.Fatal(err)
	}
	if mismatched != 0 {
		t.Errorf("%d seconds where the counted events differ from the events dispatched", mismatched)
	}
}
