package relay

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/searchsync/searchsync/delivery"
	"github.com/searchsync/searchsync/outbox"
)

// Delivery row states (aa_outbox_delivery.state).
const (
	rowDone    = "done"
	rowPending = "pending"
	rowFailed  = "failed"
)

// prior is what the claim read of one consumer's delivery row of an event.
type prior struct {
	state    string // rowDone, rowPending, rowFailed
	attempts int
	wait     time.Duration // pending: how long until it is available (<= 0: now)
	held     bool          // pending: held back for a paused consumer (outbox.HeldSQL)
}

// holdDelay, as a delay to write, is "held back until the consumer resumes"
// (available_at = outbox.HeldSQL): out of every claim until the relay that
// resumes the consumer releases it, in id order.
const holdDelay = -time.Millisecond // written as delay_ms -1

// ackRow is what the ack statement writes for one event: the outbox row,
// and the delivery rows when its consumers went different ways.
type ackRow struct {
	id          int64
	part        int32
	attempts    int    // as claimed (the ack's guard)
	newAttempts int    // written
	outcome     string // dispatched, skipped, retry, failed, pending
	lastError   string // empty: kept
	delay       time.Duration
	// hadRows: the event had delivery rows (they are deleted when it is
	// dispatched now); rows are the delivery rows to write.
	hadRows bool
	rows    []deliveryRow
	// delivered are the consumers (by index) that delivered the event in
	// this batch (answered OK or stale), counted in aa_consumer_throughput
	// by the ack: bit ci of deliveredMask for ci < 64, deliveredMore for
	// the rest.
	deliveredMask uint64
	deliveredMore []int
}

// markDelivered records that consumer ci delivered the event in this batch.
func (a *ackRow) markDelivered(ci int) {
	if ci < 64 {
		a.deliveredMask |= 1 << ci
		return
	}
	a.deliveredMore = append(a.deliveredMore, ci)
}

// deliveryRow is one consumer's delivery row to write.
type deliveryRow struct {
	consumer  string
	state     string
	attempts  int
	lastError string
	delay     time.Duration
}

// result is what one event's delivery did for one routed consumer.
type result struct {
	state     string // rowDone, rowPending, rowFailed
	attempts  int
	lastError string
	delay     time.Duration // pending: until it may be tried again; holdDelay: until resumed
	changed   bool          // differs from what was claimed
	// held: not given to the consumer because it is paused or blocked by an
	// earlier event of its own: a new delivery row keeps the event out of
	// claims until that consumer can move.
	held  bool
	stale bool
	// newRow: the consumer has no delivery row yet (written when the
	// event's consumers diverge).
	newRow bool
}

// consumerAnswer is what one consumer said about its events of a batch.
type consumerAnswer struct {
	out       []delivery.Outcome // by position in its event list
	delivered bool               // at least one OK or Stale
	// unavailable: the first Unavailable reason, when the consumer
	// delivered nothing (it is then paused); retryAfter the longest
	// Retry-After of those answers.
	unavailable string
	retryAfter  time.Duration
}

// deliver routes the batch, runs the consumers concurrently, records pauses
// and resumes, and turns the answers into ack rows (events left untouched
// get none). held is the consumers held back when the batch was claimed.
func (r *Relay) deliver(ctx context.Context, evs []claimed, claimHeld []bool, bs *BatchStats) []ackRow {
	cs := r.cons
	nc := len(cs.list)
	held := slices.Clone(claimHeld)

	// routed[i] lists the consumer indexes of event i (the lists share one
	// slab: this runs for every event); perConsumer[ci] the events handed
	// to consumer ci now (not done or parked for it, not blocked before it,
	// available, consumer not held), perIndex[ci] their indexes.
	routed := make([][]int, len(evs))
	rslab := make([]int, 0, len(evs)*len(r.cfg.Routes))
	perConsumer := make([][]*outbox.Event, nc)
	perIndex := make([][]int, nc)
	for i := range evs {
		ce := &evs[i]
		e := &ce.ev
		r0 := len(rslab)
		for ri, rt := range r.cfg.Routes {
			ci := cs.ofRoute[ri]
			if slices.Contains(rslab[r0:], ci) || (rt.Match != nil && !rt.Match(e.EventType, e.AggregateType)) {
				continue
			}
			rslab = append(rslab, ci)
			name := cs.name(ci)
			if p, ok := ce.rows[name]; ok && (p.state != rowPending || p.wait > 0) {
				continue
			}
			if held[ci] || slices.Contains(ce.blocked, name) {
				continue
			}
			if perConsumer[ci] == nil {
				perConsumer[ci] = make([]*outbox.Event, 0, len(evs)-i)
				perIndex[ci] = make([]int, 0, len(evs)-i)
			}
			perConsumer[ci] = append(perConsumer[ci], e)
			perIndex[ci] = append(perIndex[ci], i)
		}
		routed[i] = rslab[r0:len(rslab):len(rslab)]
	}

	answers := make([]consumerAnswer, nc)
	var wg sync.WaitGroup
	for ci := range perConsumer {
		if len(perConsumer[ci]) == 0 {
			continue
		}
		wg.Go(func() { answers[ci] = r.callConsumer(ctx, ci, perConsumer[ci]) })
	}
	wg.Wait()

	// A delivery cut short by the lease deadline or a stop says nothing
	// about the consumers: nothing is paused and what did not get through
	// is untouched.
	cut := context.Cause(ctx) != nil
	// Event i's answer from consumer ci is byEvent[i*nc+ci].
	byEvent := make([]answer, len(evs)*nc)
	for ci, idx := range perIndex {
		a := &answers[ci]
		for k, i := range idx {
			o := a.out[k]
			if cut && !o.Kind.Delivered() {
				o = delivery.Outcome{}
			}
			byEvent[i*nc+ci] = answer{o, true}
		}
	}
	if !cut {
		for ci := range answers {
			a := &answers[ci]
			switch {
			case a.unavailable != "":
				cs.pause(ctx, ci, a.unavailable, a.retryAfter)
				held[ci] = true
			case a.delivered && cs.paused(ci):
				cs.resume(ctx, ci, "a delivery succeeded")
			}
		}
	}

	acks := make([]ackRow, 0, len(evs))
	for i := range evs {
		if row, ok := r.eventAck(&evs[i], routed[i], byEvent[i*nc:(i+1)*nc], answers, held, bs); ok {
			acks = append(acks, row)
		}
	}
	return acks
}

// callConsumer delivers one consumer's events of a batch.
func (r *Relay) callConsumer(ctx context.Context, ci int, evs []*outbox.Event) (a consumerAnswer) {
	cons := r.cons.list[ci]
	defer func() {
		// A consumer bug must not take the relay down: its events are
		// retried with backoff and end failed with the panic as reason.
		if p := recover(); p != nil {
			r.cfg.Logger.Error("relay: consumer panicked", "consumer", cons.Name(), "panic", p)
			a = consumerAnswer{out: make([]delivery.Outcome, len(evs))}
			for i := range a.out {
				a.out[i] = delivery.Retryf("panic: %v", p)
			}
		}
	}()
	out := cons.Deliver(ctx, evs)
	if len(out) != len(evs) {
		r.cfg.Logger.Error("relay: consumer returned the wrong number of outcomes; treating the batch as not attempted",
			"consumer", cons.Name(), "events", len(evs), "outcomes", len(out))
		out = make([]delivery.Outcome, len(evs))
	}
	a.out = out
	first := ""
	for _, o := range out {
		if o.Kind.Delivered() {
			a.delivered = true
		}
		if o.Kind == delivery.Unavailable {
			if first == "" {
				first = o.Reason
			}
			a.retryAfter = max(a.retryAfter, o.RetryAfter)
		}
	}
	if !a.delivered {
		a.unavailable = first
	}
	return a
}

// answer is a consumer's outcome for one event; given says that the event
// was handed to it in this batch.
type answer struct {
	o     delivery.Outcome
	given bool
}

// eventAck decides what one event's answers do to its rows (answers: one
// per consumer index). It returns false when nothing is to be written.
func (r *Relay) eventAck(ce *claimed, routed []int, answers []answer, consumers []consumerAnswer, held []bool, bs *BatchStats) (ackRow, bool) {
	e := &ce.ev
	row := ackRow{id: e.ID, part: ce.part, attempts: e.Attempts, newAttempts: e.Attempts, hadRows: ce.rows != nil}
	if len(routed) == 0 {
		row.outcome = "skipped"
		bs.Skipped++
		return row, true
	}
	var buf [4]result // routed to up to four consumers: no allocation
	results := buf[:0]
	if len(routed) > len(buf) {
		results = make([]result, 0, len(routed))
	}
	results = results[:len(routed)]
	for k, ci := range routed {
		results[k] = r.consumerResult(ce, ci, answers, consumers[ci], held[ci])
		if results[k].state == rowDone && results[k].changed {
			row.markDelivered(ci)
		}
	}

	allDone, changed, anyHeld, stale := true, false, false, false
	for _, res := range results {
		allDone = allDone && res.state == rowDone
		changed = changed || res.changed
		anyHeld = anyHeld || res.held
		stale = stale || res.stale
	}
	switch {
	case allDone:
		row.outcome = "dispatched"
		bs.Dispatched++
		if stale {
			bs.Stale++
		}
		return row, true
	case !changed && (row.hadRows || !anyHeld):
		bs.Untouched++
		return row, false
	}
	if !row.hadRows {
		// Every routed consumer in one changed state: the outbox row alone
		// says it, as with a single consumer.
		if uniform(results) && results[0].changed {
			res := results[0]
			row.newAttempts, row.lastError = res.attempts, joinErrors(routed, results, r.cons)
			if res.state == rowFailed {
				row.outcome = "failed"
				bs.Failed++
			} else {
				row.outcome, row.delay = "retry", maxDelay(results)
				bs.Retried++
			}
			return row, true
		}
	}
	// The consumers went different ways: one delivery row each.
	anyPending, anyFailed := false, false
	// The outbox row is available when its first pending consumer is; held
	// when every consumer that still owes it is held.
	delay, any := holdDelay, false
	for k, res := range results {
		row.newAttempts = max(row.newAttempts, res.attempts)
		switch res.state {
		case rowPending:
			anyPending = true
			if res.delay != holdDelay && (!any || res.delay < delay) {
				delay, any = res.delay, true
			}
		case rowFailed:
			anyFailed = true
		}
		if res.changed || res.newRow {
			row.rows = append(row.rows, deliveryRow{consumer: r.cons.name(routed[k]), state: res.state,
				attempts: res.attempts, lastError: res.lastError, delay: res.delay})
		}
	}
	if anyPending && !any {
		// The outbox row ends held: every consumer's row that keeps it held
		// is written with it, also one the claim read as held already. A
		// resume may have released that row while the batch was in flight;
		// left alone, it would be available behind a held outbox row, and
		// nothing would keep the aggregate's next events behind this one for
		// that consumer. Held again, it is released with the consumer's next
		// release of held rows (every relay makes one each second while the
		// consumer runs).
		for k, res := range results {
			if res.state == rowPending && res.delay == holdDelay && !res.changed && !res.newRow {
				row.rows = append(row.rows, deliveryRow{consumer: r.cons.name(routed[k]), state: res.state,
					attempts: res.attempts, lastError: res.lastError, delay: holdDelay})
			}
		}
	}
	row.lastError = joinErrors(routed, results, r.cons)
	bs.Split++
	switch {
	case anyPending:
		row.outcome, row.delay = "pending", delay
	case anyFailed:
		row.outcome = "failed"
		bs.Failed++
	}
	return row, true
}

// consumerResult is what the batch did to event ce for consumer ci.
func (r *Relay) consumerResult(ce *claimed, ci int, answers []answer, a consumerAnswer, held bool) result {
	e := &ce.ev
	name := r.cons.name(ci)
	p, hasRow := ce.rows[name]
	if !hasRow {
		p = prior{state: rowPending, attempts: e.Attempts}
	}
	res := result{state: p.state, attempts: p.attempts, delay: max(p.wait, 0), newRow: !hasRow}
	if p.held {
		res.delay = holdDelay
	}
	if p.state != rowPending {
		return res
	}
	// hold keeps the event for a paused consumer until it resumes.
	hold := func() result {
		res.held = true
		if !p.held {
			res.delay, res.changed = holdDelay, hasRow
		}
		return res
	}
	o, given := answers[ci].o, answers[ci].given
	if !given {
		if held {
			return hold()
		}
		// Blocked by an earlier event of its own: it comes after that one.
		res.held = slices.Contains(ce.blocked, name)
		return res
	}
	switch o.Kind {
	case delivery.OK, delivery.Stale:
		res.state, res.changed, res.stale, res.delay = rowDone, true, o.Kind == delivery.Stale, 0
	case delivery.Poison:
		res.state, res.attempts, res.lastError, res.changed = rowFailed, p.attempts+1, o.Reason, true
	case delivery.Retry, delivery.Unavailable:
		if o.Kind == delivery.Unavailable && !a.delivered {
			// The consumer is paused for it: not the event's fault.
			return hold()
		}
		if o.Kind == delivery.Unavailable && !o.Suspect {
			// About the consumer, although others got through (the outage
			// began mid-batch, one index of several is blocked): no
			// attempt; tried again after the first probe's delay.
			res.lastError, res.changed = o.Reason, true
			res.delay = max(r.cfg.Pause.ProbeInitial, o.RetryAfter)
			return res
		}
		res.attempts, res.lastError, res.changed = p.attempts+1, o.Reason, true
		if res.attempts >= r.cfg.MaxAttempts {
			res.state = rowFailed
		} else {
			// The consumer's Retry-After, when longer than the backoff.
			res.delay = max(backoffDelay(r.cfg.Backoff, res.attempts), o.RetryAfter)
		}
	}
	return res
}

// uniform reports whether every consumer ended in the same state with the
// same attempts.
func uniform(rs []result) bool {
	for _, x := range rs[1:] {
		if x.state != rs[0].state || x.attempts != rs[0].attempts || x.changed != rs[0].changed {
			return false
		}
	}
	return true
}

func maxDelay(rs []result) time.Duration {
	var d time.Duration
	for _, x := range rs {
		d = max(d, x.delay)
	}
	return d
}

// joinErrors is last_error of the outbox row: "<consumer>: <reason>" of
// every consumer that failed or retries it now.
func joinErrors(routed []int, rs []result, cs *consumers) string {
	var parts []string
	for k, x := range rs {
		if x.changed && x.lastError != "" {
			parts = append(parts, cs.name(routed[k])+": "+x.lastError)
		}
	}
	return strings.Join(parts, "; ")
}
