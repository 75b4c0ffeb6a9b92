package relay_test

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/relay"
	"github.com/searchsync/searchsync/sink/webhook"
)

// unlocked is a producer's open transaction that inserted one event of agg
// without the aggregate's advisory lock (what a plain-SQL producer that
// forgot it does).
type unlocked struct {
	tx pgx.Tx
	id int64
}

func insertUnlocked(t *testing.T, db *testenv.DB, agg uuid.UUID, version int) unlocked {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback(context.Background()) })
	var id int64
	if err := tx.QueryRow(ctx, `INSERT INTO aa_outbox_event (event_type, aggregate_type, aggregate_id, payload)
		VALUES ('entity.customer.updated', 'DDM_ENTITY', $1, jsonb_build_object('version', $2::int)) RETURNING id`, agg, version).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return unlocked{tx: tx, id: id}
}

func (u unlocked) commit(t *testing.T, db *testenv.DB) {
	t.Helper()
	if _, err := u.tx.Exec(context.Background(), "SELECT pg_notify($1, '')", db.Schema+".outbox"); err != nil {
		t.Fatal(err)
	}
	if err := u.tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// orderBundle is a relay delivering to a real webhook endpoint, with its
// log kept.
type orderBundle struct {
	db  *testenv.DB
	rc  *receiver
	r   *relay.Relay
	log *testenv.LogBuffer
}

// orderedConfig is a relay configuration that delivers to rc through the
// webhook consumer, logging to log.
func orderedConfig(t *testing.T, rc *receiver, log *testenv.LogBuffer) relay.Config {
	t.Helper()
	hook, err := webhook.New("hook", webhook.Config{URL: rc.URL, Secret: "s", Timeout: 5 * time.Second, Concurrency: 2}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := fast()
	cfg.Logger = slog.New(slog.NewTextHandler(log, nil))
	cfg.Routes = []relay.Route{{Consumer: hook}}
	return cfg
}

func startOrdered(t *testing.T, mod func(c *relay.Config)) *orderBundle {
	t.Helper()
	db := testenv.NewDB(t)
	rc := newReceiver(t)
	log := &testenv.LogBuffer{}
	cfg := orderedConfig(t, rc, log)
	if mod != nil {
		mod(&cfg)
	}
	r, _ := start(t, db, cfg)
	return &orderBundle{db: db, rc: rc, r: r, log: log}
}

func (b *orderBundle) order(agg uuid.UUID) []int64 {
	b.rc.mu.Lock()
	defer b.rc.mu.Unlock()
	return append([]int64(nil), b.rc.first["DDM_ENTITY/"+agg.String()]...)
}

func watermarkOff(c *relay.Config) { c.Watermark.Mode = "off" }

// TestOutOfOrderCommitIsDetected stages the interleaving a producer without
// the aggregate lock causes, with the watermark off: transaction A inserts
// event 1 of an aggregate and commits after transaction B inserted event 2
// of it and committed. The relay delivers 2, then 1 (at least once beats
// holding 1 back), and reports it: a WARN that names the aggregate, both ids
// and the hint, the Overtaken count, and a row of aa_outbox_overtaken.
func TestOutOfOrderCommitIsDetected(t *testing.T) {
	t.Parallel()
	b := startOrdered(t, watermarkOff)
	agg := uuid.New()
	a := insertUnlocked(t, b.db, agg, 1)
	bb := insertUnlocked(t, b.db, agg, 2)
	bb.commit(t, b.db)
	testenv.Eventually(t, 30*time.Second, func() bool { return len(b.order(agg)) == 1 }, "event 2 delivered")
	a.commit(t, b.db)
	testenv.Eventually(t, 30*time.Second, func() bool { return len(b.order(agg)) == 2 }, "event 1 delivered")
	if got := b.order(agg); got[0] != bb.id || got[1] != a.id {
		t.Fatalf("receiver got %v, want %d then %d (the staged interleaving)", got, bb.id, a.id)
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return b.r.Stats().Overtaken == 1 }, "one overtaken event counted (got %d)", b.r.Stats().Overtaken)
	var after int64
	var aggType string
	testenv.Eventually(t, 10*time.Second, func() bool {
		return b.db.Pool.QueryRow(context.Background(), `SELECT after_event_id, aggregate_type FROM aa_outbox_overtaken WHERE event_id = $1`, a.id).Scan(&after, &aggType) == nil
	}, "event %d recorded in aa_outbox_overtaken", a.id)
	if after != bb.id || aggType != "DDM_ENTITY" {
		t.Errorf("recorded after event %d of %s, want %d of DDM_ENTITY", after, aggType, bb.id)
	}
	log := b.log.String()
	for _, want := range []string{"level=WARN", "out of id order", "aggregate_id=" + agg.String(), "event_id=" + strconv.FormatInt(a.id, 10),
		"after_event_id=" + strconv.FormatInt(bb.id, 10), "advisory lock"} {
		if !strings.Contains(log, want) {
			t.Errorf("the relay's log lacks %q:\n%s", want, log)
		}
	}
	if got := getRow(t, b.db, a.id).Status; got != "dispatched" {
		t.Errorf("event 1 is %s, want dispatched", got)
	}
}

// TestWatermarkHoldsLaterEventsUntilEarlierCommit stages the same
// interleaving with the watermark on, beside a long transaction elsewhere in
// the database that never touches the outbox: event 2 is not delivered while
// A is open (the relay is sampling and holding it), then 1 and 2 arrive in
// id order as soon as A commits, although the unrelated transaction is
// still open; nothing is reported out of order. A rolled-back insert holds
// nothing back once it is gone.
func TestWatermarkHoldsLaterEventsUntilEarlierCommit(t *testing.T) {
	t.Parallel()
	b := startOrdered(t, nil)
	ctx := context.Background()
	// A long transaction with an xid that never writes to the outbox.
	other, err := b.db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback(ctx)
	if _, err := other.Exec(ctx, `CREATE TABLE unrelated (n int); INSERT INTO unrelated VALUES (1)`); err != nil {
		t.Fatal(err)
	}

	agg := uuid.New()
	a := insertUnlocked(t, b.db, agg, 1)
	bb := insertUnlocked(t, b.db, agg, 2)
	bb.commit(t, b.db)
	// The relay holds event 2: the oldest sample waits for A (and at first
	// for the unrelated transaction), for longer than the look-up of
	// pg_locks takes to drop the unrelated one.
	testenv.Eventually(t, 30*time.Second, func() bool { return b.r.Stats().WatermarkWait > 2*time.Second },
		"the watermark waits for the open insert (wait %s)", b.r.Stats().WatermarkWait)
	if got := b.order(agg); len(got) != 0 {
		t.Fatalf("delivered %v while the earlier insert was open", got)
	}
	a.commit(t, b.db)
	testenv.Eventually(t, 30*time.Second, func() bool { return len(b.order(agg)) == 2 }, "both events delivered after A committed, the unrelated transaction still open")
	if got := b.order(agg); got[0] != a.id || got[1] != bb.id {
		t.Fatalf("receiver got %v, want %d then %d", got, a.id, bb.id)
	}

	// A rolled-back insert: the next event flows once it is gone.
	agg2 := uuid.New()
	gone := insertUnlocked(t, b.db, agg2, 1)
	next := insertUnlocked(t, b.db, agg2, 2)
	next.commit(t, b.db)
	if err := gone.tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() bool { return len(b.order(agg2)) == 1 }, "the event after a rolled-back insert delivered")
	if st := b.r.Stats(); st.Overtaken != 0 || st.WatermarkGiveUps != 0 {
		t.Errorf("overtaken %d, give-ups %d: want none with the watermark on", st.Overtaken, st.WatermarkGiveUps)
	}
}

// TestWatermarkGivesUpAfterMaxWait keeps a producer's insert open beyond
// watermark.max_wait: the relay stops waiting for it with a WARN that names
// the transaction, delivers the later event, and reports the earlier one as
// out of order when it finally commits.
func TestWatermarkGivesUpAfterMaxWait(t *testing.T) {
	t.Parallel()
	b := startOrdered(t, func(c *relay.Config) { c.Watermark.MaxWait = time.Second })
	agg := uuid.New()
	a := insertUnlocked(t, b.db, agg, 1)
	bb := insertUnlocked(t, b.db, agg, 2)
	bb.commit(t, b.db)
	testenv.Eventually(t, 30*time.Second, func() bool { return len(b.order(agg)) == 1 }, "event 2 delivered after max_wait")
	if st := b.r.Stats(); st.WatermarkGiveUps < 1 {
		t.Errorf("give-ups %d, want at least 1", st.WatermarkGiveUps)
	}
	var xid int64
	if err := a.tx.QueryRow(context.Background(), "SELECT pg_current_xact_id()::text::bigint").Scan(&xid); err != nil {
		t.Fatal(err)
	}
	log := b.log.String()
	for _, want := range []string{"gave up waiting", "xid " + strconv.FormatInt(xid, 10) + " (pid "} {
		if !strings.Contains(log, want) {
			t.Errorf("the relay's log lacks %q:\n%s", want, log)
		}
	}
	a.commit(t, b.db)
	testenv.Eventually(t, 30*time.Second, func() bool { return b.r.Stats().Overtaken == 1 }, "the late event reported")
}

// TestOutOfOrderIsDetectedByTheNextOwner: the relay that delivered event 2
// stops (its leases released with the highest ids it claimed) before the
// earlier event 1 commits; the relay that takes the partitions over finds
// event 1 out of order all the same.
func TestOutOfOrderIsDetectedByTheNextOwner(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	rc := newReceiver(t)
	cfg := orderedConfig(t, rc, &testenv.LogBuffer{})
	cfg.Watermark.Mode = "off"
	first, stopFirst := start(t, db, cfg)
	b := &orderBundle{db: db, rc: rc, r: first}

	agg := uuid.New()
	a := insertUnlocked(t, db, agg, 1)
	bb := insertUnlocked(t, db, agg, 2)
	bb.commit(t, db)
	testenv.Eventually(t, 30*time.Second, func() bool { return len(b.order(agg)) == 1 }, "event 2 delivered")
	testenv.Eventually(t, 30*time.Second, func() bool { return getRow(t, db, bb.id).Status == "dispatched" }, "event 2 acked")
	stopFirst()
	a.commit(t, db)

	next, _ := start(t, db, cfg)
	testenv.Eventually(t, 30*time.Second, func() bool { return len(b.order(agg)) == 2 }, "event 1 delivered by the next owner")
	testenv.Eventually(t, 10*time.Second, func() bool { return next.Stats().Overtaken == 1 }, "the next owner reports event 1 (got %d)", next.Stats().Overtaken)
}
