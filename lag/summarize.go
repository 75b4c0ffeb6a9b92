package lag

import (
	"cmp"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
)

// summary is one snapshot being summed up from the raw rows.
type summary struct {
	s      *Snapshot
	byType map[string]*AggregateTypeLag
}

// age is now - t in seconds at the snapshot's time (0 for a zero t).
func (sm *summary) age(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return max(0, sm.s.At.Sub(t).Seconds())
}

// typ is the figures of one aggregate_type.
func (sm *summary) typ(name string) *AggregateTypeLag {
	if a, ok := sm.byType[name]; ok {
		return a
	}
	a := &AggregateTypeLag{AggregateType: name}
	sm.byType[name] = a
	return a
}

// minTime keeps in t the earlier of t and v (a zero t is none).
func minTime(t *time.Time, v time.Time) {
	if t.IsZero() || v.Before(*t) {
		*t = v
	}
}

// summarize fills the totals, per aggregate_type and per consumer figures.
func (r *Reader) summarize(s *Snapshot, rw *raw) {
	sm := &summary{s: s, byType: map[string]*AggregateTypeLag{}}
	sm.totals(rw)
	s.Consumers = make([]ConsumerLag, len(r.consumers))
	for i, c := range r.consumers {
		r.owed(sm, &s.Consumers[i], c, rw)
		s.DeliverableLag = max(s.DeliverableLag, s.Consumers[i].DeliverableLag)
	}
	holds := r.blockedFor(sm, rw)
	r.listBlocked(s, rw, holds)
	s.AggregateTypes = make([]AggregateTypeLag, 0, len(sm.byType))
	for _, a := range sm.byType {
		s.AggregateTypes = append(s.AggregateTypes, *a)
	}
	sort.Slice(s.AggregateTypes, func(i, j int) bool { return s.AggregateTypes[i].AggregateType < s.AggregateTypes[j].AggregateType })
}

// totals sums the event rows: pending, ready, failed, per aggregate_type
// too, and the oldest pending.
func (sm *summary) totals(rw *raw) {
	s := sm.s
	var oldest time.Time
	for _, g := range rw.pending {
		s.Pending += g.n
		if g.ready {
			s.Ready += g.n
		}
		a := sm.typ(g.aggregateType)
		a.Pending += g.n
		a.OldestPendingAge = max(a.OldestPendingAge, sm.age(g.oldest))
		minTime(&oldest, g.oldest)
	}
	s.OldestPendingAge = sm.age(oldest)
	for _, g := range rw.failed {
		s.Failed += g.n
		sm.typ(g.aggregateType).Failed += g.n
	}
}

// owed fills what consumer c owes: pending (deliverable, backing off, or
// behind a head, counted there), failed, and its pause.
func (r *Reader) owed(sm *summary, cl *ConsumerLag, c Consumer, rw *raw) {
	*cl = ConsumerLag{Name: c.Name, Type: c.Type, State: "running"}
	if sm.s.Relays.Live == 0 {
		cl.State = StateNoRelay
	}
	cl.Indexes = c.Indexes
	var owedOldest, delivOldest time.Time
	// owe counts n pending events the consumer still owes.
	owe := func(n int64, oldest time.Time, blockedFor []string, ready bool) {
		cl.Pending += n
		minTime(&owedOldest, oldest)
		switch {
		case blocks(blockedFor, c.Name):
			// counted behind its head (blockedFor)
		case ready:
			cl.Deliverable += n
			minTime(&delivOldest, oldest)
		default:
			// a head waiting for its retry, or an event without an
			// aggregate doing so
			cl.Blocked.BackingOff.Events += n
		}
	}
	for _, g := range rw.pending {
		if !g.split && r.routed(c.Name, g.eventType, g.aggregateType) {
			owe(g.n, g.oldest, g.blockedFor, g.ready)
		}
	}
	for _, g := range rw.rows {
		switch {
		case g.consumer != c.Name:
		case g.state == "failed":
			cl.Failed += g.n
		default:
			owe(g.n, g.oldest, g.blockedFor, g.ready)
		}
	}
	for _, g := range rw.failed {
		if !g.split && r.routed(c.Name, g.eventType, g.aggregateType) {
			cl.Failed += g.n
		}
	}
	cl.OldestPendingAge = sm.age(owedOldest)
	cl.DeliverableLag = sm.age(delivOldest)
	if p, ok := rw.pauses[c.Name]; ok && p.state == "paused" {
		cl.State = "paused"
		pause := &Pause{Reason: Redact(p.reason, maxError), Probes: p.probes, ProbeAt: p.probeAt}
		if p.pausedAt != nil {
			pause.Since = *p.pausedAt
			pause.Age = sm.age(*p.pausedAt)
		}
		cl.Paused = pause
		pf := &cl.Blocked.Paused
		pf.Events, pf.Why, pf.Age = cl.Deliverable, pause.Reason, pause.Age
		if p.pausedAt != nil {
			pf.Since = p.pausedAt
		}
		cl.Deliverable, cl.DeliverableLag = 0, 0
	}
}

// blockedFor decides from the heads, per aggregate, what is blocked for
// whom: it fills each consumer's failed and backing-off figures and returns
// the consumers each head holds back.
func (r *Reader) blockedFor(sm *summary, rw *raw) map[*head][]string {
	type aggKey struct {
		typ string
		id  uuid.UUID
	}
	byAgg := map[aggKey][]*head{}
	var keys []aggKey
	for i := range rw.heads {
		h := &rw.heads[i]
		k := aggKey{h.aggregateType, h.aggregateID}
		if _, ok := byAgg[k]; !ok {
			keys = append(keys, k)
		}
		byAgg[k] = append(byAgg[k], h)
	}
	sm.s.BlockedCount = int64(len(keys))
	holds := map[*head][]string{}
	for i, c := range r.consumers {
		cl := &sm.s.Consumers[i]
		for _, k := range keys {
			if eff, waiting, ok := r.headFor(c.Name, byAgg[k]); ok {
				holds[eff] = append(holds[eff], c.Name)
				f := cl.Blocked.Cause(eff.cause)
				f.Aggregates++
				f.Events += waiting
				if f.Since == nil || eff.createdAt.Before(*f.Since) || (eff.createdAt.Equal(*f.Since) && eff.id < f.HeadID) {
					t := eff.createdAt
					f.Since, f.HeadID, f.Why = &t, eff.id, Redact(eff.lastError, maxError)
				}
			}
		}
		for _, cause := range []string{CauseFailed, CauseBackingOff} {
			if f := cl.Blocked.Cause(cause); f.Since != nil {
				f.Age = sm.age(*f.Since)
			}
		}
	}
	return holds
}

// headFor is the head of an aggregate (its heads) that holds consumer back
// — the first of the event row's and the consumer's own —, with the
// pending events routed to the consumer behind it; ok is false when the
// consumer owes nothing there.
func (r *Reader) headFor(consumer string, heads []*head) (eff *head, waiting int64, ok bool) {
	for _, h := range heads {
		if (h.consumer == allConsumers || h.consumer == consumer) && (eff == nil || h.id < eff.id) {
			eff = h
		}
	}
	if eff == nil {
		return nil, 0, false
	}
	owed := eff.consumer == consumer || r.routed(consumer, eff.eventType, eff.aggregateType)
	for et, n := range eff.waiting {
		if r.routed(consumer, et, eff.aggregateType) {
			waiting += n
		}
	}
	return eff, waiting, owed || waiting > 0
}

// listBlocked lists the heads, oldest id first, at most MaxListed.
func (r *Reader) listBlocked(s *Snapshot, rw *raw, holds map[*head][]string) {
	list := make([]*head, 0, len(rw.heads))
	for i := range rw.heads {
		list = append(list, &rw.heads[i])
	}
	sort.Slice(list, func(i, j int) bool {
		return cmp.Or(cmp.Compare(list[i].id, list[j].id), strings.Compare(list[i].consumer, list[j].consumer)) < 0
	})
	for _, h := range list[:min(len(list), max(0, r.MaxListed))] {
		b := Blocked{AggregateType: h.aggregateType, AggregateID: h.aggregateID, HeadID: h.id, EventType: h.eventType,
			Consumers: append([]string{}, holds[h]...), Status: h.status, Cause: h.cause, Attempts: h.attempts,
			LastError: Redact(h.lastError, maxError), AvailableAt: h.availableAt, CreatedAt: h.createdAt}
		if h.consumer != allConsumers {
			b.Consumer = h.consumer
		}
		for _, n := range h.waiting {
			b.Waiting += n
		}
		s.Blocked = append(s.Blocked, b)
	}
}
