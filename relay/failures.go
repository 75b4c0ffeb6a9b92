package relay

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
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
