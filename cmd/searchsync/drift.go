package main

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/config"
	"github.com/searchsync/searchsync/mapping"
	"github.com/searchsync/searchsync/sink/search"
)

// driftWatcher compares the live indexes of every search consumer with their
// definitions (mapping.Check, changing nothing) and keeps the "reindex
// required" messages for the dashboard and `searchsync status`.
type driftWatcher struct {
	eng    indexer.Engine
	defs   []*mapping.Def
	logger *slog.Logger

	mu       sync.Mutex
	messages []string
}

// newDriftWatcher returns nil when no search consumer is configured.
func newDriftWatcher(cfg *config.Config, logger *slog.Logger) (*driftWatcher, error) {
	var aliases []string
	for _, cc := range cfg.Consumers {
		if cc.Search != nil {
			aliases = append(aliases, cc.Search.Indexes...)
		}
	}
	if len(aliases) == 0 {
		return nil, nil
	}
	defs, err := search.LoadDefs(cfg)
	if err != nil {
		return nil, err
	}
	eng, err := indexer.New(cfg.Engine, nil)
	if err != nil {
		return nil, err
	}
	w := &driftWatcher{eng: eng, logger: logger}
	for _, a := range aliases {
		if d := defs[a]; d != nil && d.Tenancy.Mode != mapping.TenancyPerTenant {
			w.defs = append(w.defs, d)
		}
	}
	return w, nil
}

// check runs mapping.Check for every definition now.
func (w *driftWatcher) check(ctx context.Context) []string {
	var msgs []string
	for _, d := range w.defs {
		st, err := mapping.Check(ctx, w.eng, d)
		if err != nil {
			msgs = append(msgs, "cannot check index "+d.Alias+": "+err.Error())
			continue
		}
		if m := st.Message(); m != "" {
			msgs = append(msgs, m)
		}
	}
	w.mu.Lock()
	w.messages = msgs
	w.mu.Unlock()
	return msgs
}

// run re-checks every interval until ctx ends.
func (w *driftWatcher) run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		w.check(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// current returns the latest messages.
func (w *driftWatcher) current() []string {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.messages...)
}
