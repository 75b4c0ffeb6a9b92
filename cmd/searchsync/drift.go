package main

import (
	"log/slog"
	"slices"

	"github.com/searchsync/searchsync/dashboard"
	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/config"
	"github.com/searchsync/searchsync/mapping"
	"github.com/searchsync/searchsync/projections"
)

// newDriftWatcher builds the console's drift watcher from the
// configuration: the aliases of the search consumers, the definitions
// (loadDefs) and the projections (loadProjections with the built-in
// examples), both read again at every check, an engine client of its own
// (returned, for the caller to close or share) and http.drift_interval.
// Both are nil when no search consumer is configured.
func newDriftWatcher(cfg *config.Config, logger *slog.Logger) (*dashboard.DriftWatcher, indexer.Engine, error) {
	var aliases []string
	for _, cc := range cfg.Consumers {
		if cc.Search == nil {
			continue
		}
		for _, a := range cc.Search.Indexes {
			if !slices.Contains(aliases, a) {
				aliases = append(aliases, a)
			}
		}
	}
	if len(aliases) == 0 {
		return nil, nil, nil
	}
	load := func() (mapping.Defs, error) { return loadDefs(cfg) }
	loadSet := func() (*projections.Set, error) { return loadProjections(cfg, builtinExamples) }
	eng, err := indexer.New(cfg.Engine, nil)
	if err != nil {
		return nil, nil, err
	}
	// NewDriftWatcher loads the definitions once: a bad one stops start-up.
	w, err := dashboard.NewDriftWatcher(dashboard.DriftConfig{Load: load, Projections: loadSet, Engine: eng, Aliases: aliases,
		Interval: cfg.HTTP.DriftInterval, Logger: logger})
	if err != nil {
		indexer.Close(eng)
		return nil, nil, err
	}
	return w, eng, nil
}
