package relay_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/outbox/outboxadmin"
	"github.com/searchsync/searchsync/relay"
)

// TestSkipReleasesTheAggregate: a poison head blocks its aggregate; the
// operator's skip (what `searchsync outbox skip` runs) lets the relay claim
// and deliver the events behind it, and the skipped one is never sent again.
func TestSkipReleasesTheAggregate(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	rc := newReceiver(t)
	rc.setStatus(poisonBroken)
	cfg := fast()
	cfg.PollInterval = 30 * time.Second // the skip's NOTIFY must wake the relay
	cfg.Routes = []relay.Route{{Consumer: newHook("hook", rc.URL)}}
	start(t, db, cfg)
	agg := uuid.New()
	ids := write(t, db, event(&agg, "entity.customer.broken", "DDM_ENTITY", 1), event(&agg, "entity.customer.updated", "DDM_ENTITY", 2))
	testenv.Eventually(t, 20*time.Second, func() bool { return getRow(t, db, ids[0]).Status == "failed" }, "poison failed")
	if rc.delivered(ids[1]) {
		t.Fatal("the event behind the failed head was delivered")
	}
	ch, err := outboxadmin.New(db.Schema).Skip(context.Background(), db.Pool, outboxadmin.Filter{IDs: []int64{ids[0]}}, outboxadmin.ChangeOptions{By: "test"})
	if err != nil || ch.Count != 1 {
		t.Fatalf("outbox skip: %+v, %v", ch, err)
	}
	testenv.Eventually(t, 20*time.Second, func() bool { return getRow(t, db, ids[1]).Status == "dispatched" }, "the event behind the skipped head delivered")
	if got := getRow(t, db, ids[0]); got.Status != "skipped" || got.LastError == nil || len(rc.attemptTimes(ids[0])) != 1 {
		t.Errorf("skipped head: %+v, sent %d times", got, len(rc.attemptTimes(ids[0])))
	}
}

// TestSkipReleasesTheConsumer: a head parked by one consumer (its delivery
// row failed, the other consumer has it) blocks that consumer only; a skip
// marks the row done and that consumer gets the events behind it.
func TestSkipReleasesTheConsumer(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	a, b := newReceiver(t), newReceiver(t)
	b.setStatus(poisonBroken)
	cfg := outageConfig()
	cfg.Routes = []relay.Route{{Consumer: newHook("a", a.URL)}, {Consumer: newHook("b", b.URL)}}
	start(t, db, cfg)
	agg := uuid.New()
	ids := write(t, db, event(&agg, "entity.customer.broken", "DDM_ENTITY", 1))
	testenv.Eventually(t, 20*time.Second, func() bool { return getRow(t, db, ids[0]).Status == "failed" && a.delivered(ids[0]) }, "parked by b, delivered to a")
	behind := write(t, db, event(&agg, "entity.customer.updated", "DDM_ENTITY", 2))
	testenv.Eventually(t, 20*time.Second, func() bool { return a.delivered(behind[0]) }, "a gets the next event")
	if b.delivered(behind[0]) {
		t.Fatal("b got an event behind the one it parked")
	}
	ch, err := outboxadmin.New(db.Schema).Skip(context.Background(), db.Pool, outboxadmin.Filter{AggregateID: &agg}, outboxadmin.ChangeOptions{By: "test"})
	if err != nil || ch.Count != 1 || ch.Events[0].ID != ids[0] {
		t.Fatalf("outbox skip: %+v, %v", ch, err)
	}
	testenv.Eventually(t, 20*time.Second, func() bool { return b.delivered(behind[0]) && getRow(t, db, behind[0]).Status == "dispatched" },
		"b gets the event behind the skipped one")
	if got := getRow(t, db, ids[0]); got.Status != "skipped" {
		t.Errorf("skipped head: %+v", got)
	}
	if st := scalar[string](t, db, `SELECT state FROM aa_outbox_delivery WHERE event_id = $1 AND consumer = 'b'`, ids[0]); st != "done" {
		t.Errorf("b's row of the skipped event: %s, want done", st)
	}
}
