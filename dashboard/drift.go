package dashboard

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/background"
	"github.com/searchsync/searchsync/mapping"
	"github.com/searchsync/searchsync/projections"
	"github.com/searchsync/searchsync/sink/search"
)

// DriftWatcher compares the live index of every alias of the search
// consumers with its definition on disk (mapping.Check, changing nothing)
// and keeps, per alias, what it found: the "reindex required" messages of
// the dashboard's banner and `searchsync status`, and the drift column of
// the console's Reindex panel. The definitions are read again at every
// check, so that a definition changed on disk shows as drift, and the drift
// ends once a reindex with it has moved the alias. So are the projections
// (DriftConfig.Projections): an index built by other projections than those
// on disk (projections.Set.Fingerprint) is drift too.
type DriftWatcher struct {
	eng      indexer.Engine
	load     func() (mapping.Defs, error)
	loadSet  func() (*projections.Set, error)
	aliases  []string // of the search consumers, in configuration order
	interval time.Duration
	logger   *slog.Logger

	mu       sync.Mutex
	statuses []AliasDrift
	messages []string // the banner's: drift, and why an alias could not be checked
}

// DriftConfig is what a DriftWatcher checks and how often.
type DriftConfig struct {
	// Load reads the index definitions (again at every check).
	Load func() (mapping.Defs, error)
	// Projections reads the projections (again at every check), whose
	// fingerprint of each alias is compared with the live index's. nil:
	// the projections are not checked.
	Projections func() (*projections.Set, error)
	// Engine is the engine the live indexes are read from.
	Engine indexer.Engine
	// Aliases are the aliases of the search consumers, in configuration order.
	Aliases []string
	// Interval is the pause between checks (http.drift_interval).
	Interval time.Duration
	Logger   *slog.Logger
}

// NewDriftWatcher returns nil when there is no alias to check. The
// definitions must load now; a later check that cannot load them reports
// that for every alias.
func NewDriftWatcher(c DriftConfig) (*DriftWatcher, error) {
	if len(c.Aliases) == 0 {
		return nil, nil
	}
	if _, err := c.Load(); err != nil {
		return nil, err
	}
	if c.Projections != nil {
		if _, err := c.Projections(); err != nil {
			return nil, err
		}
	}
	w := &DriftWatcher{eng: c.Engine, load: c.Load, loadSet: c.Projections, aliases: c.Aliases, interval: c.Interval, logger: c.Logger}
	for _, a := range c.Aliases {
		s := AliasDrift{Alias: a, Drift: DriftUnknown, Message: "not checked yet"}
		s.Judge()
		w.statuses = append(w.statuses, s)
	}
	return w, nil
}

// Check compares every alias now and returns the drift messages.
func (w *DriftWatcher) Check(ctx context.Context) []string {
	now := time.Now()
	defs, loadErr := w.load()
	var set *projections.Set
	if loadErr == nil && w.loadSet != nil {
		if set, loadErr = w.loadSet(); loadErr != nil {
			loadErr = fmt.Errorf("projections: %w", loadErr)
		}
	}
	out := make([]AliasDrift, 0, len(w.aliases))
	var msgs []string
	for _, a := range w.aliases {
		s := AliasDrift{Alias: a, Drift: DriftUnknown, CheckedAt: now}
		d := defs[a]
		if d != nil && set != nil {
			cp := *d
			cp.Writers = set.Fingerprint(a)
			d = &cp
		}
		switch {
		case loadErr != nil:
			s.Message = "cannot load the index definitions: " + loadErr.Error()
		case d == nil:
			s.Message = "no definition of index " + a
		case d.Tenancy.Mode == mapping.TenancyPerTenant:
			// Not a warning: the reindex of each tenant's alias checks it.
			s.Hash, s.Message = d.Hash(), "per_tenant: one index per tenant, not checked here"
			s.Judge()
			out = append(out, s)
			continue
		default:
			st, err := mapping.Check(ctx, w.eng, d)
			if err != nil {
				s.Hash, s.Message = d.Hash(), "cannot check index "+a+": "+err.Error()
				w.stats(ctx, &s) // what the engine user may still read of it
				break
			}
			s.Index, s.Hash, s.LiveHash = st.Index, st.Hash, st.LiveHash
			s.ProjectionsHash, s.LiveProjectionsHash, s.ProjectionChanges = st.ProjectionsHash, st.LiveProjectionsHash, st.ProjectionChanges
			s.Drift, s.Message = DriftNone, st.Message()
			if st.Drift {
				s.Drift = DriftDiffers
			}
			if st.Index != "" {
				w.stats(ctx, &s)
			}
		}
		s.Judge()
		if s.Message != "" {
			msgs = append(msgs, s.Message)
		}
		out = append(out, s)
	}
	if ctx.Err() != nil {
		return nil // stopping: keep what the last full check found
	}
	w.mu.Lock()
	w.statuses, w.messages = out, msgs
	w.mu.Unlock()
	return msgs
}

// stats reads the alias's document count and the engine's health of it
// (green, yellow, red); what the engine refuses is said in s.StatsError.
func (w *DriftWatcher) stats(ctx context.Context, s *AliasDrift) {
	var errs []string
	if n, err := w.eng.Count(ctx, s.Alias, nil); err != nil {
		errs = append(errs, "document count: "+err.Error())
	} else {
		s.Docs = &n
	}
	if adm, ok := w.eng.(indexer.Admin); !ok {
		errs = append(errs, "health: the engine client cannot read it")
	} else {
		if h, _, err := adm.Health(ctx, s.Alias, "", 0); err != nil {
			errs = append(errs, "health: "+err.Error())
		} else {
			s.EngineHealth = h
		}
		if _, err := adm.Refreshes(ctx, s.Alias); search.StatsRefused(err) {
			s.SearchableOff = search.SearchableOffNote(s.Alias, err)
		}
	}
	s.StatsError = strings.Join(errs, "; ")
}

// Name is the watcher's name among the background services.
func (w *DriftWatcher) Name() string { return "drift watcher" }

// Run checks at once and then every interval until ctx ends; it
// returns nil then.
func (w *DriftWatcher) Run(ctx context.Context) error {
	background.Loop{
		Interval:  w.interval,
		Immediate: true,
		Turn:      func(ctx context.Context) error { w.Check(ctx); return nil },
	}.Run(ctx)
	return nil
}

// Current returns the latest messages.
func (w *DriftWatcher) Current() []string {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.messages)
}

// AliasStates returns what the latest check found per alias.
func (w *DriftWatcher) AliasStates() []AliasDrift {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.statuses)
}
