package relay_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/relay"
	"github.com/searchsync/searchsync/sink"
)

// holder is a consumer that holds the delivery of one event until open is
// closed, and records every event it was handed.
type holder struct {
	hold   int64
	held   chan struct{} // closed when the held event's delivery began
	open   chan struct{}
	once   sync.Once
	mu     sync.Mutex
	handed []int64
}

func (g *holder) Name() string { return "holder" }

func (g *holder) Deliver(ctx context.Context, events []*outbox.Event) []sink.Outcome {
	out := make([]sink.Outcome, len(events))
	for i, e := range events {
		g.mu.Lock()
		g.handed = append(g.handed, e.ID)
		g.mu.Unlock()
		if e.ID == g.hold {
			g.once.Do(func() { close(g.held) })
			select {
			case <-g.open:
			case <-ctx.Done():
				return out
			}
		}
		out[i] = sink.Ok()
	}
	return out
}

func (g *holder) got(id int64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Contains(g.handed, id)
}

// Without a backlog, an event does not wait for a batch of other
// aggregates: the relay claims it beside the batch in flight. The next
// event of the aggregate in flight waits for that batch's ack, and is
// claimed after it without another NOTIFY or poll.
func TestClaimsBesideABatchInFlight(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	a, b := uuid.New(), uuid.New()
	first := write(t, db, event(&a, "entity.customer.updated", "customer", 1))[0]
	g := &holder{hold: first, held: make(chan struct{}), open: make(chan struct{})}
	cfg := fast()
	cfg.PollInterval = time.Hour // only NOTIFYs and acks make it claim
	cfg.Routes = []relay.Route{{Consumer: g}}
	start(t, db, cfg)

	select {
	case <-g.held:
	case <-time.After(30 * time.Second):
		t.Fatal("the first event was not delivered within 30s")
	}
	ids := write(t, db, event(&b, "entity.customer.updated", "customer", 1), event(&a, "entity.customer.updated", "customer", 2))
	other, next := ids[0], ids[1]
	testenv.Eventually(t, 30*time.Second, func() bool { return g.got(other) },
		"event %d of another aggregate was not delivered beside the batch in flight", other)
	testenv.Eventually(t, 30*time.Second, func() bool { return getRow(t, db, other).Status == "dispatched" },
		"event %d was not acknowledged beside the batch in flight", other)
	if g.got(next) {
		t.Fatalf("event %d was delivered while the earlier event %d of its aggregate was in flight", next, first)
	}
	close(g.open)
	testenv.Eventually(t, 30*time.Second, func() bool { return getRow(t, db, next).Status == "dispatched" },
		"event %d was not delivered after the ack of its aggregate's batch", next)
	if r := getRow(t, db, first); r.Status != "dispatched" || r.Dispatched.After(*getRow(t, db, next).Dispatched) {
		t.Fatalf("event %d: %+v, acknowledged after the next event of its aggregate", first, r)
	}
}
