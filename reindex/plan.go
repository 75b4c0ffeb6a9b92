package reindex

import (
	"context"
	"errors"
	"fmt"

	"github.com/searchsync/searchsync/mapping"
)

// Plan is what a reindex would do (--dry-run).
type Plan struct {
	Alias          string   `json:"alias"`
	Source         string   `json:"source"`
	SourceHash     string   `json:"source_hash"`
	Target         string   `json:"target"`
	Hash           string   `json:"hash"`
	UpToDate       bool     `json:"up_to_date"` // the live index already matches the definition and the projections
	MappingChanges []string `json:"mapping_changes"`
	SettingChanges []string `json:"setting_changes"`
	// ProjectionsHash is the fingerprint of the projections that write the
	// alias, SourceProjectionsHash the one in the live index's _meta ("" when
	// it has none); ProjectionChanges describe the difference.
	ProjectionsHash       string   `json:"projections_hash"`
	SourceProjectionsHash string   `json:"source_projections_hash"`
	ProjectionChanges     []string `json:"projection_changes"`
	// Seed is where the seed reads: "index" (the live index) or
	// "source:<name>"; DocsToSeed is then the live index's documents
	// (tombstones included) or the rows the source's query yields now.
	Seed           string `json:"seed"`
	DocsToSeed     int64  `json:"docs_to_seed"`
	EventsToReplay int64  `json:"events_to_replay"`
	FirstEventID   int64  `json:"first_event_id"`
	LastEventID    int64  `json:"last_event_id"`
	Running        *Job   `json:"running,omitempty"` // a reindex already running (or to resume)
}

// DryRun says what Run would do, changing nothing.
func (r *Reindexer) DryRun(ctx context.Context) (*Plan, error) {
	p := &Plan{Alias: r.alias, Hash: r.cfg.Def.Hash()}
	if j, _, err := Running(ctx, r.cfg.Pool, r.alias); err == nil {
		p.Running = j
	} else if !errors.Is(err, ErrNoJob) {
		return nil, err
	}
	src, info, err := r.live(ctx)
	if err != nil {
		return nil, err
	}
	p.Source, p.SourceHash = src, mapping.LiveHash(info.Mappings)
	p.ProjectionsHash = r.writers.Hash
	if lp := mapping.LiveProjections(info.Mappings); lp != nil {
		p.SourceProjectionsHash = lp.Hash
	}
	p.ProjectionChanges = r.projectionChanges(info.Mappings)
	p.UpToDate = p.SourceHash == p.Hash && len(p.ProjectionChanges) == 0
	p.MappingChanges = mappingChanges(info.Mappings, r.cfg.Def)
	p.SettingChanges = settingChanges(info.Settings, r.cfg.Def)
	if p.Running != nil && p.Running.Params.Target != "" {
		p.Target = p.Running.Params.Target
	} else if p.Target, err = mapping.NextFree(ctx, r.cfg.Engine, r.alias); err != nil {
		return nil, err
	}
	p.Seed = seedFlag(r.cfg.seedSpec())
	if r.cfg.SeedSource != nil {
		rd, err := r.openSource(ctx)
		if err != nil {
			return nil, err
		}
		if p.DocsToSeed, err = rd.Count(ctx, r.cfg.Pool); err != nil {
			return nil, fmt.Errorf("reindex: %w", err)
		}
	} else if _, p.DocsToSeed, err = r.adm.GroupCounts(ctx, src, nil, nil); err != nil {
		return nil, err
	}
	rows, err := r.cfg.Pool.Query(ctx, countEventsSQL, int64(0))
	if err != nil {
		return nil, fmt.Errorf("reindex: count outbox events: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var et, at string
		var n, lo, hi int64
		if err := rows.Scan(&et, &at, &n, &lo, &hi); err != nil {
			return nil, fmt.Errorf("reindex: count outbox events: %w", err)
		}
		if r.cfg.Wants != nil && !r.cfg.Wants(et, at) {
			continue
		}
		if pr := r.cfg.Projections.Find(et, at, []string{r.cfg.Def.Alias}); pr == nil {
			continue
		}
		p.EventsToReplay += n
		if p.FirstEventID == 0 || lo < p.FirstEventID {
			p.FirstEventID = lo
		}
		p.LastEventID = max(p.LastEventID, hi)
	}
	return p, rows.Err()
}
