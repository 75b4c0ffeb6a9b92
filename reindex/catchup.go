package reindex

import (
	"context"
	"fmt"
	"time"
)

// owedSQL counts, per event and aggregate type, the events up to the
// replay's watermark ($1) that the replay wrote to the target but the live
// consumers have not delivered yet: pending, of the alias's aggregate types
// ($2, NULL for patterns), not behind a failed event of their aggregate
// (the replay leaves those out, see replayWhereSQL), and either without
// delivery rows or with a pending row for one of the alias's search
// consumers ($3, NULL: any consumer). It reads through the partial index of
// pending events.
const owedSQL = `
SELECT e.event_type, e.aggregate_type, count(*)
FROM aa_outbox_event e
WHERE e.status = 'pending' AND e.id <= $1
  AND ($2::text[] IS NULL OR e.aggregate_type = ANY($2))
  AND NOT EXISTS (
        SELECT 1 FROM aa_outbox_event f
        WHERE f.status = 'failed' AND f.aggregate_type = e.aggregate_type
          AND f.aggregate_id = e.aggregate_id AND f.id < e.id)
  AND (NOT EXISTS (SELECT 1 FROM aa_outbox_delivery d WHERE d.event_id = e.id)
       OR EXISTS (SELECT 1 FROM aa_outbox_delivery d
                  WHERE d.event_id = e.id AND d.state = 'pending'
                    AND ($3::text[] IS NULL OR d.consumer = ANY($3))))
GROUP BY e.event_type, e.aggregate_type`

// catchUpPoll is how often catchUp counts again.
const catchUpPoll = 250 * time.Millisecond

// owed returns how many events up to wm the live index still lacks (see
// owedSQL), counting only the types the alias's search consumers want.
func (r *Reindexer) owed(ctx context.Context, wm int64) (int64, error) {
	rows, err := r.cfg.Pool.Query(ctx, owedSQL, wm, r.aggTypes, r.cfg.Consumers)
	if err != nil {
		return 0, fmt.Errorf("reindex: count the events the live index lacks: %w", err)
	}
	defer rows.Close()
	var n int64
	for rows.Next() {
		var et, at string
		var c int64
		if err := rows.Scan(&et, &at, &c); err != nil {
			return 0, fmt.Errorf("reindex: count the events the live index lacks: %w", err)
		}
		if r.liveWants(et, at) {
			n += c
		}
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("reindex: count the events the live index lacks: %w", err)
	}
	return n, nil
}

// catchUp waits until the live index holds every event up to wm, the last
// replay pass's watermark. The replay writes pending events to the target
// that the relay has not delivered yet (they reach the live index later,
// and both indexes from then on by dual writes); compared before, the
// target is ahead of the live index by the relay's lag, and on a busy
// relay that lag outlasts the check's re-reads. catchUp waits as long as
// the count keeps falling: it gives up once it has not fallen for
// Config.CatchUpStall (a stopped relay, a paused consumer) and returns
// what is still owed; the check then runs and reports it.
func (r *Reindexer) catchUp(ctx context.Context, wm int64) (int64, error) {
	n, err := r.owed(ctx, wm)
	if err != nil || n == 0 {
		return n, err
	}
	start := time.Now()
	r.log.Info("reindex: waiting for the live consumers to deliver what the replay wrote", "events", n, "watermark", wm)
	least, fell := n, time.Now()
	for n > 0 {
		r.update(func(p *Progress) { p.Owed = n })
		if time.Since(fell) >= r.cfg.CatchUpStall {
			r.log.Warn("reindex: the live consumers delivered nothing of what they owe; checking anyway",
				"events", n, "watermark", wm, "stalled_for", r.cfg.CatchUpStall.String())
			return n, nil
		}
		if err := sleep(ctx, catchUpPoll); err != nil {
			return n, err
		}
		if n, err = r.owed(ctx, wm); err != nil {
			return n, err
		}
		if n < least {
			least, fell = n, time.Now()
		}
	}
	r.update(func(p *Progress) { p.Owed = 0 })
	r.log.Info("reindex: the live index caught up", "watermark", wm, "waited_s", time.Since(start).Seconds())
	return 0, nil
}

// liveWants reports whether the live index receives events of the type: the
// alias's search consumers want it (Config.Wants) and a projection of the
// alias matches it.
func (r *Reindexer) liveWants(eventType, aggregateType string) bool {
	if r.cfg.Wants != nil && !r.cfg.Wants(eventType, aggregateType) {
		return false
	}
	return r.cfg.Projections.Find(eventType, aggregateType, []string{r.cfg.Def.Alias}) != nil
}
