package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/config"
	"github.com/searchsync/searchsync/mapping"
	"github.com/searchsync/searchsync/projections"
	"github.com/searchsync/searchsync/sink/search"
)

// loadDefs loads the index definitions of a configuration: the embedded
// defaults overridden by indexes.definitions.
func loadDefs(cfg *config.Config) (mapping.Defs, error) {
	return mapping.Load(cfg.Path(cfg.Indexes.Definitions))
}

// exampleSet maps the names indexes.examples may use to the function that
// registers that example's projections and upcasters (builtinExamples).
type exampleSet map[string]func(*projections.Set) error

// loadProjections loads the projections of a configuration: the examples
// named by indexes.examples (looked up in examples), then the files of
// indexes.projections. Go projection functions and upcasters of your own are
// registered on the returned set before search.New.
func loadProjections(cfg *config.Config, examples exampleSet) (*projections.Set, error) {
	set := projections.NewSet()
	for i, ex := range cfg.Indexes.Examples {
		register, ok := examples[ex]
		if !ok {
			return nil, fmt.Errorf("indexes.examples[%d]: %q is not a built-in example", i, ex)
		}
		if err := register(set); err != nil {
			return nil, fmt.Errorf("indexes.examples[%d] (%s): %w", i, ex, err)
		}
	}
	for _, p := range cfg.Indexes.Projections {
		if err := set.LoadFiles(cfg.Path(p)); err != nil {
			return nil, err
		}
	}
	return set, nil
}

// searchOptions are what searchFromConfig needs besides the configuration.
type searchOptions struct {
	// Engine, when nil, is built from cfg.Engine.
	Engine indexer.Engine
	// Projections, when nil, is loadProjections(cfg, Examples).
	Projections *projections.Set
	// Examples are the examples indexes.examples may name (see
	// loadProjections): the built-in ones.
	Examples exampleSet
	// DualWrites: pass reindex.NewTargets(pool) so that live writes reach a
	// running reindex's target too.
	DualWrites search.DualWrites
	// Writer tunes the bulk writer (Logger is filled in).
	Writer indexer.WriterConfig
	// Searchable, when set, measures commit → searchable of the writes.
	Searchable *search.Searchable
	Logger     *slog.Logger
}

// searchFromConfig builds the search consumer cc of cfg, creates its missing
// indexes and aliases, checks that the credentials may write and read them
// (search.Consumer.CheckAccess), and reports drift: logged as "reindex required" with
// indexes.on_drift warn (the default), an error with fail.
func searchFromConfig(ctx context.Context, cfg *config.Config, cc config.Consumer, o searchOptions) (*search.Consumer, error) {
	if cc.Search == nil {
		return nil, fmt.Errorf("search consumer %s: no search section", cc.Name)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	logger := o.Logger.With("consumer", cc.Name)
	if o.Engine == nil {
		eng, err := indexer.New(cfg.Engine, nil)
		if err != nil {
			return nil, err
		}
		o.Engine = eng
	}
	defs, err := loadDefs(cfg)
	if err != nil {
		return nil, err
	}
	set := o.Projections
	if set == nil {
		if set, err = loadProjections(cfg, o.Examples); err != nil {
			return nil, err
		}
	}
	for _, ix := range cc.Search.Indexes {
		found := false
		for _, p := range set.Projections() {
			found = found || p.Index == ix
		}
		if !found {
			return nil, fmt.Errorf("search consumer %s: no projection writes index %q (configure indexes.projections or indexes.examples)", cc.Name, ix)
		}
	}
	o.Writer.Logger = logger
	c, err := search.New(search.Config{Name: cc.Name, Engine: o.Engine, Writer: indexer.NewWriter(o.Engine, o.Writer),
		Projections: set, Defs: defs, Indexes: cc.Search.Indexes, StateCache: cc.Search.StateCache, MaxFanOut: cc.Search.MaxFanOut,
		DualWrites: o.DualWrites, Searchable: o.Searchable, Logger: logger})
	if err != nil {
		return nil, err
	}
	sts, err := c.EnsureIndexes(ctx)
	if err != nil {
		return nil, fmt.Errorf("search consumer %s: %w", cc.Name, err)
	}
	if err := c.CheckAccess(ctx); err != nil {
		return nil, err
	}
	if cfg.Indexes.OnDrift == "fail" {
		for _, st := range sts {
			if st.Drift {
				return nil, fmt.Errorf("search consumer %s: %s (indexes.on_drift is fail)", cc.Name, st.Message())
			}
		}
	}
	return c, nil
}
