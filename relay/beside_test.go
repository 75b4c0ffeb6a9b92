package relay_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/delivery"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/relay"
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

func (g *holder) Deliver(ctx context.Context, events []*outbox.Event) []delivery.Outcome {
	out := make([]delivery.Outcome, len(events))
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
		out[i] = delivery.Ok()
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

// Once a batch is delivered, the next events of its aggregates are claimed
// and delivered while its ack is still running: the ack of the first event
// is held by a row lock, and the aggregate's next two events are delivered
// meanwhile, in order. Their acks wait for it: nothing of the aggregate is
// recorded dispatched while its first event is pending, and the three are
// recorded in order once the lock goes.
func TestDeliversPastABatchWhoseAckRuns(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	a := uuid.New()
	first := write(t, db, event(&a, "entity.customer.updated", "customer", 1))[0]
	// The ack's UPDATE of the first event waits for this lock. (It holds its
	// lease rows FOR SHARE meanwhile, so renewals wait too: a long TTL.)
	lock, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(ctx)
	if _, err := lock.Exec(ctx, `SELECT 1 FROM aa_outbox_event WHERE id = $1 FOR UPDATE`, first); err != nil {
		t.Fatal(err)
	}
	g := &holder{hold: -1}
	cfg := fast()
	cfg.LeaseTTL = time.Minute
	cfg.PollInterval = time.Hour // only NOTIFYs, deliveries and acks make it claim
	cfg.Routes = []relay.Route{{Consumer: g}}
	start(t, db, cfg)

	testenv.Eventually(t, 30*time.Second, func() bool { return g.got(first) }, "event %d was not delivered", first)
	second := write(t, db, event(&a, "entity.customer.updated", "customer", 2))[0]
	testenv.Eventually(t, 30*time.Second, func() bool { return g.got(second) },
		"event %d was not delivered while the ack of the earlier event %d of its aggregate ran", second, first)
	third := write(t, db, event(&a, "entity.customer.updated", "customer", 3))[0]
	testenv.Eventually(t, 30*time.Second, func() bool { return g.got(third) },
		"event %d was not delivered while the acks of the earlier events of its aggregate ran", third)
	for _, id := range []int64{first, second, third} {
		if r := getRow(t, db, id); r.Status != "pending" {
			t.Fatalf("event %d is %s while the ack of %d, the first of its aggregate, is held", id, r.Status, first)
		}
	}
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() bool { return countStatus(t, db, "dispatched") == 3 },
		"the three events were not acknowledged after the lock went")
	r1, r2, r3 := getRow(t, db, first), getRow(t, db, second), getRow(t, db, third)
	if r2.Dispatched.Before(*r1.Dispatched) || r3.Dispatched.Before(*r2.Dispatched) {
		t.Errorf("acknowledged out of order: %v, %v, %v", *r1.Dispatched, *r2.Dispatched, *r3.Dispatched)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !slices.Equal(g.handed, []int64{first, second, third}) {
		t.Errorf("handed %v, want %v once each, in order", g.handed, []int64{first, second, third})
	}
}
