package relay

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The visibility watermark (Config.Watermark, docs/ordering.md).
//
// A bigserial id is taken at INSERT and becomes visible at COMMIT, so a
// producer that skips the aggregate's advisory lock can commit event 1 of an
// aggregate after event 2 of it is visible (and delivered). The watermark
// claims an event with an aggregate only once no transaction can still commit
// a lower id: the relay samples the database's snapshot
// (pg_current_snapshot()) together with the highest visible id M, and
// releases M once every transaction that could hold an id ≤ M uncommitted
// has ended:
//
//   - an id ≤ M was taken before M was, and M's transaction committed before
//     the sample, so the transaction T that holds it started before the
//     sample. If T had an xid then, it is in the sample's in-progress list.
//   - nextval() runs a moment before the INSERT assigns T its xid, so T may
//     have had none yet: its xid then lies at or above the sample's xmax, and
//     T is in progress in the next sample (or has ended by then). So a
//     sample is released once the transactions in progress at it, and those
//     of the next sample with an xid at or above its xmax, have all ended.
//
// A rolled-back transaction ends like a committed one (its ids never
// appear). Transactions that never wrote to the outbox can delay a sample
// too (a long batch job elsewhere in the database): when a sample has waited
// a quarter of a second, the relay asks pg_locks which of them took an id
// from the outbox's sequence (nextval() locks it until the transaction
// ends), and stops waiting for the others (a transaction that has taken
// none by then takes an id above M when it does). A
// transaction that holds outbox rows longer than Config.Watermark.MaxWait is
// given up on with a WARN: its events are delivered when they commit, and the
// relay's detection reports them if they come out of order.

// pgSnapshot is a pg_snapshot: xids below xmin have ended, those from xmax
// on had not started, xip are in progress (sorted).
type pgSnapshot struct {
	xmin, xmax uint64
	xip        []uint64
}

// ended reports whether transaction x has ended (committed or aborted) as
// of s.
func (s pgSnapshot) ended(x uint64) bool {
	if x < s.xmin {
		return true
	}
	if x >= s.xmax {
		return false
	}
	_, found := slices.BinarySearch(s.xip, x)
	return !found
}

// visSample is one sample: the snapshot, the highest visible id, and the
// transactions whose end releases it (known once the next sample is taken).
type visSample struct {
	at    time.Time
	snap  pgSnapshot
	maxID int64
	need  []uint64
	ready bool // need is known
}

// horizon is the released watermark and the samples waiting for release,
// oldest first. Its methods are safe for concurrent use.
type horizon struct {
	mu       sync.Mutex
	samples  []visSample
	released atomic.Int64
	// ignore, when set, names transactions known to take no outbox id
	// (this relay's acks): no sample waits for them.
	ignore func(xid uint64) bool
	// fresh: see firstAfterIdle.
	fresh bool
}

// maxSamples bounds the samples kept while a long transaction holds them
// back; the middle ones are dropped (a later sample is released no earlier
// than an earlier one, so dropping one only delays what it would release to
// the next kept one).
const maxSamples = 256

// add takes a new sample and releases what it can; it reports whether the
// watermark advanced.
func (h *horizon) add(s visSample) (advanced bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n := len(h.samples); n > 0 && !h.samples[n-1].ready {
		prev := &h.samples[n-1]
		prev.need = slices.Clone(prev.snap.xip)
		for _, x := range s.snap.xip {
			if x >= prev.snap.xmax {
				prev.need = append(prev.need, x)
			}
		}
		prev.ready = true
	}
	idle := len(h.samples) == 0
	if !idle || s.maxID > h.released.Load() {
		h.samples = append(h.samples, s)
	}
	if len(h.samples) > maxSamples {
		// Keep the oldest (what waits longest) and the newest.
		h.samples = slices.Delete(h.samples, maxSamples/2, len(h.samples)-maxSamples/2)
	}
	advanced = h.releaseLocked(s.snap)
	// Left alone, waiting only as the successor of samples now released,
	// with nothing new to release itself: dropped, so that an idle outbox is
	// not sampled every interval.
	if n := len(h.samples); n == 1 && !h.samples[0].ready && h.samples[0].maxID <= h.released.Load() {
		h.samples = h.samples[:0]
	}
	h.fresh = idle && len(h.samples) == 1
	return advanced
}

// firstAfterIdle reports that the last sample was the first taken after
// the outbox was idle (nothing waited): its successor, which releases it, is
// taken at once rather than an interval later.
func (h *horizon) firstAfterIdle() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.fresh
}

// releaseLocked releases, oldest first, the samples whose transactions have
// all ended as of now.
func (h *horizon) releaseLocked(now pgSnapshot) (advanced bool) {
	n := 0
	for n < len(h.samples) && h.samples[n].ready && h.allEnded(h.samples[n].need, now) {
		advanced = h.raise(h.samples[n].maxID) || advanced
		n++
	}
	h.samples = slices.Delete(h.samples, 0, n)
	return advanced
}

func (h *horizon) allEnded(xs []uint64, now pgSnapshot) bool {
	for _, x := range xs {
		if !now.ended(x) && (h.ignore == nil || !h.ignore(x)) {
			return false
		}
	}
	return true
}

func (h *horizon) raise(id int64) bool {
	if id > h.released.Load() {
		h.released.Store(id)
		return true
	}
	return false
}

// oldest is when the oldest sample waiting for release was taken (zero when
// none waits).
func (h *horizon) oldest() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.samples) == 0 {
		return time.Time{}
	}
	return h.samples[0].at
}

// waiting are the transactions the samples taken before t wait for, as of
// now (those not ended).
func (h *horizon) waiting(t time.Time, now pgSnapshot) []uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []uint64
	for _, s := range h.samples {
		if !s.at.Before(t) || !s.ready {
			continue
		}
		for _, x := range s.need {
			if !now.ended(x) && !slices.Contains(out, x) {
				out = append(out, x)
			}
		}
	}
	slices.Sort(out)
	return out
}

// forget stops waiting for the transactions keep rejects, in the samples
// taken before t: they had taken no outbox id by t (see the top of this
// file), so they hold no id of those samples.
func (h *horizon) forget(t time.Time, keep func(x uint64) bool, now pgSnapshot) (advanced bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range h.samples {
		if s := &h.samples[i]; s.at.Before(t) && s.ready {
			s.need = slices.DeleteFunc(s.need, func(x uint64) bool { return !keep(x) })
		}
	}
	return h.releaseLocked(now)
}

// giveUp releases every sample taken at or before t, whatever it waits for.
func (h *horizon) giveUp(t time.Time) (advanced bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for n < len(h.samples) && !h.samples[n].at.After(t) {
		advanced = h.raise(h.samples[n].maxID) || advanced
		n++
	}
	h.samples = slices.Delete(h.samples, 0, n)
	return advanced
}

// watermark runs the sampling of a relay with Config.Watermark on.
type watermark struct {
	r     *Relay
	h     horizon
	poked chan struct{}

	// acks are the transactions of this relay's acks in flight: they
	// update outbox rows and take no id, so no sample waits for them
	// (under load an ack is the longest transaction in most samples).
	ackMu sync.Mutex
	acks  map[uint64]struct{}

	lastLockCheck time.Time
	forced        atomic.Int64 // times the relay gave up waiting (MaxWait)
	samples       atomic.Int64 // snapshots read
}

// firstSuccessor is how soon the sample after the first one of a busy
// spell is taken: late enough for a transaction that took its id just
// before the first sample to have been given its transaction id (within
// the same INSERT), early enough that an event on an idle outbox waits
// a few milliseconds, not an interval.
const firstSuccessor = 2 * time.Millisecond

// lockCheckAfter is how long a sample waits before the relay asks which
// of the transactions it waits for wrote to the outbox (and how often it
// asks again while samples wait): reading pg_locks takes every partition of
// the lock manager's table, so a few times a second at most.
const lockCheckAfter = 250 * time.Millisecond

func newWatermark(r *Relay) *watermark {
	w := &watermark{r: r, poked: make(chan struct{}, 1), acks: map[uint64]struct{}{}}
	w.h.ignore = w.isAck
	return w
}

// own and disown record an ack's transaction while it runs.
func (w *watermark) own(xid uint64) {
	w.ackMu.Lock()
	w.acks[xid] = struct{}{}
	w.ackMu.Unlock()
}

func (w *watermark) disown(xid uint64) {
	w.ackMu.Lock()
	delete(w.acks, xid)
	w.ackMu.Unlock()
}

func (w *watermark) isAck(xid uint64) bool {
	w.ackMu.Lock()
	defer w.ackMu.Unlock()
	_, ok := w.acks[xid]
	return ok
}

// poke makes the watermark sample at once (events were notified).
func (w *watermark) poke() {
	select {
	case w.poked <- struct{}{}:
	default:
	}
}

// released is the highest id a claim may take for an event with an
// aggregate.
func (w *watermark) released() int64 { return w.h.released.Load() }

// wait is how long the oldest sample has waited for release.
func (w *watermark) wait() time.Duration {
	if t := w.h.oldest(); !t.IsZero() {
		return time.Since(t)
	}
	return 0
}

// run samples every Config.Watermark.Interval while a sample waits for
// release, else when poked (at most once per interval) or every
// PollInterval, and wakes the relay when the watermark advances.
func (w *watermark) run(ctx context.Context) {
	cfg := w.r.cfg
	t := time.NewTimer(0)
	defer t.Stop()
	reset := func(d time.Duration) {
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(d)
	}
	failing := false
	var last, due time.Time // the last sample; when the timer fires
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.poked:
			// A NOTIFY per commit under load: at most one sample per
			// interval, the next one due at the latest then.
			if next := last.Add(cfg.Watermark.Interval); time.Now().Before(next) {
				if due.After(next) {
					due = next
					reset(time.Until(next))
				}
				continue
			}
		case <-t.C:
		}
		last = time.Now()
		advanced, err := w.step(ctx)
		if err != nil && ctx.Err() == nil {
			// The worker reports a lost database; this only waits.
			if !failing {
				cfg.Logger.Debug("relay: watermark sample failed", "error", err)
			}
			failing = true
		} else {
			failing = false
		}
		if advanced {
			w.r.Wake()
		}
		// Every interval while an id waits; a failing database is asked
		// again once per poll interval, not a hundred times a second.
		next := cfg.PollInterval
		switch {
		case err != nil:
		case w.h.firstAfterIdle():
			// Events came to an idle outbox (a NOTIFY): the sample
			// that releases them follows at once.
			next = min(cfg.Watermark.Interval, firstSuccessor)
		case !w.h.oldest().IsZero():
			next = cfg.Watermark.Interval
		}
		due = time.Now().Add(next)
		reset(next)
	}
}

// step takes one sample, and when the oldest waits long, looks at what it
// waits for.
func (w *watermark) step(ctx context.Context) (advanced bool, err error) {
	s, err := w.sample(ctx)
	if err != nil {
		return false, err
	}
	w.samples.Add(1)
	advanced = w.h.add(s)
	oldest := w.h.oldest()
	if oldest.IsZero() {
		return advanced, nil
	}
	waited := time.Since(oldest)
	if waited >= lockCheckAfter && time.Since(w.lastLockCheck) >= lockCheckAfter {
		w.lastLockCheck = time.Now()
		writers, err := w.outboxWriters(ctx)
		if err != nil {
			return advanced, err
		}
		// Samples taken before the look-up: a transaction that had taken no
		// id from the outbox's sequence then holds none of their ids.
		if w.h.forget(s.at, func(x uint64) bool { _, ok := writers[uint32(x)]; return ok }, s.snap) {
			advanced = true
		}
		oldest = w.h.oldest()
		if !oldest.IsZero() && time.Since(oldest) >= w.r.cfg.Watermark.MaxWait {
			held := w.h.waiting(oldest.Add(time.Nanosecond), s.snap)
			var names []string
			for _, x := range held {
				names = append(names, writers[uint32(x)].describe(x))
			}
			w.forced.Add(1)
			w.r.cfg.Logger.Warn("relay: watermark: gave up waiting for transactions that hold outbox rows uncommitted; "+
				"events they commit later may be delivered out of id order (each is reported)",
				"waited", time.Since(oldest).Round(time.Millisecond), "max_wait", w.r.cfg.Watermark.MaxWait,
				"transactions", strings.Join(names, ", "), "hint", "keep producer transactions short; see docs/ordering.md")
			if w.h.giveUp(s.at) {
				advanced = true
			}
		}
	}
	return advanced, nil
}

// sample reads the snapshot and the highest visible id in one statement
// (pg_current_snapshot() is the statement's snapshot).
func (w *watermark) sample(ctx context.Context) (visSample, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var s visSample
	var xip []int64
	var xmin, xmax int64
	err := w.r.pool.QueryRow(ctx, w.r.q.sampleSnapshot).Scan(&xmin, &xmax, &xip, &s.maxID)
	if err != nil {
		return s, fmt.Errorf("relay: watermark sample: %w", err)
	}
	s.at = time.Now()
	s.snap = pgSnapshot{xmin: uint64(xmin), xmax: uint64(xmax), xip: make([]uint64, len(xip))}
	for i, x := range xip {
		s.snap.xip[i] = uint64(x)
	}
	slices.Sort(s.snap.xip)
	return s, nil
}

// writer is a transaction that took an id from the outbox's sequence.
type writer struct {
	pid      int64
	prepared bool
}

func (wr writer) describe(x uint64) string {
	switch {
	case wr.prepared:
		return fmt.Sprintf("xid %d (prepared)", x)
	case wr.pid != 0:
		return fmt.Sprintf("xid %d (pid %d)", x, wr.pid)
	default:
		return fmt.Sprintf("xid %d", x)
	}
}

// outboxWriters are the transactions (by 32-bit xid) that took an id from
// the outbox's sequence (see outboxWritersSQL), prepared ones included.
// pg_locks is read by everyone, unlike other sessions' pg_stat_activity
// rows.
func (w *watermark) outboxWriters(ctx context.Context) (map[uint32]writer, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rows, err := w.r.pool.Query(ctx, w.r.q.outboxWriters)
	if err != nil {
		return nil, fmt.Errorf("relay: watermark: read pg_locks: %w", err)
	}
	defer rows.Close()
	out := map[uint32]writer{}
	for rows.Next() {
		var xid int64
		var pid *int64
		if err := rows.Scan(&xid, &pid); err != nil {
			return nil, err
		}
		wr := writer{prepared: pid == nil}
		if pid != nil {
			wr.pid = *pid
		}
		out[uint32(xid)] = wr
	}
	return out, rows.Err()
}

// noHorizon is the claim's bound when the watermark is off.
const noHorizon = math.MaxInt64
