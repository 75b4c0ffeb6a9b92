package relay

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// maxFailureLines is how many failed events a batch logs one by one; the
// rest are summed up per reason in one more line.
const maxFailureLines = 5

// logFailures writes a WARN for each event the ack just recorded as failed
// for a consumer (parked: its aggregate waits for an operator), with its id,
// event type, consumer and reason; beyond maxFailureLines in one batch, one
// line counts the rest per consumer and reason. Called once the ack
// recorded every outcome of the batch, so nothing is logged for an outcome
// another relay will write again.
func (r *Relay) logFailures(evs []claimed, acks []ackRow) {
	type failure struct {
		id                   int64
		eventType, aggregate string
		consumer, reason     string
		attempts             int
	}
	var fs []failure
	for _, a := range acks {
		if a.outcome != "failed" && !slices.ContainsFunc(a.rows, func(d deliveryRow) bool { return d.state == rowFailed }) {
			continue
		}
		ce := claimedByID(evs, a.id)
		if ce == nil {
			continue
		}
		f := failure{id: a.id, eventType: ce.ev.EventType, aggregate: ce.ev.AggregateKey(), attempts: a.newAttempts}
		if len(a.rows) == 0 {
			// Every routed consumer failed it alike: the outbox row's
			// error names them ("<consumer>: <reason>").
			f.consumer, f.reason, _ = strings.Cut(a.lastError, ": ")
			fs = append(fs, f)
			continue
		}
		for _, d := range a.rows {
			if d.state == rowFailed {
				g := f
				g.consumer, g.reason, g.attempts = d.consumer, d.lastError, d.attempts
				fs = append(fs, g)
			}
		}
	}
	for i, f := range fs {
		if i == maxFailureLines {
			break
		}
		r.cfg.Logger.Warn("relay: event failed: its aggregate waits for an operator (searchsync outbox retry or ack)",
			"event_id", f.id, "event_type", f.eventType, "aggregate", f.aggregate, "consumer", f.consumer,
			"attempts", f.attempts, "reason", f.reason)
	}
	if len(fs) > maxFailureLines {
		counts := map[string]int{}
		for _, f := range fs[maxFailureLines:] {
			reason := f.reason
			if len(reason) > 120 {
				reason = reason[:120] + "…"
			}
			counts[f.consumer+": "+reason]++
		}
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(counts)) {
			parts = append(parts, fmt.Sprintf("%d × %s", counts[k], k))
		}
		r.cfg.Logger.Warn("relay: more events failed in the same batch (searchsync outbox list --status failed)",
			"events", len(fs)-maxFailureLines, "by_reason", strings.Join(parts, "; "))
	}
}

// claimedByID is the event of a claim (in id order, as every claim is) with
// id, nil when the claim has none.
func claimedByID(evs []claimed, id int64) *claimed {
	i, ok := slices.BinarySearchFunc(evs, id, func(c claimed, id int64) int { return cmp.Compare(c.ev.ID, id) })
	if !ok {
		return nil
	}
	return &evs[i]
}

// postponeEvery is how often one consumer and reason is logged while
// events keep being postponed for it.
const postponeEvery = 10 * time.Second

// postponements rate-limits the lines of logPostponed: the first
// postponement of a consumer and reason is logged at once, the next ones
// counted and logged together at most once per postponeEvery.
type postponements struct {
	mu   sync.Mutex
	seen map[string]*postponed
}

type postponed struct {
	logged  time.Time
	since   int   // postponed since that line
	retryIn int64 // the longest delay among them, in ms
}

// logPostponed writes an INFO line when the ack just postponed events for a
// consumer — a retry after an error with backoff, or events the consumer
// pushed back (an engine's 429, one index of several blocked) that wait
// without counting an attempt — so that backing-off aggregates in the
// console and `status` always have a line that explains them. Events held
// for a paused consumer are the pause's (its own lines).
func (r *Relay) logPostponed(acks []ackRow) {
	type key struct{ consumer, reason string }
	counts := map[key]int{}
	delays := map[key]time.Duration{}
	note := func(consumer, reason string, delay time.Duration) {
		if len(reason) > 160 {
			reason = reason[:160] + "…"
		}
		k := key{consumer, reason}
		counts[k]++
		delays[k] = max(delays[k], delay)
	}
	for _, a := range acks {
		switch a.outcome {
		case "retry":
			// Every routed consumer alike: "<consumer>: <reason>; …".
			for _, part := range strings.Split(a.lastError, "; ") {
				c, reason, _ := strings.Cut(part, ": ")
				note(c, reason, a.delay)
			}
		case "pending":
			for _, d := range a.rows {
				if d.state == rowPending && d.lastError != "" && d.delay != holdDelay {
					note(d.consumer, d.lastError, d.delay)
				}
			}
		}
	}
	if len(counts) == 0 {
		return
	}
	now := time.Now()
	r.postponed.mu.Lock()
	defer r.postponed.mu.Unlock()
	if r.postponed.seen == nil {
		r.postponed.seen = map[string]*postponed{}
	}
	for _, k := range slices.SortedFunc(maps.Keys(counts), func(a, b key) int {
		return cmp.Or(cmp.Compare(a.consumer, b.consumer), cmp.Compare(a.reason, b.reason))
	}) {
		id := k.consumer + "\x00" + k.reason
		p := r.postponed.seen[id]
		if p == nil {
			p = &postponed{}
			r.postponed.seen[id] = p
		}
		p.since += counts[k]
		p.retryIn = max(p.retryIn, delays[k].Milliseconds())
		if now.Sub(p.logged) < postponeEvery {
			continue
		}
		r.cfg.Logger.Info("relay: events postponed for a consumer; their aggregates back off until the retry (docs/operations.md)",
			"consumer", k.consumer, "events", p.since, "retry_in", (time.Duration(p.retryIn) * time.Millisecond).String(), "reason", k.reason)
		p.logged, p.since, p.retryIn = now, 0, 0
	}
	// Keys not seen for a while go, so the map stays small.
	for id, p := range r.postponed.seen {
		if p.since == 0 && now.Sub(p.logged) > 10*postponeEvery {
			delete(r.postponed.seen, id)
		}
	}
}
