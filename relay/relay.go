package relay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/searchsync/searchsync/delivery"
	"github.com/searchsync/searchsync/outbox"
)

// Relay delivers the outbox of one schema. Create it with New and call Run.
type Relay struct {
	// postponed rate-limits the lines of logPostponed.
	postponed postponements
	cfg       Config
	pool      *pgxpool.Pool
	q         queries
	leases    *leases
	cons      *consumers
	wm        *watermark // nil: Config.Watermark is off
	// reached is what recently reached a consumer, per aggregate (order.go).
	reached reached
	stats   counters

	wake    chan struct{}
	moved   chan struct{} // see Relay.signal
	running atomic.Bool
	// lastClaimed is the row count of the last claim: scanEvents makes room
	// for as many at once.
	lastClaimed atomic.Int64
	// next is the claim running beside the deliveries; window holds the
	// batches claimed and not acked yet, oldest first. Worker goroutine only.
	next   *prefetch
	window []*flight
	// claimed holds the batches not recorded yet, in claim order: they are
	// recorded (stats, Config.OnBatch) in that order, once every older one
	// is, although their acks end in any order. Worker goroutine only.
	claimed []*flight
	// skipBehind counts batches delivered without a claim beside them,
	// after such a claim found little to do.
	skipBehind int
	// backlog says the last claim came back full: the relay pipelines
	// through the backlog. Without one it claims beside the batches in
	// flight as soon as events come and a delivery slot is free. Worker
	// goroutine only.
	backlog bool
	// reclaim says a delivery or an ack ended after the last claim
	// started: the next events of its aggregates may be claimable. Worker
	// goroutine only.
	reclaim bool
	// level is the batch size the next claim takes (an index of q.claims):
	// it grows while claims come back full (see Config.MaxBatchSize).
	level int
	// noParts says the last batch found no lease to claim from (logged
	// once). Worker goroutine only.
	noParts bool
	// claimOK says the last batch's claim went through (the database
	// answered). Worker goroutine only.
	claimOK bool
	// dues are when the retries this relay scheduled fall due (local
	// clock, not before the database's available_at); the worker wakes for
	// the earliest instead of waiting for the next poll. At most maxDues are
	// kept (beyond, the poll wakes). Worker goroutine only.
	dues []time.Time
}

const maxDues = 1024

// New checks cfg and returns a relay that uses pool (whose search_path does
// not matter: every statement names the schema).
func New(pool *pgxpool.Pool, cfg Config) (*Relay, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &Relay{cfg: cfg, pool: pool, q: newQueries(cfg.Schema, cfg.Partitions, cfg.BatchSize, cfg.MaxBatchSize), wake: make(chan struct{}, 1), moved: make(chan struct{}, 1)}
	r.leases = newLeases(pool, &r.q, &r.cfg)
	r.cons = newConsumers(r)
	if cfg.Watermark.On() {
		r.wm = newWatermark(r)
	}
	return r, nil
}

// InstanceID is the name of this relay in the lease tables.
func (r *Relay) InstanceID() string { return r.cfg.InstanceID }

// Ready reports whether the relay is heartbeating and holds leases, with a
// short explanation for /readyz.
func (r *Relay) Ready() (bool, string) {
	if !r.running.Load() {
		return false, "relay is not running"
	}
	return r.leases.ready()
}

// Run delivers until ctx is done, then finishes the batch in flight (for at
// most Config.ShutdownGrace), releases its leases and returns nil. It returns
// an error only when it cannot start (the lease tables are unusable, or other
// relays use another partition count).
func (r *Relay) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return errors.New("relay: already running")
	}
	defer r.running.Store(false)
	if err := r.leases.prepare(ctx); err != nil {
		return err
	}
	r.cfg.Logger.Info("relay: started", "instance", r.cfg.InstanceID, "schema", r.cfg.Schema,
		"partitions", r.cfg.Partitions, "batch_size", r.cfg.BatchSize, "max_batch_size", r.cfg.MaxBatchSize, "routes", len(r.cfg.Routes))
	// The pause states before the first claim: a consumer paused by
	// another relay is not handed a batch it would only refuse.
	if err := r.cons.refresh(ctx); err != nil && ctx.Err() == nil {
		r.cfg.Logger.Debug("relay: read consumer states", "error", err)
	}

	// Leases outlive ctx until the last batch is acked.
	leaseCtx, stopLeases := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { r.leases.run(leaseCtx) })
	wg.Go(func() { r.listen(ctx) })
	if r.wm != nil {
		wg.Go(func() { r.wm.run(ctx) })
	}
	consCtx, stopCons := context.WithCancel(ctx)
	wg.Go(func() { r.cons.run(consCtx) })
	r.work(ctx)
	stopCons()
	stopLeases()
	wg.Wait()

	leaveCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := r.leases.leave(leaveCtx); err != nil {
		r.cfg.Logger.Warn("relay: leaving: leases will expire by themselves", "error", err)
	}
	r.cfg.Logger.Info("relay: stopped", "instance", r.cfg.InstanceID)
	return nil
}

// Wake makes the relay claim at once (as a NOTIFY would).
func (r *Relay) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// notified wakes the worker, and the watermark's sampling, for events
// that were committed.
func (r *Relay) notified() {
	if r.wm != nil {
		r.wm.poke()
	}
	r.Wake()
}

// horizon is the highest id a claim may take of an event with an
// aggregate (see watermark.go).
func (r *Relay) horizon() int64 {
	if r.wm == nil {
		return noHorizon
	}
	return r.wm.released()
}

// newWaitBackoff is the backoff for waiting out a lost database.
func newWaitBackoff() *backoff.ExponentialBackOff {
	return backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(200*time.Millisecond),
		backoff.WithMaxInterval(15*time.Second),
		backoff.WithMaxElapsedTime(0),
	)
}

// work is the claim → deliver → ack loop.
func (r *Relay) work(ctx context.Context) {
	defer func() {
		if err := r.settle(ctx, -1); err != nil {
			r.cfg.Logger.Warn("relay: last ack failed (its events are delivered again)", "error", err)
		}
	}()
	bo := newWaitBackoff()
	poll := time.NewTimer(r.cfg.PollInterval)
	defer poll.Stop()
	failing := false
	for ctx.Err() == nil {
		full, err := r.batch(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			d := bo.NextBackOff()
			if !failing {
				r.cfg.Logger.Warn("relay: database unavailable; waiting (no event is marked failed for this)", "error", err, "retry_in", d.Round(time.Millisecond))
			} else {
				r.cfg.Logger.Debug("relay: still waiting for the database", "error", err, "retry_in", d.Round(time.Millisecond))
			}
			failing = true
			select {
			case <-ctx.Done():
			case <-time.After(d):
			case <-r.leases.changed:
				// The heartbeat went through (or took partitions): the
				// database is back, claim now rather than after d.
			}
			continue
		}
		// Reachable again only once a claim went through: without leases
		// (their heartbeat fails too) a batch claims nothing and returns no
		// error while the database is still away.
		if failing && r.claimOK {
			r.cfg.Logger.Info("relay: database reachable again")
			failing = false
		}
		bo.Reset()
		if full {
			continue
		}
		if err := r.idle(ctx, poll); err != nil && ctx.Err() == nil {
			// An ack failed: its events are delivered again. The next
			// claim finds out whether the database is there.
			r.cfg.Logger.Warn("relay: ack failed (its events are delivered again)", "error", err)
		}
	}
}

// idle waits until there may be something to claim: a NOTIFY, the poll, a
// change of leases, a retry this relay scheduled falling due, or the end of
// a delivery or an ack of a batch in flight (the next events of its
// aggregates may be claimable now). Meanwhile it acks the batches in flight
// as their deliveries end.
func (r *Relay) idle(ctx context.Context, poll *time.Timer) error {
	if r.reclaim {
		return nil
	}
	if !poll.Stop() {
		select {
		case <-poll.C:
		default:
		}
	}
	// Wake when the earliest retry this relay scheduled is due (a little
	// after, for the database's clock), if that comes before the poll. With
	// batches in flight the claim after their acks takes the retries that
	// are due; only a claim that leaves nothing out clears r.dues, so they
	// would wake the relay again and again meanwhile.
	wait := r.cfg.PollInterval
	if len(r.dues) > 0 && len(r.window) == 0 {
		wait = max(min(wait, time.Until(slices.MinFunc(r.dues, time.Time.Compare))+50*time.Millisecond), 0)
	}
	poll.Reset(wait)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.wake:
			return nil
		case <-r.leases.changed:
			return nil
		case <-poll.C:
			return nil
		case <-r.moved:
			// An ack returned, or a delivery ended: the next events of
			// that batch's aggregates may be claimable (see unacked).
			if _, err := r.step(ctx); err != nil || r.reclaim {
				return err
			}
		}
	}
}

// step records the acks that returned and starts the acks of the batches
// whose deliveries ended, without waiting for anything. acked reports that
// an ack returned; err is the first failed ack's error (its events are
// delivered again).
//
// Acks run as deliveries end, side by side, in no particular order:
// batches in flight never share an aggregate (so never an outbox or
// delivery row), each ack only shares its partitions' lease rows (FOR
// SHARE), and a claim beside them leaves out the aggregates of every batch
// not acked yet, so no ack changes what another batch may hold.
func (r *Relay) step(ctx context.Context) (acked bool, err error) {
	kept := r.window[:0]
	for _, f := range r.window {
		if f.acked != nil && closed(f.acked) {
			f.done = true
			// Its events are not read again (only f.bs, f.acks and f.end
			// are, until it is recorded): the payloads go now, not when the
			// last batch that passed it is recorded.
			f.evs = nil
			if f.ackErr != nil && err == nil {
				err = f.ackErr
			}
			acked = true
			continue
		}
		if f.acked == nil && closed(f.delivered) {
			switch ready, clean := passedAcked(f); {
			case !ready:
				// An older batch it passed is not acked yet: its ack,
				// when it returns, signals.
			case !clean:
				r.abandon(f)
			default:
				r.startAck(ctx, f)
				// The next events of the aggregates it passes may be
				// claimable now (see unacked).
				r.reclaim = true
			}
		}
		kept = append(kept, f)
	}
	clear(r.window[len(kept):])
	r.window = kept
	n := 0
	for n < len(r.claimed) && r.claimed[n].done {
		f := r.claimed[n]
		r.batchDone(f.bs, f.acks, f.end)
		n++
	}
	r.claimed = slices.Delete(r.claimed, 0, n)
	if acked {
		r.reclaim = true
		r.syncInflight()
	}
	return acked, err
}

// passedAcked reports whether the acks of the batches f passed returned
// (ready) and recorded every outcome (clean).
func passedAcked(f *flight) (ready, clean bool) {
	clean = true
	for _, p := range f.after {
		if p.acked == nil || !closed(p.acked) {
			return false, false
		}
		clean = clean && p.clean
	}
	return true, clean
}

// abandon gives up the ack of f, whose events are delivered again: a batch
// it passed did not record its outcomes (its ack failed, or the lease was
// lost), and f must not record a later event of an aggregate as dispatched
// while an earlier one stays pending.
func (r *Relay) abandon(f *flight) {
	f.after = nil // see startAck
	f.acked = make(chan struct{})
	f.ackErr = fmt.Errorf("relay: %d outcomes not recorded (they will be delivered again): an earlier batch of their aggregates was not acked", len(f.acks))
	f.end = time.Now()
	close(f.acked)
	r.signal()
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// signal tells the worker that a batch in flight moved on (its delivery or
// its ack ended).
func (r *Relay) signal() {
	select {
	case r.moved <- struct{}{}:
	default:
	}
}

// claimed is one event of a batch with its partition, its delivery rows by
// consumer name (nil when it has none: every routed consumer still owes it)
// and the consumers an earlier event of its aggregate blocks.
type claimed struct {
	ev      outbox.Event
	part    int32
	rows    map[string]prior
	blocked []string
	// overtaken is the id of the next event of its aggregate when that
	// one was delivered already (0: it was not, or there is none).
	overtaken int64
}

// prefetch is the next batch, claimed in the background while batches are
// delivered.
type prefetch struct {
	c     claimable
	size  int // the batch size it claimed
	start time.Time
	done  chan struct{} // closed when evs, err and took are set
	evs   []claimed
	held  []bool
	after []*flight // the batches the claim passed
	x     *exclusion
	err   error
	took  time.Duration
}

// flight is a batch between its claim and its ack.
type flight struct {
	c         claimable
	evs       []claimed
	bs        BatchStats
	acks      []ackRow
	delivered chan struct{} // closed when the consumers answered (acks and bs.Deliver set)
	acked     chan struct{} // closed when the ack returned (ackErr, end set); nil until it started
	ackErr    error
	end       time.Time // when the ack returned
	done      bool      // the worker saw the ack return (it left the window)
	// after holds the older batches this one passed (see Relay.unacked):
	// its ack starts once theirs returned, and is abandoned (its events
	// delivered again) unless each of them recorded every outcome (clean).
	after []*flight
	clean bool // set before acked is closed
}

// batch starts delivering one batch and acks what is delivered. full
// reports that there may be more to do at once, so the loop goes on without
// waiting.
//
// While claims come back full, the relay pipelines: up to Config.InFlight
// batches are delivered at once, the next batch is claimed beside them, and
// each batch is acked as its delivery ends, beside the deliveries. Without a
// backlog the relay claims as soon as events come (a NOTIFY) and fewer than
// Config.InFlight batches are being delivered, beside the batches in flight,
// so that an event waits for no other batch than one holding its aggregate;
// after each delivery and each ack it claims again, for the next events of
// that batch's aggregates. A claim made while batches are unacked leaves out
// what unacked decides: the aggregates still being delivered or with an
// outcome to wait for, whole; the events of the aggregates it passes, by id.
// For every other aggregate nothing an unacked batch does can change what is
// deliverable, so such a claim is exactly as correct as one made after the
// acks. Per aggregate nothing changes: its events are delivered in id order,
// never in two deliveries at once.
func (r *Relay) batch(ctx context.Context) (full bool, err error) {
	var bs BatchStats
	r.claimOK = false
	cr, pipelined := r.takeAhead(&bs)
	if !pipelined {
		var stop bool
		if cr, stop, err = r.claimNow(ctx, &bs); stop {
			return false, err
		}
	}
	c, evs, x, size := cr.c, cr.evs, cr.x, cr.size
	// A claim that left out whole aggregates may come back short because
	// of them; one that left out only events by id (those passed, and
	// those without an aggregate of batches in flight) tells the backlog
	// as a claim without exclusions does.
	r.adapt(len(evs), size, pipelined || (x != nil && len(x.aggs) > 0))
	if len(evs) == 0 {
		r.syncInflight()
		return false, nil
	}
	bs.Partitions = len(c.parts)
	bs.Claimed = len(evs)
	bs.Overtaken = r.overtaken(evs, x)
	r.leases.claimedFrom(evs)
	// A claim that left batches out may come back short because of them;
	// only a full claim can tell that the outbox is drained. A short claim
	// beside batches in flight, without a backlog, waits for the next
	// NOTIFY, delivery or ack (the idle loop) instead.
	full = pipelined || len(evs) >= size
	r.backlog = full

	r.startDelivery(ctx, c, evs, cr.held, cr.after, bs)
	if full && ctx.Err() == nil {
		if r.skipBehind > 0 {
			r.skipBehind--
		} else if next := r.leases.begin(); len(next.parts) > 0 {
			nx, nafter := r.unacked()
			r.next = r.startClaim(ctx, next, nx, nafter)
		}
	}
	// Claimed ahead: leave room for the next batch's delivery. No backlog:
	// the idle loop acks the batches as they are delivered and claims
	// beside them. A backlog without a claim ahead: the next call claims
	// once the deliveries ended. Stopping: finish everything.
	limit := -1
	switch {
	case r.next != nil:
		limit = r.cfg.InFlight - 1
	case !full && ctx.Err() == nil:
		limit = r.cfg.InFlight
	case ctx.Err() == nil:
		return full, nil
	}
	if err := r.settle(ctx, limit); err != nil {
		return false, err
	}
	return full, nil
}

// claimResult is what a batch claimed: from the claim made ahead beside
// the deliveries, or now.
type claimResult struct {
	c     claimable
	evs   []claimed
	held  []bool
	after []*flight  // the batches the claim passed (see unacked)
	size  int        // of the claim that got evs
	x     *exclusion // what the claim left out (nil: nothing)
}

// takeAhead takes the claim made ahead beside the deliveries, if there is
// one; ok when it got events.
func (r *Relay) takeAhead(bs *BatchStats) (cr claimResult, ok bool) {
	p := r.next
	if p == nil {
		return cr, false
	}
	r.next = nil
	<-p.done
	switch {
	case p.err != nil:
		r.cfg.Logger.Debug("relay: claim beside the deliveries failed; claiming again", "error", p.err)
	case len(p.evs) < p.size/4:
		// Most of the backlog sits behind the aggregates in flight (a few
		// hot aggregates): claiming beside the deliveries costs more than
		// it gives, for a while.
		r.skipBehind = 8
	}
	r.claimOK = p.err == nil
	if p.err != nil || len(p.evs) == 0 {
		r.stats.claimNs.Add(int64(p.took))
		return cr, false
	}
	cr = claimResult{c: p.c, evs: p.evs, held: p.held, after: p.after, size: p.size, x: p.x}
	p.evs, p.after, p.x = nil, nil, nil
	bs.Claim, bs.Pipelined = p.took, true
	return cr, true
}

// claimNow claims a batch now. Without a backlog it claims beside the
// batches in flight once a delivery slot is free. With one (the claim
// beside the last delivery was skipped), it claims once the deliveries
// ended, beside their acks: the claim passes the aggregates they delivered
// (see unacked). What is still unacked then is left out; a claim without
// exclusions (nothing unacked) sees every outcome written so far. stop says
// that the batch ends here, with err or without (no partition to claim
// from).
func (r *Relay) claimNow(ctx context.Context, bs *BatchStats) (cr claimResult, stop bool, err error) {
	wait := r.settleDeliveries
	if !r.backlog && len(r.window) > 0 {
		wait = func(ctx context.Context) error { return r.settle(ctx, r.cfg.InFlight-1) }
	}
	if err := wait(ctx); err != nil {
		return cr, true, err
	}
	beside := len(r.window) > 0 // claimed beside batches in flight, leaving out x
	if beside {
		cr.x, cr.after = r.unacked()
	}
	cr.c = r.leases.begin()
	if len(cr.c.parts) == 0 {
		if !r.noParts {
			r.cfg.Logger.Debug("relay: no partition lease to claim from (not claiming until one is held)")
			r.noParts = true
		}
		r.syncInflight()
		return cr, true, nil
	}
	r.noParts = false
	t0 := time.Now()
	cr.size = r.q.claims[r.level].size
	r.reclaim = false
	cr.evs, cr.held, err = r.claim(ctx, cr.c, cr.x, r.level)
	bs.Claim = time.Since(t0)
	if err != nil {
		r.syncInflight()
		return cr, true, fmt.Errorf("relay: claim: %w", err)
	}
	r.claimOK = true
	if !beside {
		r.claimedAt(t0)
	}
	bs.Pipelined = beside
	return cr, false, nil
}

// adapt sets the batch size of the next claims from a claim of size that
// got n events: twice as large (at most Config.MaxBatchSize) after a full
// one, while a backlog lasts; back to Config.BatchSize after a claim that
// left out no aggregate and found less than half of its size (the backlog
// is gone). A short claim that left out aggregates (hiding says so) says
// nothing about the backlog, so it changes nothing.
func (r *Relay) adapt(n, size int, hiding bool) {
	switch {
	case n >= size && size == r.q.claims[r.level].size && r.level < len(r.q.claims)-1:
		r.level++
	case !hiding && n < size/2:
		r.level = 0
	}
}

// claimedAt notes a claim without exclusions that started at t: it took
// every retry that was due by then. (A claim beside deliveries may have left
// a retried aggregate out, so it clears nothing: at worst the relay wakes
// once for nothing.)
func (r *Relay) claimedAt(t time.Time) {
	r.dues = slices.DeleteFunc(r.dues, func(d time.Time) bool { return !d.After(t) })
}

// startDelivery hands a batch to the consumers in the background.
func (r *Relay) startDelivery(ctx context.Context, c claimable, evs []claimed, held []bool, after []*flight, bs BatchStats) {
	f := &flight{c: c, evs: evs, bs: bs, after: after, delivered: make(chan struct{})}
	r.window = append(r.window, f)
	r.claimed = append(r.claimed, f)
	r.syncInflight()
	// Deliver even if ctx is cancelled now: the batch in flight finishes
	// within the grace period, then is abandoned.
	gctx, cancel := graceContext(ctx, r.cfg.ShutdownGrace)
	lease := newBatchLease(r.leases, c, evs)
	dctx, cancelFenced := context.WithCancelCause(delivery.WithLease(gctx, lease))
	go r.fenceDelivery(dctx, cancelFenced, lease)
	go func() {
		defer r.signal()
		defer cancel()
		defer cancelFenced(nil)
		defer close(f.delivered)
		t := time.Now()
		if lease.Check() == nil {
			f.acks = r.deliver(dctx, f.evs, held, &f.bs)
			r.reached.record(f.evs, f.acks)
		} else {
			f.bs.Untouched += len(f.evs)
		}
		f.bs.Deliver = time.Since(t)
	}()
}

// settle acks delivered batches until at most n batches are not acked yet
// (being delivered, or delivered and waiting for their ack); with n < 0 it
// waits for every ack. It returns the first ack error (those events are
// delivered again).
func (r *Relay) settle(ctx context.Context, n int) error {
	return r.settleUntil(ctx, func() bool {
		waiting := 0
		for _, f := range r.window {
			if f.acked == nil {
				waiting++
			}
		}
		return len(r.window) == 0 || (n >= 0 && waiting <= n)
	})
}

// settleDeliveries acks delivered batches until none is being delivered
// and fewer than Config.InFlight are not acked yet. It returns the first
// ack error (those events are delivered again).
func (r *Relay) settleDeliveries(ctx context.Context) error {
	return r.settleUntil(ctx, func() bool {
		for _, f := range r.window {
			if !closed(f.delivered) {
				return false
			}
		}
		return len(r.window) < r.cfg.InFlight
	})
}

// settleUntil steps the batches in flight until done holds, waiting for
// each delivery or ack to end; it returns the first ack error.
func (r *Relay) settleUntil(ctx context.Context, done func() bool) error {
	var first error
	for {
		if _, err := r.step(ctx); err != nil && first == nil {
			first = err
		}
		if done() {
			return first
		}
		<-r.moved
	}
}

// startClaim claims the next batch in the background, leaving out x; after
// is the batches it passes.
func (r *Relay) startClaim(ctx context.Context, c claimable, x *exclusion, after []*flight) *prefetch {
	level := r.level
	p := &prefetch{c: c, size: r.q.claims[level].size, after: after, x: x, start: time.Now(), done: make(chan struct{})}
	r.reclaim = false
	go func() {
		defer close(p.done)
		p.evs, p.held, p.err = r.claim(ctx, c, x, level)
		p.took = time.Since(p.start)
	}()
	return p
}

// startAck writes the outcomes of a delivered batch in the background.
//
// It drops f.after: the batches f passed are not looked at again. Kept,
// they would chain every batch of a backlog to the next (each passes the
// one before it), and no batch could be collected before the backlog ends.
func (r *Relay) startAck(ctx context.Context, f *flight) {
	f.after = nil
	f.acked = make(chan struct{})
	go func() {
		defer r.signal()
		defer close(f.acked)
		t := time.Now()
		f.ackErr = r.ack(ctx, f.c, f.acks, &f.bs)
		f.clean = f.ackErr == nil && f.bs.Fenced == 0
		if f.clean {
			r.logFailures(f.evs, f.acks)
			r.logPostponed(f.acks)
		}
		f.end = time.Now()
		f.bs.Ack = f.end.Sub(t)
	}()
}

// unacked is what a claim must leave out while batches are not acked yet,
// and the batches it passes, whose acks must return before its own starts.
//
// A batch still being delivered is left out by aggregate, and so is every
// aggregate of a delivered batch with an event that not every routed
// consumer has (a retry, a failure, a paused consumer, delivery rows): its
// next events must wait for the ack's outcomes. An aggregate whose events in
// a delivered batch are all dispatched or skipped, with nothing else to
// write, is passed: only those events are left out (by id), and its next
// events can be claimed and delivered while that ack runs.
//
// Why the order holds: the next events go out after the earlier ones were
// delivered, as they would within one batch holding both; after a crash the
// next owner delivers the run again from its first unacked event, in order,
// as it would for that batch. And no later event is recorded dispatched while
// an earlier one stays pending: the ack of a batch waits for the acks of the
// batches it passed, and is abandoned (its events delivered again) unless they
// recorded every outcome (see abandon).
func (r *Relay) unacked() (*exclusion, []*flight) {
	// Empty, not nil: a NULL array would make <> ALL unknown for every row.
	x := &exclusion{aggs: [][16]byte{}, ids: []int64{}}
	var after []*flight
	for _, f := range r.window {
		if !closed(f.delivered) {
			x.add(f.evs, nil)
			continue
		}
		if x.add(f.evs, f.acks) {
			after = append(after, f)
		}
	}
	return x, after
}

// syncInflight marks in flight exactly the partitions of the batches not
// acked yet and of the one being claimed, so that the heartbeat hands none
// of them back before their outcomes are written.
func (r *Relay) syncInflight() {
	cs := make([]claimable, 0, len(r.window)+1)
	for _, f := range r.window {
		cs = append(cs, f.c)
	}
	if r.next != nil {
		cs = append(cs, r.next.c)
	}
	r.leases.keep(cs...)
}

// batchDone records a batch whose ack returned at end: its figures, and
// when the retries it scheduled fall due.
func (r *Relay) batchDone(bs BatchStats, acks []ackRow, end time.Time) {
	for _, a := range acks {
		if a.outcome == "retry" && len(r.dues) < maxDues {
			r.dues = append(r.dues, end.Add(a.delay))
		}
	}
	r.stats.add(bs)
	if r.cfg.OnBatch != nil {
		r.cfg.OnBatch(bs)
	}
}

// graceContext is a context that is not cancelled with parent, but grace
// after parent is done.
func graceContext(parent context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(parent))
	stop := context.AfterFunc(parent, func() {
		t := time.AfterFunc(grace, cancel)
		context.AfterFunc(ctx, func() { t.Stop() })
	})
	return ctx, func() { stop(); cancel() }
}
