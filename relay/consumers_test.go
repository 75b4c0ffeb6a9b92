package relay_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/relay"
	"github.com/searchsync/searchsync/sink"
)

// producer writes events for aggs (round robin) until stopped, and records
// their ids and when they were committed.
type producer struct {
	mu  sync.Mutex
	ids []int64
	at  map[int64]time.Time
}

func produceSteadily(t *testing.T, db *testenv.DB, aggs []uuid.UUID, every time.Duration) (p *producer, stop func()) {
	p = &producer{at: map[int64]time.Time{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tk := time.NewTicker(every)
		defer tk.Stop()
		for n := 1; ctx.Err() == nil; n++ {
			a := aggs[n%len(aggs)]
			ids := write(t, db, event(&a, "entity.customer.updated", "DDM_ENTITY", n))
			p.mu.Lock()
			p.ids = append(p.ids, ids...)
			p.at[ids[0]] = time.Now()
			p.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-tk.C:
			}
		}
	}()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return p, stop
}

// committedBefore lists the ids committed before t.
func (p *producer) committedBefore(t time.Time) []int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []int64
	for _, id := range p.ids {
		if p.at[id].Before(t) {
			out = append(out, id)
		}
	}
	return out
}

func (p *producer) all() []int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]int64(nil), p.ids...)
}

func scalar[T any](t testing.TB, db *testenv.DB, q string, args ...any) T {
	t.Helper()
	var v T
	if err := db.Pool.QueryRow(context.Background(), q, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return v
}

// outageConfig attempts would run out within about a second: the short
// form of "an outage longer than all attempts last".
func outageConfig() relay.Config {
	cfg := fast()
	cfg.MaxAttempts = 3
	cfg.Backoff = relay.Backoff{Initial: 50 * time.Millisecond, Max: 200 * time.Millisecond, Multiplier: 2}
	cfg.Pause = relay.Pause{ProbeInitial: 100 * time.Millisecond, ProbeMax: time.Second}
	return cfg
}

// TestOutagePausesTheConsumerInsteadOfFailingEvents: an endpoint that
// refuses everything for far longer than the attempts last, with load
// before, during and after. Nothing fails, no attempt is counted, the
// consumer shows as paused, and the backlog drains within seconds of the
// endpoint's return.
func TestOutagePausesTheConsumerInsteadOfFailingEvents(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	rc := newReceiver(t)
	h := newHook("hook", rc.URL)
	h.outages = true
	cfg := outageConfig()
	cfg.Routes = []relay.Route{{Consumer: h}}
	start(t, db, cfg)

	aggs := make([]uuid.UUID, 20)
	for i := range aggs {
		aggs[i] = uuid.New()
	}
	p, stopProducing := produceSteadily(t, db, aggs, 10*time.Millisecond)
	testenv.Eventually(t, 20*time.Second, func() bool { return rc.distinct() >= 50 }, "load flows before the outage")

	rc.setStatus(func(sink.Message) int { return http.StatusServiceUnavailable })
	down := time.Now()
	testenv.Eventually(t, 20*time.Second, func() bool {
		return scalar[int](t, db, `SELECT count(*) FROM aa_outbox_consumer WHERE consumer = 'hook' AND state = 'paused'`) == 1
	}, "the consumer is paused")
	// 15 s: fifteen times as long as every attempt of an event lasts, and
	// until 100 events wait (a loaded machine commits fewer per second), at
	// most a minute.
	for time.Since(down) < 15*time.Second || countStatus(t, db, "pending") < 100 && time.Since(down) < time.Minute {
		if n := countStatus(t, db, "failed"); n > 0 {
			t.Fatalf("%d events failed during the outage", n)
		}
		if n := scalar[int](t, db, `SELECT count(*) FROM aa_outbox_event WHERE status = 'pending' AND attempts > 0`); n > 0 {
			t.Fatalf("%d pending events had attempts counted during the outage", n)
		}
		time.Sleep(500 * time.Millisecond) // sampling the state while the outage lasts
	}
	reason := scalar[string](t, db, `SELECT reason FROM aa_outbox_consumer WHERE consumer = 'hook'`)
	if !strings.Contains(reason, "503") {
		t.Errorf("pause reason %q does not say what the endpoint answered", reason)
	}
	backlog := countStatus(t, db, "pending")
	if backlog < 100 {
		t.Fatalf("only %d events waited during the outage", backlog)
	}

	rc.setStatus(nil)
	back := time.Now()
	before := rc.distinct()
	// Under a second on a quiet machine (logged below); the deadline leaves
	// room for a loaded one.
	testenv.Eventually(t, 15*time.Second, func() bool { return rc.distinct() > before+10 }, "delivery resumes within 15 s of the endpoint's return")
	t.Logf("backlog %d; first deliveries %s after the return", backlog, time.Since(back).Round(time.Millisecond))
	stopProducing()
	testenv.Eventually(t, 30*time.Second, func() bool { return countStatus(t, db, "pending") == 0 }, "the backlog drains")
	if n := countStatus(t, db, "failed"); n != 0 {
		t.Errorf("%d events failed", n)
	}
	for _, id := range p.all() {
		if !rc.delivered(id) {
			t.Fatalf("event %d never arrived", id)
		}
	}
	rc.checkOrder(t)
	if n := scalar[int](t, db, `SELECT count(*) FROM aa_outbox_delivery`); n != 0 {
		t.Errorf("%d delivery rows left after everything was dispatched", n)
	}
	if st := scalar[string](t, db, `SELECT state FROM aa_outbox_consumer WHERE consumer = 'hook'`); st != "running" {
		t.Errorf("consumer state %q after the outage, want running", st)
	}
}

// TestConsumersAreIndependent: two consumers of the same events, one of them
// down for a while. The healthy one keeps pace, receives every event once
// and in order; the other receives everything in order after its return;
// the outbox rows are dispatched when both have them.
func TestConsumersAreIndependent(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	good, bad := newReceiver(t), newReceiver(t)
	hg, hb := newHook("search", good.URL), newHook("hook", bad.URL)
	hg.outages, hb.outages = true, true
	cfg := outageConfig()
	cfg.Routes = []relay.Route{{Consumer: hg}, {Consumer: hb}}
	r, _ := start(t, db, cfg)

	aggs := make([]uuid.UUID, 30)
	for i := range aggs {
		aggs[i] = uuid.New()
	}
	bad.setStatus(func(sink.Message) int { return http.StatusBadGateway })
	down := time.Now()
	p, stopProducing := produceSteadily(t, db, aggs, 5*time.Millisecond)
	for time.Since(down) < 10*time.Second {
		// Everything committed a second ago has reached the healthy consumer.
		want := p.committedBefore(time.Now().Add(-time.Second))
		testenv.Eventually(t, 15*time.Second, func() bool {
			for _, id := range want {
				if !good.delivered(id) {
					return false
				}
			}
			return true
		}, "the healthy consumer keeps pace while the other is down")
		time.Sleep(500 * time.Millisecond) // sampling while the outage lasts
	}
	if n := countStatus(t, db, "failed"); n != 0 {
		t.Fatalf("%d events failed while one consumer was down", n)
	}
	if n := scalar[int](t, db, `SELECT count(*) FROM aa_outbox_delivery WHERE consumer = 'search' AND state = 'done'`); n == 0 {
		t.Fatal("no delivery rows record what the healthy consumer has")
	}
	bad.setStatus(nil)
	stopProducing()
	testenv.Eventually(t, 30*time.Second, func() bool { return countStatus(t, db, "pending") == 0 }, "the backlog drains")
	for _, id := range p.all() {
		if !good.delivered(id) || !bad.delivered(id) {
			t.Fatalf("event %d: healthy consumer %v, returned consumer %v", id, good.delivered(id), bad.delivered(id))
		}
	}
	good.checkOrder(t)
	bad.checkOrder(t)
	good.mu.Lock()
	for id, n := range good.count {
		if n != 1 {
			t.Errorf("the healthy consumer received event %d %d times", id, n)
		}
	}
	good.mu.Unlock()
	if n := scalar[int](t, db, `SELECT count(*) FROM aa_outbox_delivery`); n != 0 {
		t.Errorf("%d delivery rows left after everything was dispatched", n)
	}
	if n := scalar[int](t, db, `SELECT count(*) FROM aa_outbox_event WHERE dispatched_at IS NULL`); n != 0 {
		t.Errorf("%d events without dispatched_at", n)
	}
	// Every request carried the lease token of its partition.
	epochs := map[int]int64{}
	rows, err := db.Pool.Query(context.Background(), `SELECT partition, epoch FROM aa_relay_lease`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var p int
		var e int64
		if err := rows.Scan(&p, &e); err != nil {
			t.Fatal(err)
		}
		epochs[p] = e
	}
	hg.mu.Lock()
	for _, tk := range hg.tokens {
		if !tk.ok || tk.epoch < 1 || tk.epoch > epochs[tk.part] {
			t.Errorf("event %d carried token %+v; lease epochs %v", tk.id, tk, epochs)
			break
		}
	}
	hg.mu.Unlock()
	if st := r.Stats(); st.Failed != 0 {
		t.Errorf("stats: %+v", st)
	}
}

// TestPoisonAtOneConsumerBlocksOnlyThatConsumer: an event one consumer
// rejects for good fails for that consumer only; its aggregate stops there
// for that consumer while the other consumer receives everything.
func TestPoisonAtOneConsumerBlocksOnlyThatConsumer(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	a, b := newReceiver(t), newReceiver(t)
	cfg := outageConfig()
	cfg.Routes = []relay.Route{{Consumer: newHook("a", a.URL)}, {Consumer: newHook("b", b.URL)}}
	start(t, db, cfg)

	x, y := uuid.New(), uuid.New()
	var poisonID atomic.Int64
	b.setStatus(func(m sink.Message) int {
		if m.ID == poisonID.Load() {
			return http.StatusUnprocessableEntity
		}
		return http.StatusOK
	})
	first := write(t, db, event(&x, "entity.customer.updated", "DDM_ENTITY", 1))
	testenv.Eventually(t, 10*time.Second, func() bool { return a.delivered(first[0]) && b.delivered(first[0]) }, "first event at both")
	var evs []outbox.Event
	for n := 2; n <= 6; n++ {
		evs = append(evs, event(&x, "entity.customer.updated", "DDM_ENTITY", n), event(&y, "entity.customer.updated", "DDM_ENTITY", n))
	}
	// The poison is the first of the next batch for x.
	next := scalar[int64](t, db, `SELECT coalesce(max(id), 0) + 1 FROM aa_outbox_event`)
	poisonID.Store(next)
	ids := write(t, db, evs...)
	if ids[0] != next {
		t.Fatalf("poison id %d, want %d", ids[0], next)
	}
	var xs, ys []int64
	for i, id := range ids {
		if i%2 == 0 {
			xs = append(xs, id)
		} else {
			ys = append(ys, id)
		}
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		for _, id := range ids {
			if !a.delivered(id) {
				return false
			}
		}
		for _, id := range ys {
			if !b.delivered(id) {
				return false
			}
		}
		return true
	}, "consumer a gets everything, consumer b everything of the other aggregate")
	for _, id := range xs {
		if b.delivered(id) {
			t.Errorf("consumer b received event %d of the aggregate it parked", id)
		}
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return getRow(t, db, xs[0]).Status == "failed" }, "the parked event is failed")
	got := getRow(t, db, xs[0])
	if got.LastError == nil || !strings.HasPrefix(*got.LastError, "b: ") {
		t.Errorf("last_error %v does not name the consumer", got.LastError)
	}
	if st := scalar[string](t, db, `SELECT state FROM aa_outbox_delivery WHERE event_id = $1 AND consumer = 'b'`, xs[0]); st != "failed" {
		t.Errorf("b's row of the parked event: %s", st)
	}
	for _, id := range xs[1:] {
		if g := getRow(t, db, id); g.Status != "pending" {
			t.Errorf("event %d behind the parked one: %s, want pending (b still owes it)", id, g.Status)
		}
	}
	for _, id := range ys {
		if g := getRow(t, db, id); g.Status != "dispatched" {
			t.Errorf("event %d of the other aggregate: %s", id, g.Status)
		}
	}
	// Nothing is redelivered to a: its rows say done.
	a.mu.Lock()
	for id, n := range a.count {
		if n != 1 {
			t.Errorf("consumer a received event %d %d times", id, n)
		}
	}
	a.mu.Unlock()
}
