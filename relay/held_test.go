package relay_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/searchsync/searchsync/delivery"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/relay"
)

// gate is a consumer whose first delivery asks for a retry and whose second
// one waits until the test opens it: it holds a batch in flight for as long
// as the test needs.
type gate struct {
	name    string
	mu      sync.Mutex
	calls   int
	entered chan struct{} // closed when the second delivery began
	open    chan struct{} // closed by the test
}

func newGate(name string) *gate {
	return &gate{name: name, entered: make(chan struct{}), open: make(chan struct{})}
}

func (g *gate) Name() string { return g.name }

func (g *gate) Deliver(ctx context.Context, events []*outbox.Event) []delivery.Outcome {
	g.mu.Lock()
	g.calls++
	n := g.calls
	g.mu.Unlock()
	out := make([]delivery.Outcome, len(events))
	switch n {
	case 1:
		for i := range out {
			out[i] = delivery.Retryf("not yet")
		}
		return out
	case 2:
		close(g.entered)
		select {
		case <-g.open:
		case <-ctx.Done():
			return out
		}
	}
	for i := range out {
		out[i] = delivery.Outcome{Kind: delivery.OK}
	}
	return out
}

// TestResumeDuringABatchKeepsTheHeldEventFirst: consumer "hook" is paused
// and its delivery row of event 1 is held; a batch of events 1 and 2 is in
// flight at the other consumer when hook is resumed and its held rows are
// released. The batch's ack must not leave event 1's outbox row held while
// its hook row is available (nothing would then keep event 2 behind it for
// hook): hook receives event 1 before event 2, and no outbox row is ever
// held without a held delivery row.
func TestResumeDuringABatchKeepsTheHeldEventFirst(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	rc := newReceiver(t)
	g := newGate("gate")
	cfg := fast()
	// Each relay tick (the release of held rows, of rows held for no
	// consumer) is a second apart: the check after the ack sees what the
	// ack wrote.
	cfg.PollInterval = 5 * time.Second
	cfg.Backoff = relay.Backoff{Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond, Multiplier: 1}
	cfg.Routes = []relay.Route{{Consumer: g}, {Consumer: newHook("hook", rc.URL)}}
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `INSERT INTO aa_outbox_consumer (consumer, state, paused_at, reason, probe_at)
VALUES ('hook', 'paused', now(), 'down in the test', now() + interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	agg := uuid.New()
	first := write(t, db, event(&agg, "entity.customer.updated", "DDM_ENTITY", 1))[0]
	start(t, db, cfg)

	// The first batch: gate asks for a retry, hook is held.
	heldRow := `SELECT count(*) FROM aa_outbox_delivery WHERE event_id = $1 AND consumer = 'hook'
  AND available_at = ` + outbox.HeldSQL
	testenv.Eventually(t, 20*time.Second, func() bool { return scalar[int](t, db, heldRow, first) == 1 },
		"event 1 held for hook")
	second := write(t, db, event(&agg, "entity.customer.updated", "DDM_ENTITY", 2))[0]
	select {
	case <-g.entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the second batch did not reach gate within 20 s")
	}

	// Another relay resumes hook: its held rows are released while the
	// batch is in flight.
	if _, err := db.Pool.Exec(ctx, `UPDATE aa_outbox_consumer SET state = 'running', probe_at = NULL WHERE consumer = 'hook'`); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, func() bool { return scalar[int](t, db, heldRow, first) == 0 },
		"event 1's hook row released")
	close(g.open)

	// The ack of the batch: gate has both events.
	testenv.Eventually(t, 20*time.Second, func() bool {
		return scalar[int](t, db, `SELECT count(*) FROM aa_outbox_delivery WHERE consumer = 'gate' AND state = 'done'`) == 2 ||
			countStatus(t, db, "dispatched") == 2
	}, "gate's ack written")
	orphans := scalar[int](t, db, `SELECT count(*) FROM aa_outbox_event e
WHERE e.status = 'pending' AND e.available_at = `+outbox.HeldSQL+`
  AND NOT EXISTS (SELECT 1 FROM aa_outbox_delivery d
                  WHERE d.event_id = e.id AND d.state = 'pending' AND d.available_at = `+outbox.HeldSQL+`)`)
	if orphans != 0 {
		t.Errorf("%d outbox rows held with no held delivery row after the ack", orphans)
	}
	testenv.Eventually(t, 30*time.Second, func() bool { return rc.delivered(first) && rc.delivered(second) },
		"hook receives both events")
	rc.checkOrder(t)
	testenv.Eventually(t, 20*time.Second, func() bool { return countStatus(t, db, "dispatched") == 2 },
		"both events dispatched")
}

// TestAnOrphanedHeldEventKeepsItsAggregateBehindIt: event 1's outbox row
// is held while its hook row is available (the state a lost race leaves,
// which the orphan sweep repairs once a minute), set up after the relay's
// first sweep. No one claims event 1 in that state, so event 2 of its
// aggregate must not reach hook before it; the other consumer, which has
// event 1, gets event 2, and another aggregate is not held back. Once event
// 1 is released (as the sweep does), hook gets both, in order.
func TestAnOrphanedHeldEventKeepsItsAggregateBehindIt(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	hookRC, otherRC := newReceiver(t), newReceiver(t)
	cfg := fast()
	cfg.PollInterval = 50 * time.Millisecond
	cfg.Routes = []relay.Route{{Consumer: newHook("hook", hookRC.URL)}, {Consumer: newHook("other", otherRC.URL)}}
	ctx := context.Background()
	warm := uuid.New()
	warmID := write(t, db, event(&warm, "entity.customer.updated", "DDM_ENTITY", 1))[0]
	r, _ := start(t, db, cfg)
	testenv.Eventually(t, 20*time.Second, func() bool { return hookRC.delivered(warmID) && otherRC.delivered(warmID) },
		"the relay runs (its start-up sweep done)")

	// One transaction: the relay sees the state at once.
	agg, free := uuid.New(), uuid.New()
	var first, second, control int64
	w := outbox.NewWriter(outbox.WriterConfig{Schema: db.Schema})
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		ids, err := w.Write(ctx, tx, event(&agg, "entity.customer.updated", "DDM_ENTITY", 1))
		if err != nil {
			return err
		}
		first = ids[0]
		if _, err := tx.Exec(ctx, `UPDATE aa_outbox_event SET available_at = `+outbox.HeldSQL+` WHERE id = $1`, first); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO aa_outbox_delivery (event_id, consumer, aggregate_type, aggregate_id, state, available_at, delivered_at)
VALUES ($1, 'hook', 'DDM_ENTITY', $2, 'pending', now(), NULL), ($1, 'other', 'DDM_ENTITY', $2, 'done', now(), now())`, first, agg); err != nil {
			return err
		}
		if ids, err = w.Write(ctx, tx, event(&agg, "entity.customer.updated", "DDM_ENTITY", 2), event(&free, "entity.customer.updated", "DDM_ENTITY", 1)); err != nil {
			return err
		}
		second, control = ids[0], ids[1]
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	r.Wake()

	testenv.Eventually(t, 20*time.Second, func() bool {
		return otherRC.delivered(second) && otherRC.delivered(control) && hookRC.delivered(control)
	}, "the other consumer gets event 2, both get the other aggregate's event")
	// A few more claims: none may hand event 2 to hook.
	claims := r.Stats().Claims
	testenv.Eventually(t, 20*time.Second, func() bool { r.Wake(); return r.Stats().Claims >= claims+3 }, "three more claims")
	if hookRC.delivered(second) || hookRC.delivered(first) {
		t.Fatalf("hook got event 2 (%v) or the held event 1 (%v) while event 1 was held", hookRC.delivered(second), hookRC.delivered(first))
	}
	if otherRC.delivered(first) {
		t.Error("the other consumer got event 1, which it had")
	}

	if _, err := db.Pool.Exec(ctx, `UPDATE aa_outbox_event SET available_at = now() WHERE id = $1`, first); err != nil {
		t.Fatal(err)
	}
	r.Wake()
	testenv.Eventually(t, 20*time.Second, func() bool { return hookRC.delivered(first) && hookRC.delivered(second) },
		"hook gets events 1 and 2 once event 1 is released")
	hookRC.checkOrder(t)
	testenv.Eventually(t, 20*time.Second, func() bool { return countStatus(t, db, "dispatched") == 4 }, "every event dispatched")
}
