package reindex

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/mapping"
)

// maxSkippedTombstones bounds the ids the seed query excludes; with more,
// every tombstone is copied and those without events are deleted after the
// replay (dropTombstones).
const maxSkippedTombstones = 100_000

// filtersTombstones says whether the seed leaves out the tombstones whose
// events were all compacted: soft deletes, and document ids that are
// aggregate ids (otherwise every tombstone is kept).
func (r *Reindexer) filtersTombstones() bool {
	return r.cfg.Def.DeleteMode == mapping.DeleteSoft && r.idIsAggregate
}

// compactedTombstones returns the tombstones (soft deletes) of source whose
// documents no retained outbox event mentions any more. Every event of such
// an aggregate was compacted, so no stale write of it can arrive and the
// tombstone has done its job: not copying it is cheaper than copying and
// deleting it. The seed leaves them out only while they are still
// tombstones (tombstoneQuery): a document revived by a live write is copied,
// and one that gets a new event in between is rebuilt by the replay (its
// base read from the live index, as for every document the target lacks).
// Nil when the filter does not apply; nil and DropTombstones set when there
// are more than maxSkippedTombstones.
func (r *Reindexer) compactedTombstones(ctx context.Context, source string) ([]string, error) {
	if !r.filtersTombstones() {
		return nil, nil
	}
	t := time.Now()
	tq, _ := json.Marshal(map[string]any{"term": map[string]any{r.cfg.Def.TombstoneField: true}})
	var skip []string
	tombstones := 0
	err := r.adm.Scroll(ctx, source, tq, 10000, nil, func(_ int64, hits []indexer.ScrollHit) error {
		tombstones += len(hits)
		ids := make([]string, 0, len(hits))
		for _, h := range hits {
			ids = append(ids, h.ID)
		}
		ts := time.Now()
		gone, err := r.withoutEvents(ctx, ids)
		skip = append(skip, gone...)
		r.log.Debug("reindex: tombstones of a page looked up in the outbox", "ids", len(ids), "ms", time.Since(ts).Milliseconds())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reindex: tombstones of %s: %w", source, err)
	}
	r.log.Debug("reindex: tombstones looked up", "tombstones", tombstones, "without_events", len(skip), "ms", time.Since(t).Milliseconds())
	if len(skip) > maxSkippedTombstones {
		r.update(func(p *Progress) { p.DropTombstones = true })
		return nil, nil
	}
	r.update(func(p *Progress) { p.TombstonesDropped = int64(len(skip)) })
	return skip, nil
}

// tombstoneQuery is the query of the documents to copy: all but the
// tombstones among skip (nil: all).
func (r *Reindexer) tombstoneQuery(skip []string) json.RawMessage {
	if len(skip) == 0 {
		return nil
	}
	q, _ := json.Marshal(map[string]any{"bool": map[string]any{"must_not": []any{
		map[string]any{"bool": map[string]any{"filter": []any{
			map[string]any{"term": map[string]any{r.cfg.Def.TombstoneField: true}},
			map[string]any{"ids": map[string]any{"values": skip}},
		}}},
	}}})
	return q
}

// withoutEvents returns those of ids (document ids that are aggregate ids)
// that no outbox event (any status) mentions.
func (r *Reindexer) withoutEvents(ctx context.Context, ids []string) ([]string, error) {
	var uuids []string
	for _, id := range ids {
		if _, err := uuid.Parse(id); err == nil {
			uuids = append(uuids, id)
		}
	}
	if len(uuids) == 0 {
		return nil, nil
	}
	// One index probe per id (the aggregate index, with the aggregate
	// types of the alias's projections: only events of those can write its
	// documents).
	query, args := `SELECT t.i FROM unnest($1::uuid[]) WITH ORDINALITY AS t(id, i)
WHERE NOT EXISTS (SELECT 1 FROM aa_outbox_event e WHERE e.aggregate_id = t.id)`, []any{uuids}
	if len(r.aggTypes) > 0 {
		query, args = `SELECT t.i FROM unnest($1::uuid[]) WITH ORDINALITY AS t(id, i)
WHERE NOT EXISTS (SELECT 1 FROM aa_outbox_event e WHERE e.aggregate_type = ANY($2::text[]) AND e.aggregate_id = t.id)`, []any{uuids, r.aggTypes}
	}
	rows, err := r.cfg.Pool.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("reindex: look up events of tombstones: %w", err)
	}
	idx, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("reindex: look up events of tombstones: %w", err)
	}
	out := make([]string, len(idx))
	for k, i := range idx {
		out[k] = uuids[i-1]
	}
	return out, nil
}

// dropTombstones deletes from the target the seeded tombstones (soft
// deletes) of documents that no retained outbox event mentions any more:
// every event of such an aggregate was compacted, so no stale write of it
// can arrive and the tombstone has done its job. It needs document ids that
// are aggregate ids; otherwise tombstones are kept.
func (r *Reindexer) dropTombstones(ctx context.Context) error {
	def := r.cfg.Def
	if def.DeleteMode != mapping.DeleteSoft || !r.idIsAggregate {
		return nil
	}
	if err := r.cfg.Engine.Refresh(ctx, r.target); err != nil {
		return fmt.Errorf("reindex: refresh %s: %w", r.target, err)
	}
	query, _ := json.Marshal(map[string]any{"term": map[string]any{def.TombstoneField: true}})
	var dropped int64
	err := r.adm.Scroll(ctx, r.target, query, 5000, nil, func(_ int64, hits []indexer.ScrollHit) error {
		// A tombstone written live or by the replay has a retained event;
		// only seeded ones can lack one.
		ids := make([]string, 0, len(hits))
		vers := map[string]int64{}
		for _, h := range hits {
			ids = append(ids, h.ID)
			vers[h.ID] = h.Version
		}
		gone, err := r.withoutEvents(ctx, ids)
		if err != nil {
			return err
		}
		var ops []indexer.BulkOp
		for _, id := range gone {
			ops = append(ops, indexer.BulkOp{Type: indexer.OpDelete, Index: r.target, ID: id, Version: vers[id] + 1})
		}
		if len(ops) == 0 {
			return nil
		}
		dropped += int64(len(ops))
		return r.w.bulk(ctx, ops)
	})
	if err != nil {
		return fmt.Errorf("reindex: drop tombstones from %s: %w", r.target, err)
	}
	r.update(func(p *Progress) { p.TombstonesDropped += dropped; p.DropTombstones = false })
	r.log.Info("reindex: dropped tombstones whose events were all compacted", "count", dropped)
	return nil
}
