package relay_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/delivery"
	"github.com/searchsync/searchsync/internal/config"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/outbox/outboxadmin"
	"github.com/searchsync/searchsync/relay"
	"github.com/searchsync/searchsync/sink"
)

func TestDeliversInOrderRoutesAndSkips(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	rc := newReceiver(t)
	cfg := fast()
	route := config.Route{Consumer: "hook", EventTypes: []string{"entity.customer.*"}}
	cfg.Routes = []relay.Route{{Consumer: newHook("hook", rc.URL), Match: route.Rule("webhook").Matches}}
	r, _ := start(t, db, cfg)

	aggs := make([]uuid.UUID, 10)
	var want []int64
	for i := range aggs {
		aggs[i] = uuid.New()
	}
	for n := range 30 {
		for i := range aggs {
			want = append(want, write(t, db, event(&aggs[i], "entity.customer.updated", "DDM_ENTITY", n))...)
		}
	}
	skipped := write(t, db, event(&aggs[0], "entity.order.created", "DDM_ENTITY", 99))[0]
	free := write(t, db, event(nil, "entity.customer.imported", "DDM_ENTITY", 1), event(nil, "entity.customer.imported", "DDM_ENTITY", 2))

	testenv.Eventually(t, 30*time.Second, func() bool { return countStatus(t, db, "pending") == 0 }, "all events handled")
	if got := countStatus(t, db, "dispatched"); got != len(want)+len(free) {
		t.Errorf("dispatched %d, want %d", got, len(want)+len(free))
	}
	if got := getRow(t, db, skipped); got.Status != "skipped" || got.Attempts != 0 || got.Dispatched != nil {
		t.Errorf("unrouted event: %+v, want skipped", got)
	}
	for _, id := range append(want, free...) {
		if !rc.delivered(id) {
			t.Fatalf("event %d never arrived", id)
		}
		if got := getRow(t, db, id); got.Dispatched == nil {
			t.Fatalf("event %d: no dispatched_at", id)
		}
	}
	if rc.delivered(skipped) {
		t.Error("the unrouted event was delivered")
	}
	rc.checkOrder(t)
	// A batch is recorded (stats, OnBatch) after its ack commits: the
	// outbox can show every event handled a moment before the stats do.
	var st relay.Stats
	testenv.Eventually(t, 10*time.Second, func() bool {
		st = r.Stats()
		return st.Dispatched+st.Skipped >= uint64(len(want)+len(free)+1)
	}, "every batch recorded")
	if st.Dispatched != uint64(len(want)+len(free)) || st.Skipped != 1 || st.Partitions != 8 {
		t.Errorf("stats %+v", st)
	}
	if ok, msg := r.Ready(); !ok {
		t.Errorf("not ready: %s", msg)
	}
}

// A failing endpoint: attempts, last_error and available_at evolve with the
// configured backoff; after max_attempts the event is failed and its aggregate
// blocked while others flow; the operator's retry releases it.
func TestFailingEndpointBacksOffFailsAndBlocksOnlyItsAggregate(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	rc := newReceiver(t)
	bad, good := uuid.New(), uuid.New()
	rc.setStatus(func(m sink.Message) int {
		if *m.AggregateID == bad {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	cfg := fast()
	cfg.PollInterval = 30 * time.Second // retries must come on time without polling
	cfg.MaxAttempts = 4
	cfg.Backoff = relay.Backoff{Initial: 200 * time.Millisecond, Max: 500 * time.Millisecond, Multiplier: 2, Jitter: 0.1}
	cfg.Routes = []relay.Route{{Consumer: newHook("hook", rc.URL)}}
	log := &testenv.LogBuffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(log, nil))
	start(t, db, cfg)

	ids := write(t, db, event(&bad, "entity.customer.updated", "DDM_ENTITY", 1), event(&bad, "entity.customer.updated", "DDM_ENTITY", 2))
	head, behind := ids[0], ids[1]

	// Watch the head evolve.
	prev := row{}
	for attempts := 1; attempts <= 3; attempts++ {
		var got row
		testenv.Eventually(t, 10*time.Second, func() bool { got = getRow(t, db, head); return got.Attempts >= attempts }, "attempt %d", attempts)
		if got.Status != "pending" || got.Attempts != attempts {
			t.Fatalf("after attempt %d: %+v", attempts, got)
		}
		if got.LastError == nil || !strings.HasPrefix(*got.LastError, "hook: HTTP 503") {
			t.Fatalf("last_error %v, want hook: HTTP 503 …", got.LastError)
		}
		if !got.AvailableAt.After(prev.AvailableAt) {
			t.Fatalf("available_at did not move: %v then %v", prev.AvailableAt, got.AvailableAt)
		}
		prev = got
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return getRow(t, db, head).Status == "failed" }, "head failed after max_attempts")
	// The retries speak: the first one at once, the next ones counted
	// into a line at most every 10 s (the three came within 1.2 s).
	postponed := `level=INFO msg="relay: events postponed for a consumer; their aggregates back off until the retry (docs/operations.md)" consumer=hook events=1 retry_in=`
	if n := strings.Count(log.String(), "events postponed"); n != 1 || !strings.Contains(log.String(), postponed) {
		t.Errorf("%d postponement lines, want 1 such as %s:\n%s", n, postponed, log.String())
	}
	if got := getRow(t, db, head); got.Attempts != 4 || !strings.Contains(*got.LastError, "503") {
		t.Errorf("failed head: %+v", got)
	}
	// The gaps between attempts follow the backoff: 200ms, 400ms, 500ms (cap), ±10%.
	times := rc.attemptTimes(head)
	if len(times) != 4 {
		t.Fatalf("%d attempts arrived, want 4", len(times))
	}
	for i, want := range []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 500 * time.Millisecond} {
		if gap := times[i+1].Sub(times[i]); gap < want*9/10 || gap > want*11/10+time.Second {
			t.Errorf("gap %d: %s, want about %s", i+1, gap, want)
		}
	}

	// The aggregate is blocked; another flows.
	ok := write(t, db, event(&good, "entity.customer.updated", "DDM_ENTITY", 1), event(&good, "entity.customer.updated", "DDM_ENTITY", 2))
	testenv.Eventually(t, 10*time.Second, func() bool { return rc.delivered(ok[0]) && rc.delivered(ok[1]) }, "other aggregate delivered")
	if got := getRow(t, db, behind); got.Status != "pending" || got.Attempts != 0 || got.LastError != nil {
		t.Errorf("event behind the failed head: %+v, want untouched pending", got)
	}
	if len(rc.attemptTimes(behind)) != 0 {
		t.Error("event behind the failed head was sent")
	}

	// The operator retries (what `searchsync outbox retry --id` runs; it
	// notifies the relays).
	rc.setStatus(nil)
	ch, err := outboxadmin.New(db.Schema).Retry(context.Background(), db.Pool, outboxadmin.Filter{IDs: []int64{head}}, outboxadmin.ChangeOptions{By: "test"})
	if err != nil || ch.Count != 1 {
		t.Fatalf("outbox retry: %+v, %v", ch, err)
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return getRow(t, db, behind).Status == "dispatched" }, "released aggregate delivered")
	if got := getRow(t, db, head); got.Status != "dispatched" {
		t.Errorf("head after retry: %+v", got)
	}
	rc.checkOrder(t)
}

// A poison event fails at once, the events behind it wait, and the relay
// says so: a WARN with the event's id, type, aggregate, consumer and reason.
// Many failures in one batch: five lines, then one that counts the rest per
// consumer and reason.
func TestPoisonFailsAtOnce(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	rc := newReceiver(t)
	rc.setStatus(poisonBroken)
	cfg := fast()
	cfg.Routes = []relay.Route{{Consumer: newHook("hook", rc.URL)}}
	log := &testenv.LogBuffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(log, nil))
	start(t, db, cfg)
	agg := uuid.New()
	ids := write(t, db, event(&agg, "entity.customer.broken", "DDM_ENTITY", 1), event(&agg, "entity.customer.updated", "DDM_ENTITY", 2))
	testenv.Eventually(t, 10*time.Second, func() bool { return getRow(t, db, ids[0]).Status == "failed" }, "poison failed")
	got := getRow(t, db, ids[0])
	if got.Attempts != 1 || got.LastError == nil || !strings.HasPrefix(*got.LastError, "hook: HTTP 422") {
		t.Errorf("poison: %+v %v", got, *got.LastError)
	}
	if got := getRow(t, db, ids[1]); got.Status != "pending" || got.Attempts != 0 {
		t.Errorf("behind poison: %+v", got)
	}
	line := fmt.Sprintf(`level=WARN msg="relay: event failed: its aggregate waits for an operator (searchsync outbox retry or ack)" event_id=%d event_type=entity.customer.broken aggregate=DDM_ENTITY/%s consumer=hook attempts=1 reason="HTTP 422`, ids[0], agg)
	testenv.Eventually(t, 10*time.Second, func() bool { return strings.Contains(log.String(), line) }, "the failure logged as %s", line)

	// Eight poisons of eight aggregates in one batch.
	var many []outbox.Event
	for range 8 {
		a := uuid.New()
		many = append(many, event(&a, "entity.customer.broken", "DDM_ENTITY", 1))
	}
	write(t, db, many...) // one transaction: one claim takes them all
	testenv.Eventually(t, 10*time.Second, func() bool { return countStatus(t, db, "failed") == 9 }, "nine failed")
	testenv.Eventually(t, 10*time.Second, func() bool {
		return strings.Count(log.String(), "relay: event failed") >= 6 && strings.Contains(log.String(), "more events failed")
	}, "the batch's failures logged")
	if n := strings.Count(log.String(), "relay: event failed"); n != 6 {
		t.Errorf("%d failure lines, want 1 + 5 (the rest counted):\n%s", n, log.String())
	}
	if !strings.Contains(log.String(), `events=3 by_reason="3 × hook: HTTP 422`) {
		t.Errorf("no summary of the other 3 failures:\n%s", log.String())
	}
}

// An earlier event whose available_at lies in the future holds back its
// aggregate (and only it); events without an aggregate flow freely.
func TestFutureHeadBlocksItsAggregateOnly(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	rc := newReceiver(t)
	held, other := uuid.New(), uuid.New()
	ids := write(t, db, event(&held, "entity.customer.updated", "DDM_ENTITY", 1), event(&held, "entity.customer.updated", "DDM_ENTITY", 2))
	if _, err := db.Pool.Exec(context.Background(), `UPDATE aa_outbox_event SET available_at = now() + interval '3 seconds' WHERE id = $1`, ids[0]); err != nil {
		t.Fatal(err)
	}
	cfg := fast()
	cfg.Routes = []relay.Route{{Consumer: newHook("hook", rc.URL)}}
	start(t, db, cfg)
	free := write(t, db, event(nil, "entity.customer.imported", "DDM_ENTITY", 1))
	more := write(t, db, event(&other, "entity.customer.updated", "DDM_ENTITY", 1))
	testenv.Eventually(t, 10*time.Second, func() bool { return rc.delivered(free[0]) && rc.delivered(more[0]) }, "free and other delivered")
	if rc.delivered(ids[1]) || rc.delivered(ids[0]) {
		t.Fatal("held aggregate delivered before its head became available")
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return rc.delivered(ids[1]) }, "held aggregate delivered once its head is available")
	rc.checkOrder(t)
}

// blockingHook holds Deliver until released, to act between claim and ack.
type blockingHook struct {
	entered chan struct{}
	release chan struct{}
}

func (b *blockingHook) Name() string { return "blocking" }
func (b *blockingHook) Deliver(ctx context.Context, events []*outbox.Event) []delivery.Outcome {
	select {
	case b.entered <- struct{}{}:
	default:
	}
	<-b.release
	out := make([]delivery.Outcome, len(events))
	for i := range out {
		out[i] = delivery.Ok()
	}
	return out
}

// startBlocked starts a relay over partitions partitions whose consumer
// blocks every delivery until bh.release is closed; no lease renewal
// interferes (the next heartbeat is 40 s away).
func startBlocked(t *testing.T, partitions int) (*testenv.DB, *relay.Relay, *blockingHook) {
	t.Helper()
	db := testenv.NewDB(t)
	bh := &blockingHook{entered: make(chan struct{}, 10), release: make(chan struct{})}
	cfg := fast()
	cfg.Partitions = partitions
	cfg.LeaseTTL = 2 * time.Minute
	cfg.Routes = []relay.Route{{Consumer: bh}}
	r, _ := start(t, db, cfg)
	return db, r, bh
}

// An instance that lost its lease while delivering cannot record outcomes.
func TestAckIsFencedByTheLease(t *testing.T) {
	t.Parallel()
	db, r, bh := startBlocked(t, 1)
	agg := uuid.New()
	id := write(t, db, event(&agg, "entity.customer.updated", "DDM_ENTITY", 1))[0]
	select {
	case <-bh.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery")
	}
	// Another instance takes partition 0 over (as after an expiry).
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `UPDATE aa_relay_lease SET owner = 'intruder', epoch = epoch + 1 WHERE partition = 0`); err != nil {
		t.Fatal(err)
	}
	// The relay's heartbeat is held up (its instance row locked), as on a
	// slow database: the renewal that would tell it of the loss does not
	// return for a while.
	hold, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback(ctx)
	if _, err := hold.Exec(ctx, `SELECT 1 FROM aa_relay_instance FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	close(bh.release)
	testenv.Eventually(t, 10*time.Second, func() bool { return r.Stats().Fenced >= 1 }, "ack fenced")
	// The fenced ack puts the partition in doubt: no claim takes its events
	// again until a renewal says whether it is still held (before, the
	// relay claimed, delivered and acked them again and again, every ack
	// fenced, until the renewal returned: 58 times in one CI run).
	claims := r.Stats().Claims
	quiet := time.Now().Add(time.Second)
	testenv.Eventually(t, 5*time.Second, func() bool { return time.Now().After(quiet) }, "a second with the heartbeat held up")
	if f := r.Stats().Fenced; f != 1 {
		t.Errorf("%d fenced acks while the renewal was held up: the relay went on claiming a partition in doubt", f)
	}
	if n := r.Stats().Claims - claims; n > 0 {
		t.Errorf("%d claims of a partition in doubt", n)
	}
	if err := hold.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// The renewal, run at once after the fence (not at the next heartbeat,
	// 40 s after the start), drops the lost partition.
	testenv.Eventually(t, 15*time.Second, func() bool { return r.Stats().Partitions == 0 }, "lost partition dropped")
	if got := getRow(t, db, id); got.Status != "pending" || got.Attempts != 0 {
		t.Errorf("fenced event: %+v, want untouched", got)
	}
}

// A batch whose claim spanned a partition lost while it was delivered is
// acked partition by partition: its events in the partitions still held are
// dispatched, those in the lost one stay as they were. (The lean ack of a
// batch claimed under partitions that are all still held picks its rows by
// id alone; here it must change nothing and leave the rest to the fallback.)
func TestAckOfABatchThatSpannedALostPartition(t *testing.T) {
	t.Parallel()
	db, r, bh := startBlocked(t, 2)
	testenv.Eventually(t, 10*time.Second, func() bool { return r.Stats().Partitions == 2 }, "both partitions owned")
	ctx := context.Background()
	// One aggregate in each partition.
	var aggs [2]*uuid.UUID
	for aggs[0] == nil || aggs[1] == nil {
		a := uuid.New()
		var part int
		if err := db.Pool.QueryRow(ctx, `SELECT abs(hashtextextended('DDM_ENTITY/' || $1::text, 0) % 2)::int`, a).Scan(&part); err != nil {
			t.Fatal(err)
		}
		if aggs[part] == nil {
			aggs[part] = &a
		}
	}
	ids := write(t, db, event(aggs[0], "entity.customer.updated", "DDM_ENTITY", 1), event(aggs[1], "entity.customer.updated", "DDM_ENTITY", 1))
	select {
	case <-bh.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery")
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE aa_relay_lease SET owner = 'intruder', epoch = epoch + 1 WHERE partition = 1`); err != nil {
		t.Fatal(err)
	}
	close(bh.release)
	testenv.Eventually(t, 10*time.Second, func() bool { return r.Stats().Fenced >= 1 }, "ack fenced")
	if got := getRow(t, db, ids[0]); got.Status != "dispatched" {
		t.Errorf("event of the partition still held: %+v, want dispatched", got)
	}
	if got := getRow(t, db, ids[1]); got.Status != "pending" || got.Attempts != 0 || got.Dispatched != nil {
		t.Errorf("event of the lost partition: %+v, want untouched", got)
	}
	if f := r.Stats().Fenced; f != 1 {
		t.Errorf("%d outcomes fenced, want 1", f)
	}
}

// Two instances split the partitions; when one stops the other takes all.
func TestInstancesShareAndTakeOverPartitions(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	rc := newReceiver(t)
	cfg := fast()
	cfg.Routes = []relay.Route{{Consumer: newHook("hook", rc.URL)}}
	a, _ := start(t, db, cfg)
	testenv.Eventually(t, 10*time.Second, func() bool { return a.Stats().Partitions == 8 }, "first instance owns all")
	b, stopB := start(t, db, cfg)
	testenv.Eventually(t, 10*time.Second, func() bool { return a.Stats().Partitions == 4 && b.Stats().Partitions == 4 }, "4 + 4")
	var owners int
	db.Pool.QueryRow(context.Background(), `SELECT count(DISTINCT owner) FROM aa_relay_lease WHERE expires_at > now()`).Scan(&owners)
	if owners != 2 {
		t.Errorf("%d owners in aa_relay_lease, want 2", owners)
	}
	stopB()
	testenv.Eventually(t, 10*time.Second, func() bool { return a.Stats().Partitions == 8 }, "survivor owns all after a graceful stop")
	aggs := []uuid.UUID{uuid.New(), uuid.New(), uuid.New()}
	var ids []int64
	for i := range 30 {
		ids = append(ids, write(t, db, event(&aggs[i%3], "entity.customer.updated", "DDM_ENTITY", i))...)
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return rc.distinct() == len(ids) }, "all delivered")
	rc.checkOrder(t)
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	if _, err := relay.New(db.Pool, relay.Config{Partitions: 5000}); err == nil || !strings.Contains(err.Error(), "partitions") {
		t.Errorf("partitions 5000: %v", err)
	}
}

// Relays of one database must agree on the partition count.
func TestRefusesAnotherPartitionCount(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	a, _ := start(t, db, fast())
	testenv.Eventually(t, 10*time.Second, func() bool { ok, _ := a.Ready(); return ok }, "first relay ready")
	cfg := fast()
	cfg.Schema = db.Schema
	cfg.Partitions = 4
	b, err := relay.New(db.Pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Run(ctx); err == nil || !strings.Contains(err.Error(), "relay.partitions = 8") {
		t.Errorf("Run with 4 partitions beside a relay with 8: %v", err)
	}
}

// A retried head becomes available later than the events behind it, so a
// claim by available_at finds the followers first. The head must still be
// found, and the followers must not crowd out other aggregates.
func TestRetriedHeadBehindItsFollowersIsNotStarved(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	rc := newReceiver(t)
	a, b := uuid.New(), uuid.New()
	var evs []outbox.Event
	for i := range 250 {
		evs = append(evs, event(&a, "entity.customer.updated", "DDM_ENTITY", i))
	}
	idsA := write(t, db, evs...)
	idsB := write(t, db, event(&b, "entity.customer.updated", "DDM_ENTITY", 1), event(&b, "entity.customer.updated", "DDM_ENTITY", 2))
	ctx := context.Background()
	// As after two failed tries: the head's available_at is now, the
	// followers' an hour ago; B's events sort after all of A's followers.
	if _, err := db.Pool.Exec(ctx, `UPDATE aa_outbox_event SET available_at = now() - interval '1 hour' WHERE id = ANY($1)`, idsA[1:]); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE aa_outbox_event SET attempts = 2, last_error = 'hook: HTTP 503', available_at = now() WHERE id = $1`, idsA[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE aa_outbox_event SET available_at = now() - interval '1 minute' WHERE id = ANY($1)`, idsB); err != nil {
		t.Fatal(err)
	}
	cfg := fast()
	cfg.BatchSize = 50
	cfg.Routes = []relay.Route{{Consumer: newHook("hook", rc.URL)}}
	start(t, db, cfg)
	testenv.Eventually(t, 30*time.Second, func() bool { return rc.distinct() == len(idsA)+len(idsB) }, "all delivered (have %d)", rc.distinct())
	rc.checkOrder(t)
}

type panicky struct{}

func (panicky) Name() string { return "panicky" }
func (panicky) Deliver(context.Context, []*outbox.Event) []delivery.Outcome {
	panic("boom")
}

// A consumer that panics does not stop the relay; its events are retried.
func TestPanickingConsumerIsARetry(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	rc := newReceiver(t)
	cfg := fast()
	route := config.Route{Consumer: "panicky", EventTypes: []string{"entity.broken.*"}}
	cfg.Routes = []relay.Route{{Consumer: panicky{}, Match: route.Rule("webhook").Matches}, {Consumer: newHook("hook", rc.URL)}}
	start(t, db, cfg)
	a, b := uuid.New(), uuid.New()
	bad := write(t, db, event(&a, "entity.broken.updated", "DDM_ENTITY", 1))[0]
	good := write(t, db, event(&b, "entity.customer.updated", "DDM_ENTITY", 1))[0]
	testenv.Eventually(t, 10*time.Second, func() bool { return getRow(t, db, bad).Attempts >= 1 }, "panic counted as an attempt")
	if got := getRow(t, db, bad); got.LastError == nil || *got.LastError != "panicky: panic: boom" {
		t.Errorf("last_error %v", got.LastError)
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return getRow(t, db, good).Status == "dispatched" }, "others flow")
}
