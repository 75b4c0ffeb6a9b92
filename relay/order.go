package relay

import (
	"context"
	"time"

	"github.com/google/uuid"
)

// overtaken counts the events of a claim that come after a later event of
// their aggregate was delivered, or is being delivered (x.later: the
// aggregates the claim passed, nil when it passed none), reports them (a
// WARN per claim, and aa_outbox_overtaken for status and the console) and
// returns how many there are. They are delivered all the same: at least
// once, in the order they are found, beats holding them back for an
// operator.
//
// A claim holds, per aggregate, an unbroken run of its events from the
// head in id order, so when the event after a run's last one was delivered,
// so was it after every event of the run.
func (r *Relay) overtaken(evs []claimed, x *exclusion) int {
	type run struct{ first, last int } // indexes in evs
	var runs map[[16]byte]*run
	for i := range evs {
		e := &evs[i].ev
		if e.AggregateID == nil {
			continue
		}
		if runs == nil {
			runs = make(map[[16]byte]*run)
		}
		rn := runs[*e.AggregateID]
		if rn == nil {
			rn = &run{first: i}
			runs[*e.AggregateID] = rn
		}
		rn.last = i
	}
	var found []overtakenRow
	for agg, rn := range runs {
		last := &evs[rn.last]
		later := last.overtaken
		if l, ok := x.laterOf(agg); ok && l > last.ev.ID && (later == 0 || l < later) {
			later = l
		}
		if later == 0 {
			continue
		}
		for i := rn.first; i <= rn.last; i++ {
			if e := &evs[i].ev; e.AggregateID != nil && *e.AggregateID == agg {
				found = append(found, overtakenRow{id: e.ID, aggType: e.AggregateType, agg: agg, later: later})
			}
		}
	}
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
