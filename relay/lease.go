package relay

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// leases tracks the partitions this instance owns and keeps them in step
// with aa_relay_lease: heartbeat, renew, acquire the fair share, release the
// excess. The worker takes a snapshot of the claimable partitions per batch.
type leases struct {
	pool *pgxpool.Pool
	q    *queries
	cfg  *Config

	mu        sync.Mutex
	owned     map[int]int64 // partition -> epoch
	releasing map[int]bool  // above the fair share: no new claims, released when not in flight
	// doubted are partitions an ack found fenced, with when: no new claims
	// until a heartbeat that started after that has renewed them (or
	// dropped them as lost); see doubt.
	doubted  map[int]time.Time
	inflight map[int]bool // partitions of the batch in flight
	// probe is, per owned partition, the id below which a claimed event is
	// looked up for a later event of its aggregate delivered already
	// (claimSQL's overtaken): the highest id claimed from it, or where the
	// acquisition said to start (acquireSQL).
	probe      map[int]int64
	validUntil time.Time // local deadline of the leases (last renewal start + ttl)
	live       int       // instances counted for the fair share at the last heartbeat
	beatAt     time.Time // last successful heartbeat
	lastErr    error
	// others are the other instances the last heartbeat counted: the
	// live ones, or while settling the ones seen before the outage.
	others []string
	// settleUntil ends the settling after an outage. A heartbeat that
	// finds the database again after this instance's leases lapsed (the
	// database was away, or this process paused, for longer than the TTL)
	// cannot tell from the others' expired rows whether they are alive:
	// theirs lapsed for the same reason. Until settleUntil (one TTL later)
	// it counts at least as many other instances as it saw live before,
	// of those whose rows are still there (one that left cleanly deleted
	// its row), so it takes its fair share only and leaves the rest free
	// for them to take when they return (under the same name or, restarted,
	// a new one). It does not take everything to hand half of it back a
	// heartbeat or two later, which stopped those partitions for up to two
	// heartbeat periods. One that is not back by then is taken for dead: its
	// partitions are taken one TTL after the return, as a killed instance's
	// are one TTL after it stopped.
	settleUntil time.Time

	changed chan struct{} // signalled when partitions were acquired, doubted ones renewed, or the heartbeat recovered
	kick    chan struct{} // asks for a heartbeat now (an ack was fenced)
	back    chan struct{} // signalled when the heartbeat recovered (for the listener)
}

func newLeases(pool *pgxpool.Pool, q *queries, cfg *Config) *leases {
	return &leases{pool: pool, q: q, cfg: cfg, owned: map[int]int64{}, releasing: map[int]bool{},
		doubted: map[int]time.Time{}, inflight: map[int]bool{}, probe: map[int]int64{}, changed: make(chan struct{}, 1), kick: make(chan struct{}, 1),
		back: make(chan struct{}, 1)}
}

// prepare creates the lease rows and refuses to run beside live instances
// that use another partition count.
func (l *leases) prepare(ctx context.Context) error {
	var other string
	var n int
	err := l.pool.QueryRow(ctx, l.q.otherPartitionCount, l.cfg.Partitions, l.cfg.InstanceID).Scan(&other, &n)
	switch {
	case err == nil:
		return fmt.Errorf("relay: instance %s runs with relay.partitions = %d, this one with %d; every relay of one database must use the same number (stop the others first to change it)", other, n, l.cfg.Partitions)
	case !errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("relay: read relay instances in schema %q: %w", l.cfg.Schema, err)
	}
	if _, err := l.pool.Exec(ctx, l.q.trimPartitions, l.cfg.Partitions); err != nil {
		return fmt.Errorf("relay: trim partitions: %w", err)
	}
	if _, err := l.pool.Exec(ctx, l.q.ensurePartitions, l.cfg.Partitions); err != nil {
		return fmt.Errorf("relay: create %d partition leases in schema %q: %w", l.cfg.Partitions, l.cfg.Schema, err)
	}
	return nil
}

// interval is the heartbeat period.
func (l *leases) interval() time.Duration { return l.cfg.LeaseTTL / 3 }

// run heartbeats until ctx is done.
func (l *leases) run(ctx context.Context) {
	t := time.NewTimer(l.interval())
	defer t.Stop()
	failing := false
	for {
		begun := time.Now()
		err := l.tick(ctx)
		if ctx.Err() != nil {
			return
		}
		next := l.interval()
		if err != nil {
			if !failing {
				l.cfg.Logger.Warn("relay: lease heartbeat failed; keeping leases until they expire", "error", err, "instance", l.cfg.InstanceID)
			}
			failing = true
			// Try again every poll interval while the database is away,
			// so that the relay is back within one of its return, not a
			// whole heartbeat period later.
			next = min(next, l.cfg.PollInterval)
		} else if failing {
			l.cfg.Logger.Info("relay: lease heartbeat recovered", "instance", l.cfg.InstanceID)
			failing = false
			// The worker and the listener may be waiting out the database
			// with a longer backoff: they can go on now.
			l.signal()
			select {
			case l.back <- struct{}{}:
			default:
			}
		}
		t.Reset(time.Until(begun.Add(next)))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-l.kick:
		}
	}
}

// doubt is told that an ack of a batch claimed from c was fenced: one of
// c's partitions is held by another instance now. None of them is claimed
// again until a heartbeat started after this call has renewed them (the
// lost ones are dropped then), and that heartbeat runs at once. Without it
// the relay claimed, delivered and acked the lost partition's events again
// and again, every ack fenced, until the renewal returned (58 times in one
// run on a loaded machine).
func (l *leases) doubt(c claimable) {
	now := time.Now()
	l.mu.Lock()
	for _, p := range c.parts {
		l.doubted[int(p)] = now
	}
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// tick is one heartbeat: instance row, renewals, releases, acquisitions.
func (l *leases) tick(ctx context.Context) error {
	ttl := l.cfg.LeaseTTL.Milliseconds()
	start := time.Now()
	// A hung connection must not keep the self-fencing below from running.
	// A stop does not cut a tick short: a statement cancelled by the client
	// may still commit on the server, and an acquisition committed after
	// leave() released this instance's leases would keep them held by a
	// relay that is gone until they expire. run returns after the tick.
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.LeaseTTL)
	err := l.tickDB(tctx, start, ttl)
	cancel()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lastErr = err
	if err != nil && time.Now().After(l.validUntil) && len(l.owned) > 0 {
		// Self-fencing: without renewal the leases are gone by now.
		l.cfg.Logger.Warn("relay: leases expired without renewal; stopped claiming", "partitions", len(l.owned))
		clear(l.owned)
		clear(l.releasing)
		clear(l.doubted)
	}
	return err
}

func (l *leases) tickDB(ctx context.Context, start time.Time, ttl int64) error {
	others, err := l.beat(ctx, start, ttl)
	if err != nil {
		return err
	}
	live := 1 + len(others)
	kept, err := l.renew(ctx, ttl)
	if err != nil {
		return err
	}

	l.mu.Lock()
	for p := range l.owned {
		if _, ok := kept[p]; !ok {
			l.cfg.Logger.Warn("relay: lost lease", "partition", p, "epoch", l.owned[p])
			delete(l.owned, p)
			delete(l.releasing, p)
			delete(l.probe, p)
		}
	}
	resolved := false
	for p, at := range l.doubted {
		// The renewal above ran after the fence was seen: what it kept is
		// held, what it did not is dropped.
		if at.Before(start) {
			delete(l.doubted, p)
			resolved = true
		}
	}
	if resolved {
		// The worker may claim the partitions it kept again.
		l.signal()
	}
	l.validUntil = start.Add(l.cfg.LeaseTTL)
	l.live = live
	l.others = others
	l.beatAt = time.Now()
	share := (l.cfg.Partitions + live - 1) / live
	// Mark the excess (highest partitions first) and release what is not in flight.
	if over := len(l.owned) - share; over > 0 {
		ps := slices.Sorted(maps.Keys(l.owned))
		for _, p := range ps[len(ps)-over:] {
			l.releasing[p] = true
		}
	} else {
		clear(l.releasing)
	}
	var release []int
	for p := range l.releasing {
		if !l.inflight[p] {
			release = append(release, p)
		}
	}
	want := share - len(l.owned)
	l.mu.Unlock()

	if len(release) > 0 {
		if err := l.release(ctx, release, live, share); err != nil {
			return err
		}
	}
	if want > 0 {
		return l.acquire(ctx, want, ttl, live)
	}
	return nil
}

// beat writes this instance's heartbeat and forgets dead instances; it
// returns the other live instances — while the relay settles after its
// leases lapsed (see settleUntil), as many as it saw before.
func (l *leases) beat(ctx context.Context, start time.Time, ttl int64) ([]string, error) {
	host, _ := os.Hostname()
	l.mu.Lock()
	// back: the first heartbeat after this instance's leases lapsed; it
	// settles (see settleUntil).
	back := !l.validUntil.IsZero() && start.After(l.validUntil) && len(l.others) > 0
	settling := back || start.Before(l.settleUntil)
	recall := []string{}
	if settling {
		recall = l.others
	}
	l.mu.Unlock()
	var others, seen []string
	if err := l.pool.QueryRow(ctx, l.q.heartbeat, l.cfg.InstanceID, host, os.Getpid(), l.cfg.Partitions, ttl, recall).Scan(&others, &seen); err != nil {
		return nil, fmt.Errorf("heartbeat: %w", err)
	}
	if _, err := l.pool.Exec(ctx, l.q.forgetDead, 10*ttl, recall); err != nil {
		return nil, fmt.Errorf("forget dead instances: %w", err)
	}
	switch {
	case settling && len(seen) > len(others):
		if back {
			l.cfg.Logger.Info("relay: back after the leases lapsed; leaving a share to each instance seen before for a lease TTL",
				"instances_seen", seen, "instances_live", others, "lease_ttl", l.cfg.LeaseTTL)
			l.mu.Lock()
			l.settleUntil = start.Add(l.cfg.LeaseTTL)
			l.mu.Unlock()
		}
		others = seen
	case settling:
		// As many are back as were seen before: settled.
		l.mu.Lock()
		l.settleUntil = time.Time{}
		l.mu.Unlock()
	}
	return others, nil
}

// renew renews the leases this instance holds and returns those it kept,
// with their epochs.
func (l *leases) renew(ctx context.Context, ttl int64) (map[int]int64, error) {
	l.mu.Lock()
	parts, epochs := l.ownedArrays()
	l.mu.Unlock()
	kept := map[int]int64{}
	if len(parts) == 0 {
		return kept, nil
	}
	rows, err := l.pool.Query(ctx, l.q.renew, l.cfg.InstanceID, parts, epochs, ttl)
	if err != nil {
		return nil, fmt.Errorf("renew leases: %w", err)
	}
	var p int
	var e int64
	if _, err := pgx.ForEachRow(rows, []any{&p, &e}, func() error { kept[p] = e; return nil }); err != nil {
		return nil, fmt.Errorf("renew leases: %w", err)
	}
	return kept, nil
}

// release hands partitions over to other instances.
func (l *leases) release(ctx context.Context, release []int, live, share int) error {
	parts, maxes := l.probeArrays(release)
	if _, err := l.pool.Exec(ctx, l.q.release, l.cfg.InstanceID, parts, maxes); err != nil {
		return fmt.Errorf("release leases: %w", err)
	}
	l.mu.Lock()
	for _, p := range release {
		delete(l.owned, p)
		delete(l.releasing, p)
		delete(l.probe, p)
	}
	l.mu.Unlock()
	l.cfg.Logger.Info("relay: released partitions for other instances", "partitions", release, "live_instances", live, "share", share)
	return nil
}

// acquire takes up to want free or expired partitions.
func (l *leases) acquire(ctx context.Context, want int, ttl int64, live int) error {
	rows, err := l.pool.Query(ctx, l.q.acquire, l.cfg.InstanceID, want, l.cfg.Partitions, ttl)
	if err != nil {
		return fmt.Errorf("acquire leases: %w", err)
	}
	got, from := map[int]int64{}, map[int]int64{}
	var p int
	var e, f int64
	if _, err := pgx.ForEachRow(rows, []any{&p, &e, &f}, func() error { got[p], from[p] = e, f; return nil }); err != nil {
		return fmt.Errorf("acquire leases: %w", err)
	}
	if len(got) == 0 {
		return nil
	}
	l.mu.Lock()
	maps.Copy(l.owned, got)
	maps.Copy(l.probe, from)
	n := len(l.owned)
	l.mu.Unlock()
	l.cfg.Logger.Info("relay: acquired partitions", "partitions", slices.Sorted(maps.Keys(got)), "owned", n, "live_instances", live)
	l.signal()
	return nil
}

// signal tells the worker that it may claim now.
func (l *leases) signal() {
	select {
	case l.changed <- struct{}{}:
	default:
	}
}

// ownedArrays returns the owned partitions and their epochs. Caller holds mu.
func (l *leases) ownedArrays() ([]int32, []int64) {
	parts := make([]int32, 0, len(l.owned))
	epochs := make([]int64, 0, len(l.owned))
	for p, e := range l.owned {
		parts = append(parts, int32(p))
		epochs = append(epochs, e)
	}
	return parts, epochs
}

// probeArrays are partitions ps with their probe thresholds (the highest
// ids claimed), for a release.
func (l *leases) probeArrays(ps []int) ([]int32, []int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	parts := make([]int32, 0, len(ps))
	maxes := make([]int64, 0, len(ps))
	for _, p := range ps {
		if m, ok := l.probe[p]; ok {
			parts, maxes = append(parts, int32(p)), append(maxes, m)
		}
	}
	return parts, maxes
}

// claimedFrom raises the probe thresholds past the events a claim took.
func (l *leases) claimedFrom(evs []claimed) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range evs {
		p := int(evs[i].part)
		if m, ok := l.probe[p]; ok && evs[i].ev.ID > m {
			l.probe[p] = evs[i].ev.ID
		}
	}
}

// claimable is the worker's view for one batch: the partitions it may claim
// from (with epochs), marked in flight until done is called. all reports that
// the relay owns every partition (the claim needs no partition filter).
type claimable struct {
	parts  []int32
	epochs []int64
	all    bool
	// probe is the probe threshold of every partition (index: partition),
	// 0 for those not claimable.
	probe []int64
}

func (l *leases) begin() claimable {
	l.mu.Lock()
	defer l.mu.Unlock()
	if time.Now().After(l.validUntil) {
		return claimable{}
	}
	c := claimable{probe: make([]int64, l.cfg.Partitions)}
	for p, e := range l.owned {
		if _, doubted := l.doubted[p]; doubted || l.releasing[p] {
			continue
		}
		c.parts = append(c.parts, int32(p))
		c.epochs = append(c.epochs, e)
		c.probe[p] = l.probe[p]
		l.inflight[p] = true
	}
	c.all = len(c.parts) == l.cfg.Partitions
	return c
}

// sendDeadline is the moment until which this relay may send for the
// partitions it holds: the last renewal's start + lease_ttl - the fence
// margin (monotonic clock).
func (l *leases) sendDeadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.validUntil.Add(-fenceMargin(l.cfg.LeaseTTL))
}

// holds reports whether every partition of c is still held with the epoch
// it was claimed under and the send deadline has not passed.
func (l *leases) holds(c claimable) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !time.Now().Before(l.validUntil.Add(-fenceMargin(l.cfg.LeaseTTL))) {
		return false
	}
	for i, p := range c.parts {
		if e, ok := l.owned[int(p)]; !ok || e != c.epochs[i] {
			return false
		}
	}
	return true
}

// keep marks exactly the partitions of cs in flight (batches not acked
// yet); keep() marks none.
func (l *leases) keep(cs ...claimable) {
	l.mu.Lock()
	clear(l.inflight)
	for _, c := range cs {
		for _, p := range c.parts {
			l.inflight[int(p)] = true
		}
	}
	l.mu.Unlock()
}

// count returns how many partitions are owned.
func (l *leases) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.owned)
}

// ready reports whether the last heartbeat is recent and this instance holds
// leases (or cannot hold any because there are more instances than partitions).
func (l *leases) ready() (bool, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.beatAt.IsZero():
		return false, "no heartbeat yet"
	case time.Since(l.beatAt) > l.cfg.LeaseTTL:
		msg := "heartbeat is stale"
		if l.lastErr != nil {
			msg += ": " + l.lastErr.Error()
		}
		return false, msg
	case len(l.owned) == 0 && l.live <= l.cfg.Partitions:
		return false, "no partition leases held yet"
	}
	return true, fmt.Sprintf("%d of %d partitions, %d live instances", len(l.owned), l.cfg.Partitions, l.live)
}

// leave releases every lease and removes the instance row, so that the
// others take over at once instead of after the TTL. It releases by owner,
// not by the partitions it knows of: an acquisition whose context the stop
// cancelled may have taken leases in the database without hearing back, and
// those too must be handed back.
func (l *leases) leave(ctx context.Context) error {
	l.mu.Lock()
	parts := make([]int32, 0, len(l.probe))
	maxes := make([]int64, 0, len(l.probe))
	for p, m := range l.probe {
		parts, maxes = append(parts, int32(p)), append(maxes, m)
	}
	clear(l.owned)
	clear(l.releasing)
	clear(l.doubted)
	clear(l.probe)
	l.validUntil = time.Time{}
	l.mu.Unlock()
	if _, err := l.pool.Exec(ctx, l.q.releaseAll, l.cfg.InstanceID, parts, maxes); err != nil {
		return fmt.Errorf("relay: release leases: %w", err)
	}
	if _, err := l.pool.Exec(ctx, l.q.leave, l.cfg.InstanceID); err != nil {
		return fmt.Errorf("relay: remove instance: %w", err)
	}
	return nil
}
