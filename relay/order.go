package relay

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
)

// overtaken counts the events of a claim that come after a later event of
// their aggregate was delivered, or is being delivered (x.later: the
// aggregates the claim passed, nil when it passed none), or reached a
// consumer without being recorded (r.reached), reports them (a
// WARN per claim, and aa_outbox_overtaken for status and the console) and
// returns how many there are. They are delivered all the same: at least
// once, in the order they are found, beats holding them back for an
// operator.
//
// The claim says, per event, whether the aggregate's next event was
// delivered (claimed.overtaken). Every event of the aggregate in the batch
// before such an event came after that delivered one too: events 99 and
// 100 that commit late behind a delivered 101 are both found, though only
// 100's next event is 101. So each aggregate's events are walked from the
// last, carrying the nearest later delivered id.
func (r *Relay) overtaken(evs []claimed, x *exclusion) int {
	var byAgg map[[16]byte][]int // indexes in evs, in id order
	for i := range evs {
		if e := &evs[i].ev; e.AggregateID != nil {
			if byAgg == nil {
				byAgg = make(map[[16]byte][]int)
			}
			byAgg[*e.AggregateID] = append(byAgg[*e.AggregateID], i)
		}
	}
	var found []overtakenRow
	for agg, idx := range byAgg {
		later, _ := x.laterOf(agg)
		if rl := r.reached.of(agg); rl > evs[idx[0]].ev.ID && (later <= evs[idx[0]].ev.ID || rl < later) {
			later = rl
		}
		for k := len(idx) - 1; k >= 0; k-- {
			ce := &evs[idx[k]]
			if o := ce.overtaken; o > 0 && (later <= ce.ev.ID || o < later) {
				later = o
			}
			if later > ce.ev.ID {
				found = append(found, overtakenRow{id: ce.ev.ID, aggType: ce.ev.AggregateType, agg: agg, later: later})
			}
		}
	}
	slices.SortFunc(found, func(a, b overtakenRow) int { return cmp.Compare(a.id, b.id) })
	if len(found) == 0 {
		return 0
	}
	f := found[0]
	r.cfg.Logger.Warn("relay: events delivered out of id order: committed after a later event of their aggregate was delivered",
		"events", len(found), "aggregate_type", f.aggType, "aggregate_id", uuid.UUID(f.agg).String(), "event_id", f.id, "after_event_id", f.later,
		"watermark", r.cfg.Watermark.Mode,
		"hint", "a producer inserts without taking the aggregate's advisory lock (outbox.Writer takes it); see docs/outbox.md and docs/ordering.md")
	r.recordOvertaken(found)
	return len(found)
}

// laterOf is the highest id of agg among the events x passed.
func (x *exclusion) laterOf(agg [16]byte) (int64, bool) {
	if x == nil || x.later == nil {
		return 0, false
	}
	id, ok := x.later[agg]
	return id, ok
}

// overtakenRow is one event found out of order.
type overtakenRow struct {
	id      int64
	aggType string
	agg     [16]byte
	later   int64
}

// recordOvertaken writes the events found out of order to
// aa_outbox_overtaken (status and the console read it), in the background:
// the batch does not wait for it, and a failure only costs the record.
func (r *Relay) recordOvertaken(rows []overtakenRow) {
	ids := make([]int64, len(rows))
	types := make([]string, len(rows))
	aggs := make([][16]byte, len(rows))
	later := make([]int64, len(rows))
	for i, o := range rows {
		ids[i], types[i], aggs[i], later[i] = o.id, o.aggType, o.agg, o.later
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := r.pool.Exec(ctx, r.q.recordOvertaken, ids, types, aggs, later, r.cfg.InstanceID); err != nil {
			r.cfg.Logger.Warn("relay: could not record events delivered out of order (the log line above names them)", "error", err)
		}
	}()
}

// reachedMax bounds what reached remembers: two generations of at most
// this many aggregates each (about 40 bytes per aggregate).
const reachedMax = 32768

// reached remembers, per aggregate recently delivered by this relay, the
// highest id a consumer was handed and answered for (delivered, refused,
// or to be retried: each may have reached the receiver), whether or not
// the ack recorded it. An event committed late behind such an event is
// reported even when the later one is pending again (its ack was abandoned,
// or it is to be retried): the receiver has seen it. Safe for concurrent use.
type reached struct {
	mu        sync.Mutex
	cur, prev map[[16]byte]int64
}

// record notes the events of a delivered batch that a consumer answered for.
func (rc *reached) record(evs []claimed, acks []ackRow) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, a := range acks {
		if a.outcome != "dispatched" && a.outcome != "failed" && a.outcome != "retry" && len(a.rows) == 0 {
			continue
		}
		ce := claimedByID(evs, a.id)
		if ce == nil || ce.ev.AggregateID == nil {
			continue
		}
		agg := *ce.ev.AggregateID
		if rc.cur == nil || len(rc.cur) >= reachedMax {
			rc.prev, rc.cur = rc.cur, make(map[[16]byte]int64)
		}
		rc.cur[agg] = max(rc.cur[agg], rc.prev[agg], a.id)
	}
}

// of is the highest id of agg that reached a consumer, 0 when none is known.
func (rc *reached) of(agg [16]byte) int64 {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return max(rc.cur[agg], rc.prev[agg])
}
