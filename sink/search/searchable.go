package search

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/background"
)

// SearchableConfig configures a Searchable.
type SearchableConfig struct {
	// Engine is the search engine; it must implement indexer.Admin.
	// Required.
	Engine indexer.Engine
	// Interval is how often the refresh counts of an index with writes
	// waiting are read. Default 250ms.
	Interval time.Duration
	// Observe receives, per event made searchable, its index (alias) and
	// the seconds from its commit (created_at) to the poll that saw it
	// searchable. Required.
	Observe func(index string, seconds float64)
	// MaxWaiting bounds the events held per index until a refresh (the
	// oldest are dropped beyond it, unmeasured). Default 100000.
	MaxWaiting int
	// Logger. Default: discard.
	Logger *slog.Logger
}

// Searchable measures commit → searchable per index. The search consumer
// tells it the commit times of the events each completed _bulk wrote
// (Config.Searchable); Run reads the refresh count of every shard copy of
// each index with writes waiting (indexer.Admin.Refreshes) every Interval.
// A copy whose count grew between two polls refreshed after the first of
// them; once every copy has refreshed after a write's bulk completed, the
// write is searchable, and the time from its commit to that poll's answer is
// observed. The figure is an upper bound: late by at most one Interval and
// a stats request.
type Searchable struct {
	cfg SearchableConfig
	adm indexer.Admin

	mu      sync.Mutex
	indexes map[string]*refreshWatch
	// disabled is why the measurement stopped (the engine refused the
	// refresh stats: a missing monitor privilege); "" while it runs.
	disabled string
}

// refreshWatch is what Searchable knows of one index.
type refreshWatch struct {
	writes  []bulkWrite // waiting for a refresh, oldest first
	waiting int         // commit times in writes

	counts    map[string]int64     // per shard copy at the previous poll
	polled    time.Time            // when the previous poll was sent
	refreshed map[string]time.Time // per copy: it refreshed after this time
}

// bulkWrite is one completed _bulk's writes to an index.
type bulkWrite struct {
	done      time.Time
	committed []time.Time
}

// NewSearchable checks cfg and returns a Searchable; call Run.
func NewSearchable(cfg SearchableConfig) (*Searchable, error) {
	adm, ok := cfg.Engine.(indexer.Admin)
	if !ok || cfg.Observe == nil {
		return nil, errors.New("search: SearchableConfig needs an Engine with indexer.Admin and Observe")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 250 * time.Millisecond
	}
	if cfg.MaxWaiting <= 0 {
		cfg.MaxWaiting = 100_000
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Searchable{cfg: cfg, adm: adm, indexes: map[string]*refreshWatch{}}, nil
}

// Written records that the events committed at the given times were
// written to index by a _bulk that has completed (now).
func (s *Searchable) Written(index string, committed []time.Time) {
	if len(committed) == 0 {
		return
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.disabled != "" {
		return
	}
	w := s.indexes[index]
	if w == nil {
		w = &refreshWatch{refreshed: map[string]time.Time{}}
		s.indexes[index] = w
	}
	w.writes = append(w.writes, bulkWrite{done: now, committed: committed})
	w.waiting += len(committed)
	for w.waiting > s.cfg.MaxWaiting && len(w.writes) > 1 {
		w.waiting -= len(w.writes[0].committed)
		w.writes = w.writes[1:]
	}
}

// Name is the watcher's name among the background services.
func (s *Searchable) Name() string { return "searchable watcher" }

// Run polls every Interval until ctx ends, then returns nil.
func (s *Searchable) Run(ctx context.Context) error {
	background.Loop{
		Interval: s.cfg.Interval,
		Turn:     func(ctx context.Context) error { s.Poll(ctx); return nil },
	}.Run(ctx)
	return nil
}

// Poll reads the refresh counts of every index with writes waiting and
// observes the writes they show searchable.
func (s *Searchable) Poll(ctx context.Context) {
	s.mu.Lock()
	var names []string
	for name, w := range s.indexes {
		if len(w.writes) > 0 {
			names = append(names, name)
		}
	}
	s.mu.Unlock()
	for _, name := range names {
		sent := time.Now()
		counts, err := s.adm.Refreshes(ctx, name)
		if refused(err) {
			// Refused, not failed: asking again four times a second
			// changes nothing. The measurement stops, once, loudly.
			s.disable(name, err)
			return
		}
		if err != nil {
			if ctx.Err() == nil {
				s.cfg.Logger.Debug("search: refresh stats", "index", name, "err", err)
			}
			continue
		}
		s.polled(name, counts, sent, time.Now())
	}
}

// CheckStats asks once for the refresh stats of index, at start-up: a
// refusal (the engine user may not read index stats, or the engine does not
// serve them, as OpenSearch Serverless) stops the measurement there with its
// WARN instead of at the first poll. Other failures are left to the polls.
func (s *Searchable) CheckStats(ctx context.Context, index string) {
	if _, err := s.adm.Refreshes(ctx, index); refused(err) {
		s.disable(index, err)
	}
}

// StatsRefused reports whether the engine refuses the refresh stats the
// commit → searchable measurement reads for good: 401/403, or an engine
// that does not serve them (not asked again).
func StatsRefused(err error) bool { return refused(err) }

// SearchableOffNote is what `status` and the console say when the engine
// refuses the refresh stats of index with err.
func SearchableOffNote(index string, err error) string {
	if indexer.IsUnsupported(err) {
		return "commit → searchable latency is not measured: OpenSearch Serverless serves no index stats"
	}
	return "commit → searchable latency is not measured: the engine user may not read the stats of " + index +
		" (grant indices:monitor/stats; docs/engine-connection.md)"
}

// refused reports whether the engine refuses the refresh stats for good:
// 401/403, or an engine that does not serve them (not asked again).
func refused(err error) bool {
	return indexer.IsForbidden(err) || indexer.IsUnsupported(err)
}

// disable stops the measurement after the engine refused the refresh
// stats of index, with one WARN that names the privilege to grant (or says
// that the engine does not serve them).
func (s *Searchable) disable(index string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.disabled != "" {
		return
	}
	s.disabled = "the engine refused the refresh stats of " + index + ": " + err.Error()
	clear(s.indexes)
	if indexer.IsUnsupported(err) {
		s.cfg.Logger.Warn("search: commit → searchable latency is not measured (searchsync_searchable_latency_seconds stays empty): "+
			"OpenSearch Serverless serves no index stats to read the refreshes from; the writes are delivered all the same "+
			"(docs/engine-connection.md)", "index", index, "error", err)
		return
	}
	s.cfg.Logger.Warn("search: commit → searchable latency is not measured (searchsync_searchable_latency_seconds stays empty): "+
		"the engine user may not read index stats; grant indices:monitor/stats (OpenSearch: the action group indices_monitor; "+
		"Elasticsearch: the index privilege monitor) on the indexes to measure it (docs/engine-connection.md)",
		"index", index, "error", err)
}

// Disabled is why the measurement stopped ("" while it runs).
func (s *Searchable) Disabled() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.disabled
}

// polled takes the counts of one poll of index, sent at sent and answered
// at answered.
func (s *Searchable) polled(index string, counts map[string]int64, sent, answered time.Time) {
	s.mu.Lock()
	w := s.indexes[index]
	if w == nil {
		s.mu.Unlock()
		return
	}
	for k, n := range counts {
		if prev, ok := w.counts[k]; ok && n > prev {
			w.refreshed[k] = w.polled
		}
	}
	for k := range w.refreshed {
		if _, ok := counts[k]; !ok {
			delete(w.refreshed, k) // the copy is gone (relocated, the alias moved)
		}
	}
	w.counts, w.polled = counts, sent
	// Every copy must have refreshed after a write's bulk completed.
	var bound time.Time
	for k := range counts {
		at, ok := w.refreshed[k]
		if !ok {
			bound = time.Time{}
			break
		}
		if bound.IsZero() || at.Before(bound) {
			bound = at
		}
	}
	var ready []bulkWrite
	for len(w.writes) > 0 && !bound.IsZero() && w.writes[0].done.Before(bound) {
		ready = append(ready, w.writes[0])
		w.waiting -= len(w.writes[0].committed)
		w.writes = w.writes[1:]
	}
	s.mu.Unlock()
	for _, b := range ready {
		for _, c := range b.committed {
			s.cfg.Observe(index, max(0, answered.Sub(c).Seconds()))
		}
	}
}

// Waiting returns how many events of index wait for a refresh (for tests
// and diagnostics).
func (s *Searchable) Waiting(index string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.indexes[index]; w != nil {
		return w.waiting
	}
	return 0
}
