package reindex

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/projections"
)

// copiesBatch is how many documents of the target one round of the copies
// refresh reads and writes.
const copiesBatch = 500

// refreshCopies brings the copies of other entities' fields in the
// target's documents (relations' other_fields) to the other entities'
// current state, after the replay of an alias that relations reach. The
// replay re-applies the alias's own events and its relations', but a copy
// changes with the other entity's events, which only the live fan-out
// writes; and the seed may have copied a live document over a newer one
// that a dual write had brought to the target. Each copy is written guarded
// by the other entity's version, so a live fan-out meanwhile is never
// undone.
func (r *Reindexer) refreshCopies(ctx context.Context) error {
	// The target is not refreshed by itself while it is filled.
	if err := r.cfg.Engine.Refresh(ctx, r.target); err != nil {
		return fmt.Errorf("reindex: refresh %s: %w", r.target, err)
	}
	var ids []string
	err := r.adm.Scroll(ctx, r.target, nil, 5000, []string{projections.MetaKey + ".o"}, func(_ int64, hits []indexer.ScrollHit) error {
		for _, h := range hits {
			var m map[string]any
			if json.Unmarshal(h.Source, &m) == nil && len(projections.Copies(m)) > 0 {
				ids = append(ids, h.ID)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("reindex: read the copies of %s: %w", r.target, err)
	}
	n := 0
	for start := 0; start < len(ids); start += copiesBatch {
		part := ids[start:min(start+copiesBatch, len(ids))]
		steps, err := r.copySteps(ctx, part)
		if err != nil {
			return err
		}
		order := make([]string, 0, len(steps))
		for _, id := range part {
			if len(steps[id]) > 0 {
				order = append(order, id)
			}
		}
		if err := r.writeLinked(ctx, order, steps); err != nil {
			return err
		}
		n += len(order)
	}
	r.log.Info("reindex: copies of related entities' fields brought up to date", "documents_checked", n)
	return nil
}

// copySteps reads the documents ids of the target and the other entities
// whose fields they copy (from their aliases), and returns for each
// document the LinkOther steps that bring the current copies.
func (r *Reindexer) copySteps(ctx context.Context, ids []string) (map[string][]*projections.Result, error) {
	docs, err := r.cfg.Engine.MGet(ctx, r.target, ids)
	if err != nil {
		return nil, fmt.Errorf("reindex: read %s: %w", r.target, err)
	}
	type ref struct{ id, field, other string }
	var refs []ref
	byIndex := map[string][]string{}
	for _, id := range ids {
		d, ok := docs[id]
		if !ok {
			continue
		}
		m, err := projections.Decode(d.Source)
		if err != nil {
			continue
		}
		for field, others := range projections.Copies(m) {
			ix := r.cfg.Projections.OtherIndex(r.cfg.Def.Alias, field)
			if ix == "" {
				continue
			}
			for _, o := range others {
				refs = append(refs, ref{id, field, o})
				byIndex[ix] = append(byIndex[ix], o)
			}
		}
	}
	current := map[[2]string]indexer.Doc{}
	for ix, others := range byIndex {
		got, err := r.cfg.Engine.MGet(ctx, ix, others)
		if err != nil {
			return nil, fmt.Errorf("reindex: read %s: %w", ix, err)
		}
		for id, d := range got {
			current[[2]string{ix, id}] = d
		}
	}
	steps := map[string][]*projections.Result{}
	for _, rf := range refs {
		ix := r.cfg.Projections.OtherIndex(r.cfg.Def.Alias, rf.field)
		ep := r.cfg.Projections.Endpoint(r.cfg.Def.Alias, rf.field)
		var version int64
		var shown map[string]any
		if d, ok := current[[2]string{ix, rf.other}]; ok {
			m, err := projections.Decode(d.Source)
			if err != nil {
				continue
			}
			f, err := projections.NewLinkedFold(projections.Rules{}, r.cfg.Projections.RelationFields(ix), m, d.Version, nil)
			if err != nil {
				continue
			}
			_, version = f.EntityDoc()
			shown = f.Shown()
		}
		steps[rf.id] = append(steps[rf.id], &projections.Result{Op: projections.OpIndex, Index: r.cfg.Def.Alias, ID: rf.id, Version: version,
			Link: &projections.Link{Kind: projections.LinkOther, Field: rf.field, OtherID: rf.other, OtherVersion: version, Values: ep.OtherValues(shown)}})
	}
	return steps, nil
}
