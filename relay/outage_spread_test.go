package relay_test

import (
	"context"
	"fmt"
	"slices"
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

// TestPartitionsSpreadAfterADatabaseOutage takes the database away from two
// relays that share the partitions under a steady load for longer than
// lease_ttl (every lease and instance row expires), then gives it back:
// every partition delivers again within about the steady gap, the two
// relays split the partitions at once (no partition changes owner after
// the return), and no partition is ever delivered by two relays at once.
// A first relay back that took every partition and handed half back one or
// two heartbeats later would stop those for up to 2 × lease_ttl/3.
func TestPartitionsSpreadAfterADatabaseOutage(t *testing.T) {
	t.Parallel()
	const parts = 8
	ttl := 3 * time.Second
	sp := startSpread(t, parts, ttl)
	db, px, cfg, rec, a, b := sp.db, sp.px, sp.cfg, sp.rec, sp.a, sp.b

	writeSteadily(t, db, parts)

	steadyFrom := time.Now()
	testenv.Eventually(t, 60*time.Second, func() bool { return rec.leastSince(parts, steadyFrom) >= 20 }, "a steady load delivered on every partition")
	cutAt := time.Now()
	steady := rec.maxGap(parts, steadyFrom, cutAt)

	px.Cut()
	testenv.Eventually(t, 60*time.Second, func() bool {
		if time.Since(cutAt) <= ttl || a.Stats().Partitions != 0 || b.Stats().Partitions != 0 {
			return false
		}
		var leases, instances int
		if err := db.Pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM aa_relay_lease WHERE expires_at > now()),
		(SELECT count(*) FROM aa_relay_instance WHERE expires_at > now())`).Scan(&leases, &instances); err != nil {
			t.Fatal(err)
		}
		return leases == 0 && instances == 0
	}, "every lease and instance row expired during the outage")
	px.Up()
	upAt := time.Now()
	t.Logf("outage %s (lease_ttl %s)", upAt.Sub(cutAt).Round(time.Millisecond), ttl)

	// Watch each partition for two lease TTLs after it delivered again: a
	// handback would come within two heartbeats.
	testenv.Eventually(t, 60*time.Second, func() bool { return rec.watchedSince(parts, upAt, 2*ttl) }, "every partition delivers again")
	resume, gaps := rec.afterReturn(parts, upAt)
	t.Logf("steady maximum gap %s; after the return: first delivery %v, maximum gap %v", steady.Round(time.Millisecond), roundAll(resume), roundAll(gaps))

	// The bound: the steady gap, plus the poll interval (the heartbeat is
	// tried that often while the database is away), plus room for a
	// loaded machine.
	bound := steady + cfg.PollInterval + time.Second
	for p := range parts {
		if resume[p] > bound {
			t.Errorf("partition %d delivered again %s after the database came back, want at most %s", p, resume[p].Round(time.Millisecond), bound)
		}
		if gaps[p] > bound {
			t.Errorf("partition %d: a gap of %s after the database came back, want at most %s", p, gaps[p].Round(time.Millisecond), bound)
		}
	}
	for p, owners := range rec.ownersSince(parts, upAt) {
		if len(owners) != 1 {
			t.Errorf("partition %d changed owner after the return: %v (leases by epoch)", p, owners)
		}
	}
	rec.checkExclusive(t)
}

// A relay that does not come back after the outage (it died meanwhile,
// without handing its leases back) keeps its partitions from the one that
// does for one lease TTL only: then the survivor takes them all, and every
// event is delivered.
func TestInstanceThatDoesNotReturnAfterAnOutageIsTakenOver(t *testing.T) {
	t.Parallel()
	const parts = 8
	ttl := 1500 * time.Millisecond
	sp := startSpread(t, parts, ttl)
	db, px, rec, a, stopB := sp.db, sp.px, sp.rec, sp.a, sp.stopB

	px.Cut()
	cutAt := time.Now()
	// b stops while the database is away: its instance row stays behind,
	// as a crashed relay's does.
	stopB()
	aggs := aggregatePerPartition(t, db, parts)
	for i := range aggs {
		write(t, db, event(&aggs[i], "entity.customer.updated", "DDM_ENTITY", 1))
	}
	outageLapsed(t, db, a, cutAt, ttl)
	px.Up()
	upAt := time.Now()
	testenv.Eventually(t, 60*time.Second, func() bool { return a.Stats().Partitions == parts }, "the survivor owns every partition")
	took := time.Since(upAt)
	testenv.Eventually(t, 60*time.Second, func() bool { return rec.deliveredParts(parts) == parts }, "every partition delivered")
	t.Logf("the survivor owned every partition %s after the return (lease_ttl %s)", took.Round(time.Millisecond), ttl)
	if took < ttl*9/10 {
		t.Errorf("the survivor took the missing relay's partitions %s after the return, before a lease TTL (%s) had passed", took.Round(time.Millisecond), ttl)
	}
	rec.checkExclusive(t)
}

// A relay restarted during the outage comes back under a new name: the
// share left for the one seen before is its share, and no partition changes
// owner after the return.
func TestRestartedInstanceTakesTheShareLeftForIt(t *testing.T) {
	t.Parallel()
	const parts = 8
	ttl := 3 * time.Second
	sp := startSpread(t, parts, ttl)
	db, px, via, cfg, rec, a, stopB := sp.db, sp.px, sp.via, sp.cfg, sp.rec, sp.a, sp.stopB

	writeSteadily(t, db, parts)

	px.Cut()
	cutAt := time.Now()
	stopB() // its row stays behind
	outageLapsed(t, db, a, cutAt, ttl)
	px.Up()
	upAt := time.Now()
	testenv.Eventually(t, 60*time.Second, func() bool { return a.Stats().Partitions == parts/2 }, "the relay back holds its share")
	c, _ := startVia(t, db, via, cfg, "c", rec)
	testenv.Eventually(t, 60*time.Second, func() bool { return a.Stats().Partitions == parts/2 && c.Stats().Partitions == parts/2 }, "4 + 4 with the restarted relay")
	testenv.Eventually(t, 60*time.Second, func() bool { return rec.watchedSince(parts, upAt, ttl) }, "every partition delivers again")
	for p, owners := range rec.ownersSince(parts, upAt) {
		if len(owners) != 1 {
			t.Errorf("partition %d changed owner after the return: %v (leases by epoch)", p, owners)
		}
	}
	rec.checkExclusive(t)
}

// startVia runs a relay named name on a pool of its own through via (a
// proxy's URL), recording its deliveries in rec, until the test ends; stop
// stops it early and waits.
func startVia(t *testing.T, db *testenv.DB, via string, cfg relay.Config, name string, rec *spreadRecorder) (r *relay.Relay, stop func()) {
	t.Helper()
	cfg.InstanceID = t.Name() + "-" + name
	cfg.Routes = []relay.Route{{Consumer: &spreadConsumer{relay: name, rec: rec}}}
	r, err := relay.New(testenv.Pool(t, via, db.Schema), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return r, stop
}

// aggregatePerPartition finds one aggregate id for each partition.
func aggregatePerPartition(t *testing.T, db *testenv.DB, parts int) []uuid.UUID {
	t.Helper()
	out := make([]uuid.UUID, parts)
	found := 0
	for found < parts {
		ids := make([]uuid.UUID, 64)
		for i := range ids {
			ids[i] = uuid.New()
		}
		rows, err := db.Pool.Query(context.Background(), `SELECT g, abs(hashtextextended('DDM_ENTITY/' || g::text, 0) % $2)::int FROM unnest($1::uuid[]) g`, ids, parts)
		if err != nil {
			t.Fatal(err)
		}
		var id uuid.UUID
		var p int
		if _, err := pgx.ForEachRow(rows, []any{&id, &p}, func() error {
			if out[p] == uuid.Nil {
				out[p] = id
				found++
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// writeEvery writes one event to each aggregate every period, straight to
// the database (not through the relays' proxy), until ctx is done.
func writeEvery(ctx context.Context, db *testenv.DB, aggs []uuid.UUID, period time.Duration) error {
	w := outbox.NewWriter(outbox.WriterConfig{Schema: db.Schema})
	tk := time.NewTicker(period)
	defer tk.Stop()
	for n := 1; ; n++ {
		evs := make([]outbox.Event, len(aggs))
		for i := range aggs {
			evs[i] = event(&aggs[i], "entity.customer.updated", "DDM_ENTITY", n)
		}
		err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error { _, err := w.Write(ctx, tx, evs...); return err })
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tk.C:
		}
	}
}

// spreadConsumer records, per delivered event, which relay sent it for
// which partition under which lease epoch, and when.
type spreadConsumer struct {
	relay string
	rec   *spreadRecorder
}

func (c *spreadConsumer) Name() string { return "recorder" }

func (c *spreadConsumer) Deliver(ctx context.Context, events []*outbox.Event) []delivery.Outcome {
	out := make([]delivery.Outcome, len(events))
	for i, e := range events {
		if err := delivery.CheckLease(ctx); err != nil {
			out[i] = delivery.Retryf("%v", err)
			continue
		}
		l, ok := delivery.LeaseOf(ctx)
		if !ok {
			out[i] = delivery.Poisonf("no lease in the delivery context")
			continue
		}
		p, epoch, ok := l.Token(e)
		if !ok {
			out[i] = delivery.Poisonf("no lease token for event %d", e.ID)
			continue
		}
		c.rec.add(spreadDelivery{relay: c.relay, part: p, epoch: epoch, at: time.Now()})
		out[i] = delivery.Ok()
	}
	return out
}

type spreadDelivery struct {
	relay string
	part  int
	epoch int64
	at    time.Time
}

type spreadRecorder struct {
	mu sync.Mutex
	ds []spreadDelivery // in order of delivery
}

func (r *spreadRecorder) add(d spreadDelivery) {
	r.mu.Lock()
	r.ds = append(r.ds, d)
	r.mu.Unlock()
}

// times returns each partition's delivery times.
func (r *spreadRecorder) times(parts int) [][]time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	ts := make([][]time.Time, parts)
	for _, d := range r.ds {
		ts[d.part] = append(ts[d.part], d.at)
	}
	for _, s := range ts {
		slices.SortFunc(s, time.Time.Compare)
	}
	return ts
}

// deliveredParts is the number of partitions delivered from.
func (r *spreadRecorder) deliveredParts(parts int) int {
	n := 0
	for _, s := range r.times(parts) {
		if len(s) > 0 {
			n++
		}
	}
	return n
}

// leastSince is the fewest deliveries of a partition since from.
func (r *spreadRecorder) leastSince(parts int, from time.Time) int {
	least := -1
	for _, s := range r.times(parts) {
		n := len(s) - countBefore(s, from)
		if least < 0 || n < least {
			least = n
		}
	}
	return least
}

// maxGap is the longest wait of a partition between two deliveries in
// [from, to).
func (r *spreadRecorder) maxGap(parts int, from, to time.Time) time.Duration {
	var gap time.Duration
	for _, s := range r.times(parts) {
		in := s[countBefore(s, from):countBefore(s, to)]
		for i := 1; i < len(in); i++ {
			gap = max(gap, in[i].Sub(in[i-1]))
		}
	}
	return gap
}

// watchedSince reports whether every partition delivered after from and
// again at least d after its first delivery since from.
func (r *spreadRecorder) watchedSince(parts int, from time.Time, d time.Duration) bool {
	for _, s := range r.times(parts) {
		after := s[countBefore(s, from):]
		if len(after) == 0 || after[len(after)-1].Sub(after[0]) < d {
			return false
		}
	}
	return true
}

// afterReturn gives, per partition, how long after up it delivered again and
// its longest gap between deliveries from then on.
func (r *spreadRecorder) afterReturn(parts int, up time.Time) (resume, gaps []time.Duration) {
	resume, gaps = make([]time.Duration, parts), make([]time.Duration, parts)
	for p, s := range r.times(parts) {
		after := s[countBefore(s, up):]
		if len(after) == 0 {
			resume[p] = time.Hour
			continue
		}
		resume[p] = after[0].Sub(up)
		for i := 1; i < len(after); i++ {
			gaps[p] = max(gaps[p], after[i].Sub(after[i-1]))
		}
	}
	return resume, gaps
}

// ownersSince lists, per partition, the leases ("relay@epoch") it was
// delivered under since from.
func (r *spreadRecorder) ownersSince(parts int, from time.Time) [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	owners := make([][]string, parts)
	for _, d := range r.ds {
		if d.at.Before(from) {
			continue
		}
		if o := fmt.Sprintf("%s@%d", d.relay, d.epoch); !slices.Contains(owners[d.part], o) {
			owners[d.part] = append(owners[d.part], o)
		}
	}
	return owners
}

// checkExclusive fails the test when a partition was delivered by two
// relays at once: in the order of delivery, a partition's epochs never go
// down and one epoch belongs to one relay.
func (r *spreadRecorder) checkExclusive(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	last := map[int]spreadDelivery{}
	for _, d := range r.ds {
		if prev, ok := last[d.part]; ok {
			switch {
			case d.epoch < prev.epoch:
				t.Errorf("partition %d: %s delivered under epoch %d at %s after %s under epoch %d at %s",
					d.part, d.relay, d.epoch, d.at.Format("15:04:05.000"), prev.relay, prev.epoch, prev.at.Format("15:04:05.000"))
			case d.epoch == prev.epoch && d.relay != prev.relay:
				t.Errorf("partition %d: epoch %d delivered by %s and %s", d.part, d.epoch, prev.relay, d.relay)
			}
		}
		last[d.part] = d
	}
}

func countBefore(s []time.Time, t time.Time) int {
	n, _ := slices.BinarySearchFunc(s, t, time.Time.Compare)
	return n
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(10 * time.Millisecond)
	}
	return out
}

// writeSteadily writes an event to every partition every 100 ms until the
// test ends.
func writeSteadily(t *testing.T, db *testenv.DB, parts int) {
	aggs := aggregatePerPartition(t, db, parts)
	ctx, stopWriting := context.WithCancel(context.Background())
	writing := make(chan error, 1)
	go func() { writing <- writeEvery(ctx, db, aggs, 100*time.Millisecond) }()
	t.Cleanup(func() {
		stopWriting()
		if err := <-writing; err != nil {
			t.Errorf("producer: %v", err)
		}
	})
}

// spread is two relays, a and b, over a proxy (px, via) to a schema of
// their own, each holding half of the partitions.
type spread struct {
	db    *testenv.DB
	px    *testenv.TCPProxy
	via   string
	cfg   relay.Config
	rec   *spreadRecorder
	a, b  *relay.Relay
	stopB func()
}

// startSpread starts the two relays of a spread over parts partitions
// with lease_ttl ttl and waits until each holds half of them.
func startSpread(t *testing.T, parts int, ttl time.Duration) spread {
	t.Helper()
	sp := spread{db: testenv.NewDB(t), rec: &spreadRecorder{}}
	sp.px, sp.via = sp.db.ViaProxy(t)
	sp.cfg = relay.Config{Schema: sp.db.Schema, Partitions: parts, BatchSize: 100, PollInterval: 200 * time.Millisecond, LeaseTTL: ttl}
	sp.a, _ = startVia(t, sp.db, sp.via, sp.cfg, "a", sp.rec)
	sp.b, sp.stopB = startVia(t, sp.db, sp.via, sp.cfg, "b", sp.rec)
	testenv.Eventually(t, 60*time.Second, func() bool {
		return sp.a.Stats().Partitions == parts/2 && sp.b.Stats().Partitions == parts/2
	}, "%d + %d partitions", parts/2, parts/2)
	return sp
}

// outageLapsed waits until the outage that began at cutAt is longer than
// the lease TTL: a counts no partition, and every lease and instance row
// has expired by the database's clock. A relay that counts no partition
// (its fence deadline, before the TTL) may still find its leases valid if
// the database came back at once; the scenario is an outage longer than
// the TTL.
func outageLapsed(t *testing.T, db *testenv.DB, a *relay.Relay, cutAt time.Time, ttl time.Duration) {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, func() bool {
		if time.Since(cutAt) <= ttl || a.Stats().Partitions != 0 {
			return false
		}
		var leases, instances int
		if err := db.Pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM aa_relay_lease WHERE expires_at > now()),
		(SELECT count(*) FROM aa_relay_instance WHERE expires_at > now())`).Scan(&leases, &instances); err != nil {
			t.Fatal(err)
		}
		return leases == 0 && instances == 0
	}, "every lease and instance row expired during the outage")
}
