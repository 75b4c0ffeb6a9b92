package reindex

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/config"
	"github.com/searchsync/searchsync/mapping"
	"github.com/searchsync/searchsync/projections"
)

// Config configures one reindex of one alias.
type Config struct {
	// Pool reaches the outbox (search_path set to its schema). Required.
	Pool *pgxpool.Pool
	// Engine is the search engine. Required.
	Engine indexer.Engine
	// EngineConfig addresses the engine for the calls the Engine seam does
	// not offer (scroll, aggregations, settings). Default: the local node.
	EngineConfig config.Engine
	// HTTPClient carries those calls. Default: a fresh transport.
	HTTPClient *http.Client
	// Def is the current definition of the alias. Required.
	Def *mapping.Def
	// Tenant selects the tenant's alias <alias>_<tenant> in per_tenant mode.
	Tenant string
	// Projections turn events into documents. Required.
	Projections *projections.Set
	// Wants reports whether the search consumer of the alias receives events
	// of this type (its routes); events it does not want are not replayed.
	// Default: every event a projection of the alias matches.
	Wants func(eventType, aggregateType string) bool
	// Owner names this process in aa_job.owner. Default NewOwner().
	Owner string
	// KeepOld is how long the old index is kept after the swap. Default 24h;
	// negative deletes it right after the swap.
	KeepOld time.Duration
	// StaleAfter is the heartbeat age after which a running job counts as
	// abandoned and is resumed. Default 15s.
	StaleAfter time.Duration
	// Heartbeat is how often progress is recorded. Default 2s.
	Heartbeat time.Duration
	// ChunkSize is the most events read (and coalesced) at once. Default 5000.
	ChunkSize int
	// BulkSize is the most ops per bulk request. Default 1000.
	BulkSize int
	// Concurrency is the most bulk requests in flight. Default 2.
	Concurrency int
	// SampleSize is the number of documents whose sources the check
	// compares. Default 500.
	SampleSize int
	// GroupBy are the fields the check counts per value (entity type,
	// tenant). Default: entity_type when the definition maps it, and the
	// tenant field in shared mode.
	GroupBy []string
	// IgnoreFields are document fields whose values may differ in the
	// sample comparison, besides those whose mapping changed.
	IgnoreFields []string
	// Reproject rewrites a document seeded from the live index when the
	// projection changed in a way that changes stored documents. Default:
	// documents are copied as they are (the engine applies the new mapping).
	Reproject func(doc map[string]any) (map[string]any, error)
	// ClientSeed copies the live documents through searchsync (scroll and
	// bulk) instead of the engine's _reindex API. Default false; implied by
	// Reproject.
	ClientSeed bool
	// Force rebuilds even when the live index already matches the definition
	// (after a projection change, which the definition hash does not cover).
	Force bool
	// Logger receives progress and warnings. Default slog.Default().
	Logger *slog.Logger
	// OnProgress is called with every heartbeat (for the terminal).
	OnProgress func(Progress)

	// beforeVerify, in tests, runs right before the completeness check.
	beforeVerify func(target string)
}

func (c *Config) setDefaults() {
	c.Owner = cmp.Or(c.Owner, NewOwner())
	c.KeepOld = cmp.Or(c.KeepOld, 24*time.Hour)
	c.StaleAfter = cmp.Or(c.StaleAfter, 15*time.Second)
	c.Heartbeat = cmp.Or(c.Heartbeat, 2*time.Second)
	c.ChunkSize = cmp.Or(c.ChunkSize, 5000)
	c.BulkSize = cmp.Or(c.BulkSize, 1000)
	c.Concurrency = cmp.Or(c.Concurrency, 2)
	c.SampleSize = cmp.Or(c.SampleSize, 500)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.GroupBy == nil && c.Def != nil {
		if props, _ := c.Def.Mappings["properties"].(map[string]any); props != nil {
			if _, ok := props["entity_type"]; ok {
				c.GroupBy = append(c.GroupBy, "entity_type")
			}
		}
		if c.Def.Tenancy.Mode == mapping.TenancyShared {
			c.GroupBy = append(c.GroupBy, c.Def.Tenancy.Field)
		}
	}
}

func (c *Config) validate() error {
	switch {
	case c.Pool == nil:
		return errors.New("reindex: Config.Pool is required")
	case c.Engine == nil:
		return errors.New("reindex: Config.Engine is required")
	case c.Def == nil:
		return errors.New("reindex: Config.Def is required")
	case c.Projections == nil:
		return errors.New("reindex: Config.Projections is required")
	case c.ChunkSize < 1 || c.BulkSize < 1 || c.Concurrency < 1:
		return errors.New("reindex: ChunkSize, BulkSize and Concurrency must be positive")
	case c.Def.Tenancy.Mode == mapping.TenancyPerTenant && c.Tenant == "":
		return fmt.Errorf("reindex: %s is per_tenant: name the tenant (searchsync reindex %s_<tenant>)", c.Def.Alias, c.Def.Alias)
	}
	return nil
}

// Reindexer rebuilds one alias. Use it once.
type Reindexer struct {
	cfg      Config
	alias    string // the alias applications read (per tenant in per_tenant mode)
	raw      *raw
	log      *slog.Logger
	aggTypes []string // aggregate types of the alias's projections (nil: patterns)

	job    *Job
	target string
	w      *writer
	poison atomic.Int64

	saveMu   sync.Mutex // serializes writes of job.Progress and the job row
	mu       sync.Mutex // guards job.Progress
	progress Progress
	timings  Timings

	// seeded holds the versions this run seeded: a replayed document whose
	// final version is not newer is not written at all (it would be a 409).
	// A resumed run that did not seed has none and relies on the 409s.
	seededMu sync.Mutex
	seeded   map[string]int64
	prefetch *prefetch
	skipped  atomic.Int64

	// versionPathSQL is the version path of every projection of the alias
	// (nil when they differ or use Go code); idIsAggregate says that every
	// one uses the aggregate id as document id. Both allow skipping events
	// older than the seed before projecting them.
	versionPathSQL []string
	idIsAggregate  bool
	skippedEvents  atomic.Int64
	finished       atomic.Bool   // the job row was ended by this run
	seedDone       chan struct{} // closed when the seed of this run finished (nil: no seed runs)

	slow   time.Duration // tests: a pause per replayed chunk
	source string        // the live index (tombstones are read from it) // replayed documents not written because the seed was newer
}

// New checks cfg and returns a Reindexer.
func New(cfg Config) (*Reindexer, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	alias := cfg.Def.Alias
	if cfg.Def.Tenancy.Mode == mapping.TenancyPerTenant {
		a, err := cfg.Def.TenantAlias(cfg.Tenant)
		if err != nil {
			return nil, fmt.Errorf("reindex: %w", err)
		}
		alias = a
	}
	r := &Reindexer{cfg: cfg, alias: alias, raw: newRaw(cfg.EngineConfig, cfg.HTTPClient), w: &writer{eng: cfg.Engine}, seeded: map[string]int64{}}
	r.log = cfg.Logger.With("alias", alias)
	r.aggTypes = aggregateTypes(cfg.Projections, cfg.Def.Alias)
	r.versionPathSQL, r.idIsAggregate = prefilter(cfg.Projections, cfg.Def)
	return r, nil
}

// prefilter returns the common version path (as a Postgres text[] path)
// and whether every projection of the alias uses the aggregate id as
// document id without Go code.
func prefilter(set *projections.Set, def *mapping.Def) ([]string, bool) {
	var path string
	ok := true
	for _, p := range set.Projections() {
		if p.Index != def.Alias {
			continue
		}
		vp := cmp.Or(p.Version, def.VersionPath, "version")
		if path != "" && vp != path || strings.HasPrefix(vp, "@") || p.Go != "" {
			return nil, false
		}
		path = vp
		ok = ok && p.ID == "@aggregate_id"
	}
	if path == "" || !ok {
		return nil, false
	}
	return strings.Split(path, "."), true
}

// aggregateTypes returns the literal aggregate types of the projections of
// index, or nil when one of them takes any type or uses a pattern.
func aggregateTypes(set *projections.Set, index string) []string {
	var out []string
	for _, p := range set.Projections() {
		if p.Index != index {
			continue
		}
		if len(p.AggregateTypes) == 0 {
			return nil
		}
		for _, a := range p.AggregateTypes {
			if strings.ContainsAny(a, `*?[\`) {
				return nil
			}
			if !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
	}
	if out == nil {
		return []string{} // no projection writes the alias: nothing to replay
	}
	return out
}

// Alias is the alias being rebuilt.
func (r *Reindexer) Alias() string { return r.alias }

// Plan is what a reindex would do (--dry-run).
type Plan struct {
	Alias          string   `json:"alias"`
	Source         string   `json:"source"`
	SourceHash     string   `json:"source_hash"`
	Target         string   `json:"target"`
	Hash           string   `json:"hash"`
	UpToDate       bool     `json:"up_to_date"` // the live index already matches the definition
	MappingChanges []string `json:"mapping_changes"`
	SettingChanges []string `json:"setting_changes"`
	DocsToSeed     int64    `json:"docs_to_seed"`
	EventsToReplay int64    `json:"events_to_replay"`
	FirstEventID   int64    `json:"first_event_id"`
	LastEventID    int64    `json:"last_event_id"`
	Running        *Job     `json:"running,omitempty"` // a reindex already running (or to resume)
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
	p.UpToDate = p.SourceHash == p.Hash
	p.MappingChanges = mappingChanges(info.Mappings, r.cfg.Def)
	p.SettingChanges = settingChanges(info.Settings, r.cfg.Def)
	if p.Running != nil && p.Running.Params.Target != "" {
		p.Target = p.Running.Params.Target
	} else if p.Target, err = mapping.NextFree(ctx, r.cfg.Engine, r.alias); err != nil {
		return nil, err
	}
	if _, p.DocsToSeed, err = r.raw.groupCounts(ctx, src, nil, nil); err != nil {
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

// live returns the physical index behind the alias and its definition.
func (r *Reindexer) live(ctx context.Context) (string, *indexer.IndexInfo, error) {
	targets, err := r.cfg.Engine.AliasTargets(ctx, r.alias)
	if err != nil {
		return "", nil, fmt.Errorf("reindex: alias %s: %w", r.alias, err)
	}
	if len(targets) != 1 {
		return "", nil, fmt.Errorf("reindex: alias %s points to %d indexes (%v); it must point to exactly one (start searchsync run once to create it)", r.alias, len(targets), targets)
	}
	info, err := r.cfg.Engine.GetIndex(ctx, targets[0])
	if err != nil || info == nil {
		return "", nil, fmt.Errorf("reindex: index %s behind %s: %w", targets[0], r.alias, cmp.Or(err, errors.New("does not exist")))
	}
	return targets[0], info, nil
}

// ErrUpToDate means the live index already matches the definition (use
// Force to rebuild anyway).
var ErrUpToDate = errors.New("reindex: the live index already matches the definition; nothing to do (use --force to rebuild anyway, e.g. after a projection change)")

// Run performs (or resumes) the reindex: create the target, seed it from the
// live index, replay the outbox up to the live watermark while live writes go
// to both indexes, check completeness, swap the alias atomically and record
// the old index for deletion after KeepOld. A failed check leaves the alias
// untouched, deletes the target and ends the job failed with the report.
func (r *Reindexer) Run(ctx context.Context) (res *Result, err error) {
	start := time.Now()
	src, info, err := r.live(ctx)
	if err != nil {
		return nil, err
	}
	hash := r.cfg.Def.Hash()
	params := Params{Alias: r.alias, Source: src, SourceHash: mapping.LiveHash(info.Mappings), Hash: hash, KeepOld: r.cfg.KeepOld.String()}
	if running, _, err := Running(ctx, r.cfg.Pool, r.alias); errors.Is(err, ErrNoJob) && params.SourceHash == hash && !r.cfg.Force {
		return nil, ErrUpToDate
	} else if err != nil && !errors.Is(err, ErrNoJob) {
		return nil, err
	} else if running != nil && running.Params.Source != "" && running.Params.Source != src && running.Params.Target != src {
		return nil, fmt.Errorf("reindex: the running job %d was rebuilding %s from %s, but the alias now points to %s; abort it first", running.ID, r.alias, running.Params.Source, src)
	}
	job, err := Acquire(ctx, r.cfg.Pool, r.alias, r.cfg.Owner, params, r.cfg.StaleAfter)
	if err != nil {
		return nil, err
	}
	r.job = job
	if job.Resumed {
		if job.Params.Hash != hash {
			return nil, fmt.Errorf("reindex: job %d was started for definition hash %s, the definition now has %s; run `searchsync reindex abort %s` first", job.ID, short(job.Params.Hash), short(hash), r.alias)
		}
		r.log.Info("reindex: resuming an interrupted job", "job_id", job.ID, "phase", job.Progress.Phase, "last_id", job.Progress.LastID, "target", job.Params.Target)
	}
	r.progress = job.Progress

	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	hbDone := make(chan struct{})
	go r.heartbeats(runCtx, cancel, hbDone)
	defer func() {
		cancel(nil)
		<-hbDone
		if err == nil {
			return
		}
		if errors.Is(err, ErrLost) || errors.Is(context.Cause(runCtx), ErrLost) {
			err = ErrLost
			return
		}
		if ctx.Err() != nil {
			// Interrupted (SIGINT/SIGTERM): leave the job running so that the
			// next `searchsync reindex` resumes it once the heartbeat is stale.
			r.saveProgress(context.WithoutCancel(ctx))
			return
		}
		r.fail(context.WithoutCancel(ctx), err, nil)
	}()

	res, err = r.run(runCtx, start)
	if err != nil && errors.Is(context.Cause(runCtx), ErrLost) {
		err = ErrLost
	}
	return res, err
}

func (r *Reindexer) run(ctx context.Context, start time.Time) (*Result, error) {
	job := r.job
	// 1. The target index.
	if job.Params.Target == "" {
		name, err := mapping.NextFree(ctx, r.cfg.Engine, r.alias)
		if err != nil {
			return nil, err
		}
		job.Params.Target = name
		if err := job.saveParams(ctx, r.cfg.Pool); err != nil {
			return nil, err
		}
	}
	r.target, r.source = job.Params.Target, job.Params.Source
	info, err := r.cfg.Engine.GetIndex(ctx, r.target)
	if err != nil {
		return nil, fmt.Errorf("reindex: look up %s: %w", r.target, err)
	}
	if info == nil {
		def := *r.cfg.Def
		def.Alias = r.alias
		if err := mapping.CreatePhysical(ctx, r.cfg.Engine, &def, r.target, false); err != nil {
			return nil, err
		}
		r.log.Info("reindex: created the new index", "index", r.target, "hash", short(job.Params.Hash))
	} else if h := mapping.LiveHash(info.Mappings); h != job.Params.Hash {
		return nil, fmt.Errorf("reindex: %s exists with hash %s, the job expects %s", r.target, short(h), short(job.Params.Hash))
	}
	// A crash between the swap and the end of the job: the alias already
	// points to the target.
	if targets, err := r.cfg.Engine.AliasTargets(ctx, r.alias); err == nil && len(targets) == 1 && targets[0] == r.target {
		return r.finish(ctx, start, nil)
	}

	// Nobody searches the target before the swap: no periodic refresh and
	// no replicas while it fills (the reads of the replay are real-time
	// gets; replicas are built once from the finished index). The
	// definition's values come back right after the replay.
	fill := map[string]any{"refresh_interval": "-1"}
	if ownsReplicas(r.cfg.Def) {
		fill["number_of_replicas"] = 0
	}
	if err := r.raw.putSettings(ctx, r.target, fill); err != nil {
		return nil, err
	}

	// 2. Dual writes on, then wait until every search consumer has seen it:
	// from then on every live op reaches the target, and everything
	// delivered before is committed and visible to the replay.
	tw := time.Now()
	if !job.Params.DualWrite {
		job.Params.DualWrite = true
		if err := job.saveParams(ctx, r.cfg.Pool); err != nil {
			return nil, err
		}
		if err := sleep(ctx, 2*TargetsTTL+200*time.Millisecond); err != nil {
			return nil, err
		}
	}

	// 3. Seed from the live index (history compaction removed). A refresh
	// first, so that the copy sees every write made before dual writes began.
	t0 := time.Now()
	if err := r.cfg.Engine.Refresh(ctx, job.Params.Source); err != nil {
		return nil, fmt.Errorf("reindex: refresh %s: %w", job.Params.Source, err)
	}
	seeding := !r.snapshot().SeedDone
	if seeding {
		r.seedDone = make(chan struct{})
		if job.Resumed {
			// An interrupted copy may have copied any tombstone.
			r.update(func(p *Progress) { p.DropTombstones = true })
		}
	}
	if !seeding {
		r.startPrefetch(ctx)
	}
	if seeding {
		if err := r.seed(ctx, job.Params.Source); err != nil {
			return nil, err
		}
		close(r.seedDone)
	}
	t1 := time.Now()

	// 4. Replay the outbox up to the live watermark, pass after pass.
	if err := r.replay(ctx); err != nil {
		return nil, err
	}
	if r.snapshot().DropTombstones {
		if err := r.dropTombstones(ctx); err != nil {
			return nil, err
		}
	}
	t2 := time.Now()

	// The definition's settings back, every write searchable, replicas as
	// available as the live index's.
	if err := r.restoreSettings(ctx, job.Params.Source); err != nil {
		return nil, err
	}
	t3 := time.Now()
	r.timings = Timings{Wait: t0.Sub(tw).Seconds(), Seed: t1.Sub(t0).Seconds(), Replay: t2.Sub(t1).Seconds(), Refresh: t3.Sub(t2).Seconds()}

	// 5. Completeness check.
	r.setPhase(PhaseVerify)
	r.checkSettings(ctx)
	if r.cfg.beforeVerify != nil {
		r.cfg.beforeVerify(r.target)
	}
	report, err := r.verify(ctx, job.Params.Source, r.target)
	if err != nil {
		return nil, err
	}
	r.timings.Verify = time.Since(t3).Seconds()
	if !report.OK {
		return nil, &CheckError{Report: report}
	}

	// 6. Swap.
	return r.finish(ctx, start, report)
}

// CheckError is a completeness check that failed; the alias was not moved.
type CheckError struct{ Report *Report }

func (e *CheckError) Error() string {
	return "reindex: completeness check failed, the alias was not moved:\n" + e.Report.String()
}

func (r *Reindexer) finish(ctx context.Context, start time.Time, report *Report) (*Result, error) {
	job := r.job
	r.setPhase(PhaseSwap)
	targets, err := r.cfg.Engine.AliasTargets(ctx, r.alias)
	if err != nil {
		return nil, fmt.Errorf("reindex: alias %s: %w", r.alias, err)
	}
	if !(len(targets) == 1 && targets[0] == r.target) {
		if len(targets) != 1 || targets[0] != job.Params.Source {
			return nil, fmt.Errorf("reindex: alias %s points to %v, not to %s as at the start; not swapping", r.alias, targets, job.Params.Source)
		}
		if err := r.cfg.Engine.Refresh(ctx, r.target); err != nil {
			return nil, fmt.Errorf("reindex: refresh %s: %w", r.target, err)
		}
		actions := []indexer.AliasAction{
			{Add: false, Index: job.Params.Source, Alias: r.alias},
			{Add: true, Index: r.target, Alias: r.alias, Filter: r.cfg.Def.SearchFilter()},
		}
		if err := r.cfg.Engine.UpdateAliases(ctx, actions); err != nil {
			return nil, fmt.Errorf("reindex: swap alias %s from %s to %s: %w", r.alias, job.Params.Source, r.target, err)
		}
		r.log.Info("reindex: alias swapped", "from", job.Params.Source, "to", r.target)
	}
	keep := r.cfg.KeepOld
	if d, err := time.ParseDuration(job.Params.KeepOld); err == nil && job.Resumed {
		keep = d
	}
	res := &Result{OldIndex: job.Params.Source, NewIndex: r.target, DeleteAfter: time.Now().Add(max(keep, 0)).UTC(), Verify: report,
		Seconds: time.Since(start).Seconds(), Timings: r.timings, Progress: r.snapshot()}
	r.setPhase(PhaseDone)
	r.saveMu.Lock()
	r.mu.Lock()
	job.Progress = r.progress
	r.mu.Unlock()
	r.finished.Store(true) // the heartbeat must not take the ended row for a lost one
	err = job.finish(ctx, r.cfg.Pool, "succeeded", res, nil)
	r.saveMu.Unlock()
	if err != nil {
		return nil, err
	}
	if keep < 0 {
		if err := sleep(ctx, 2*TargetsTTL); err == nil {
			if err := r.cfg.Engine.DeleteIndex(ctx, res.OldIndex); err == nil {
				res.OldDeleted = true
				_, _ = r.cfg.Pool.Exec(ctx, `UPDATE aa_job SET result = jsonb_set(result, '{old_deleted}', 'true') WHERE id = $1`, job.ID)
			}
		}
	}
	return res, nil
}

// fail ends the job failed: dual writes stop, the target is deleted, the
// alias stays where it was.
func (r *Reindexer) fail(ctx context.Context, cause error, report *Report) {
	var ce *CheckError
	if errors.As(cause, &ce) {
		report = ce.Report
	}
	r.saveMu.Lock()
	r.mu.Lock()
	r.job.Progress = r.progress
	r.mu.Unlock()
	res := &Result{OldIndex: r.job.Params.Source, NewIndex: r.job.Params.Target, Verify: report}
	err := r.job.finish(ctx, r.cfg.Pool, "failed", res, cause)
	r.saveMu.Unlock()
	if err != nil {
		r.log.Error("reindex: could not record the failure", "error", err.Error())
		return
	}
	if r.job.Params.Target != "" {
		r.dropTarget(ctx, r.job.Params.Target)
	}
}

// dropTarget deletes a target once no consumer writes to it any more (and
// again, should a late write have re-created it).
func (r *Reindexer) dropTarget(ctx context.Context, target string) {
	dropTarget(ctx, r.cfg.Engine, r.alias, target, r.log)
}

func dropTarget(ctx context.Context, eng indexer.Engine, alias, target string, log *slog.Logger) {
	if aliases, err := eng.AliasTargets(ctx, alias); err == nil && slices.Contains(aliases, target) {
		log.Error("reindex: not deleting the target, the alias points to it", "index", target)
		return
	}
	_ = sleep(ctx, 2*TargetsTTL+200*time.Millisecond)
	for i := 0; i < 2; i++ {
		if err := eng.DeleteIndex(ctx, target); err != nil {
			log.Error("reindex: delete target", "index", target, "error", err.Error())
			return
		}
		if i == 0 {
			_ = sleep(ctx, TargetsTTL)
		}
	}
}

func (r *Reindexer) heartbeats(ctx context.Context, cancel context.CancelCauseFunc, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(r.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if r.finished.Load() {
			return
		}
		if err := r.saveProgress(ctx); errors.Is(err, ErrLost) && !r.finished.Load() {
			r.log.Error("reindex: the job was aborted or taken over; stopping")
			cancel(ErrLost)
			return
		} else if err != nil && ctx.Err() == nil {
			r.log.Warn("reindex: heartbeat failed", "error", err.Error())
		}
	}
}

func (r *Reindexer) saveProgress(ctx context.Context) error {
	r.saveMu.Lock() // the heartbeat and the seed's task callback both save
	defer r.saveMu.Unlock()
	p := r.snapshot()
	if r.cfg.OnProgress != nil {
		r.cfg.OnProgress(p)
	}
	if r.job == nil {
		return nil
	}
	r.job.Progress = p
	return r.job.heartbeat(ctx, r.cfg.Pool)
}

func (r *Reindexer) snapshot() Progress {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.progress
	p.Stale = r.w.stale.Load()
	p.Poison = r.poison.Load()
	p.SeedNewer = r.skipped.Load() + r.skippedEvents.Load()
	return p
}

func (r *Reindexer) update(fn func(p *Progress)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fn(&r.progress)
}

func (r *Reindexer) setPhase(phase string) {
	r.update(func(p *Progress) { p.Phase = phase; p.Rate = 0; p.ETA = "" })
	r.log.Info("reindex: phase", "phase", phase)
}

// seed copies the documents of the live index to the target with their
// versions as external versions: every document, tombstones included,
// except the tombstones that no retained outbox event mentions any more
// (see compactedTombstones). It records the versions it copies (r.seeded).
func (r *Reindexer) seed(ctx context.Context, source string) error {
	r.setPhase(PhaseSeed)
	r.update(func(p *Progress) { p.DocsSeeded = 0 })
	if r.cfg.Reproject == nil && !r.cfg.ClientSeed {
		return r.seedServerSide(ctx, source)
	}
	skip, err := r.compactedTombstones(ctx, source)
	if err != nil {
		return err
	}
	r.startPrefetch(ctx)
	query := r.tombstoneQuery(skip) // all documents but skip
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(r.cfg.Concurrency)
	rt := rate{start: time.Now()}
	var seeded atomic.Int64
	// Pages of two bulks: fewer scroll round trips, the same bulk size.
	err = r.raw.scroll(gctx, source, query, 2*r.cfg.BulkSize, true, func(total int64, hits []scrollHit) error {
		ops := make([]indexer.BulkOp, 0, len(hits))
		for _, h := range hits {
			doc := h.Source
			if r.cfg.Reproject != nil {
				m, err := projections.Decode(h.Source)
				if err != nil {
					return fmt.Errorf("reindex: document %s of %s: %w", h.ID, source, err)
				}
				if m, err = r.cfg.Reproject(m); err != nil {
					return fmt.Errorf("reindex: re-project document %s of %s: %w", h.ID, source, err)
				}
				if doc, err = json.Marshal(m); err != nil {
					return fmt.Errorf("reindex: document %s: %w", h.ID, err)
				}
			}
			ops = append(ops, indexer.BulkOp{Type: indexer.OpIndex, Index: r.target, ID: h.ID, Version: h.Version, Routing: h.Routing, Doc: doc})
		}
		r.seededMu.Lock()
		for _, h := range hits {
			r.seeded[h.ID] = h.Version
		}
		r.seededMu.Unlock()
		for len(ops) > 0 {
			part := ops[:min(len(ops), r.cfg.BulkSize)]
			ops = ops[len(part):]
			r.seedBulk(gctx, g, part, &seeded, &rt, total)
		}
		return nil
	})
	if gerr := g.Wait(); err == nil {
		err = gerr
	}
	if err != nil {
		return fmt.Errorf("reindex: seed %s from %s: %w", r.target, source, err)
	}
	r.update(func(p *Progress) { p.SeedDone = true })
	r.log.Info("reindex: seeded from the live index", "docs", seeded.Load(), "source", source)
	return r.saveProgress(ctx)
}

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
	err := r.raw.scroll(ctx, source, tq, 10000, false, func(_ int64, hits []scrollHit) error {
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

// seedServerSide copies the live documents with the engine's _reindex (no
// transfer through searchsync), sliced by Concurrency, with the bulk size
// as batch: every document but the tombstones whose events were all
// compacted (looked up first). A scroll of ids and versions only runs
// beside the copy and records the versions it copies.
//
// The versions are read from the source. They never exceed what the target
// ends up holding: a version the scroll sees was either in the copy's
// snapshot or written live after dual writes began (the source was
// refreshed after that), which writes the target too.
func (r *Reindexer) seedServerSide(ctx context.Context, source string) error {
	if t := r.snapshot().SeedTask; t != "" {
		// The copy of an interrupted run may still be going on.
		if err := r.raw.cancelTask(ctx, t); err != nil {
			r.log.Warn("reindex: cancel the seed task of the interrupted run", "task", t, "error", err.Error())
		}
	}
	skip, err := r.compactedTombstones(ctx, source)
	if err != nil {
		return err
	}
	r.startPrefetch(ctx)
	query := r.tombstoneQuery(skip)
	rt := rate{start: time.Now()}
	var st taskStatus
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		var err error
		st, err = r.raw.copyServerSide(gctx, source, r.target, query, r.cfg.BulkSize, r.cfg.Concurrency, func(task string) {
			r.update(func(p *Progress) { p.SeedTask = task })
			_ = r.saveProgress(gctx) // so that abort can cancel it
		}, func(s taskStatus) {
			n := s.Created + s.Updated + s.VersionConflicts
			r.update(func(p *Progress) {
				p.DocsSeeded = n
				p.Rate = rt.perSecond(n)
				if p.Rate > 0 && s.Total > n {
					p.ETA = (time.Duration(float64(s.Total-n)/p.Rate) * time.Second).Round(time.Second).String()
				}
			})
		})
		r.log.Debug("reindex: server-side copy done", "docs", st.Created+st.Updated, "ms", time.Since(rt.start).Milliseconds())
		return err
	})
	g.Go(func() error {
		// The versions copied: an event not newer needs no replay.
		err := r.raw.scroll(gctx, source, query, 10000, false, func(_ int64, hits []scrollHit) error {
			r.seededMu.Lock()
			for _, h := range hits {
				r.seeded[h.ID] = h.Version
			}
			r.seededMu.Unlock()
			return nil
		})
		if err != nil {
			return fmt.Errorf("read the versions of %s: %w", source, err)
		}
		r.log.Debug("reindex: seeded versions read", "docs", len(r.seeded), "ms", time.Since(rt.start).Milliseconds())
		return nil
	})
	if err := g.Wait(); err != nil {
		clear(r.seeded)
		return fmt.Errorf("reindex: seed %s from %s: %w", r.target, source, err)
	}
	for _, id := range skip {
		// Seen by the scroll only if revived in between (then copied): its
		// events are replayed rather than skipped.
		delete(r.seeded, id)
	}
	n := st.Created + st.Updated
	r.w.stale.Add(st.VersionConflicts)
	r.update(func(p *Progress) { p.DocsSeeded = n; p.SeedDone = true; p.SeedTask = "" })
	r.log.Info("reindex: seeded from the live index (server-side _reindex)", "docs", n, "conflicts", st.VersionConflicts, "tombstones_left_out", len(skip), "source", source)
	return r.saveProgress(ctx)
}

func (r *Reindexer) seedBulk(ctx context.Context, g *errgroup.Group, ops []indexer.BulkOp, seeded *atomic.Int64, rt *rate, total int64) {
	g.Go(func() error {
		if err := r.w.bulk(ctx, ops); err != nil {
			return err
		}
		n := seeded.Add(int64(len(ops)))
		r.update(func(p *Progress) {
			p.DocsSeeded = n
			p.Rate = rt.perSecond(n)
			if p.Rate > 0 && total > n {
				p.ETA = (time.Duration(float64(total-n)/p.Rate) * time.Second).Round(time.Second).String()
			}
		})
		return nil
	})
}

// replay reads the outbox after progress.LastID up to the watermark (the
// max id when the pass starts) and writes the coalesced documents; passes
// repeat until one finds less than a chunk of new events.
// read is one chunk read and projected ahead of the writes.
type read struct {
	c     *chunk
	order []string
	steps map[string][]*projections.Result
	err   error
}

// prefetch is a reader started before seeding (the events are read and
// projected while the seed writes; nothing is written before the seed ends).
type prefetch struct {
	from, until int64
	reads       <-chan read
	cancel      context.CancelFunc
}

const readAhead = 8 // chunks read and projected ahead of the writes

// reader reads the chunks of (from, until] in one goroutine and projects
// them in another (each chunk on every core), so that reading, projecting
// and writing overlap.
//
// heads reads the events without payloads first (chunk.heads): the
// projecting goroutine, once the seed is done, reads whole only those that
// are not older than the seed. That is most of the replay's cost saved when
// the live index holds nearly everything, as it does.
func (r *Reindexer) reader(ctx context.Context, from, until int64, heads bool) (<-chan read, context.CancelFunc) {
	raws := make(chan read, readAhead)
	reads := make(chan read, readAhead)
	rctx, cancel := context.WithCancel(ctx)
	go func() {
		defer close(raws)
		cur := from
		for cur < until {
			t := time.Now()
			c, err := r.readChunk(rctx, cur, until, heads)
			if err == nil {
				r.log.Debug("reindex: chunk read", "events", len(c.events), "read_ms", time.Since(t).Milliseconds())
			}
			select {
			case raws <- read{c: c, err: err}:
			case <-rctx.Done():
				return
			}
			if err != nil {
				return
			}
			cur = c.last
		}
	}()
	go func() {
		defer close(reads)
		if r.seedDone != nil {
			// Project only once the seeded versions are known: events the
			// seed holds newer are then skipped without projecting them.
			select {
			case <-r.seedDone:
			case <-rctx.Done():
				for range raws {
				}
				return
			}
		}
		for rd := range raws {
			if rd.err == nil && rd.c.heads {
				t := time.Now()
				n := len(rd.c.events)
				rd.err = r.readRest(rctx, rd.c)
				r.log.Debug("reindex: chunk completed", "events", n, "read_whole", len(rd.c.events), "ms", time.Since(t).Milliseconds())
			}
			if rd.err == nil {
				t := time.Now()
				rd.order, rd.steps = r.project(rd.c)
				r.log.Debug("reindex: chunk projected", "events", len(rd.c.events), "project_ms", time.Since(t).Milliseconds())
			}
			select {
			case reads <- rd:
			case <-rctx.Done():
				for range raws {
				}
				return
			}
		}
	}()
	return reads, cancel
}

// startPrefetch starts reading the first replay pass (from the recorded
// cursor to the current watermark) while the seed copies (it starts after
// the seed's tombstone look-up, whose outbox queries it would slow down).
func (r *Reindexer) startPrefetch(ctx context.Context) {
	var wm int64
	if err := r.cfg.Pool.QueryRow(ctx, maxIDSQL).Scan(&wm); err != nil {
		return // the replay reads it again and reports the error
	}
	from := r.snapshot().LastID
	// Without payloads where the seed decides which events are needed.
	heads := r.seedDone != nil && r.idIsAggregate && r.versionPathSQL != nil
	reads, cancel := r.reader(ctx, from, wm, heads)
	r.prefetch = &prefetch{from: from, until: wm, reads: reads, cancel: cancel}
}

func (r *Reindexer) replay(ctx context.Context) error {
	r.setPhase(PhaseReplay)
	cache := map[string]*docState{}
	const cacheMax = 200_000
	rt := rate{start: time.Now()}
	var docs atomic.Int64
	docs.Store(r.snapshot().DocsWritten)
	rt.n = docs.Load()
	for pass := 0; pass < 50; pass++ {
		var wm int64
		if err := r.cfg.Pool.QueryRow(ctx, maxIDSQL).Scan(&wm); err != nil {
			return fmt.Errorf("reindex: read the outbox watermark: %w", err)
		}
		cursor := r.snapshot().LastID
		first := cursor
		r.update(func(p *Progress) { p.Watermark = wm })
		if cursor >= wm {
			return nil
		}
		var reads <-chan read
		var rcancel context.CancelFunc
		if pf := r.prefetch; pf != nil && pf.from == cursor {
			reads, rcancel, wm = pf.reads, pf.cancel, pf.until
			r.update(func(p *Progress) { p.Watermark = wm })
		} else {
			if pf != nil {
				pf.cancel()
				for range pf.reads {
				}
			}
			reads, rcancel = r.reader(ctx, cursor, wm, false)
		}
		r.prefetch = nil
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(r.cfg.Concurrency)
		// done tracks the chunks in flight in order, so that LastID only
		// moves past chunks whose every write finished.
		var dmu sync.Mutex
		type inflight struct {
			last    int64
			pending int
			events  int
		}
		var queue []*inflight
		settle := func() {
			for len(queue) > 0 && queue[0].pending == 0 {
				q := queue[0]
				queue = queue[1:]
				r.update(func(p *Progress) {
					p.LastID = q.last
					p.EventsReplayed += int64(q.events)
				})
			}
		}
		var failed error
		for rd := range reads {
			if rd.err != nil {
				failed = rd.err
				break
			}
			if gctx.Err() != nil {
				break
			}
			c, order, steps := rd.c, rd.order, rd.steps
			if r.slow > 0 {
				_ = sleep(gctx, r.slow)
			}
			// Documents seeded at a version no event of the chunk exceeds
			// are complete already.
			order = r.skipSeeded(order, steps, cache)
			// Bases the cache does not have come from the target (seeded
			// documents, earlier live writes).
			var need []string
			for _, id := range order {
				first := steps[id][0]
				if _, ok := cache[id]; !ok && ((first.Op == projections.OpIndex && first.Partial) ||
					(first.Op == projections.OpDelete && r.cfg.Def.DeleteMode == mapping.DeleteSoft)) {
					need = append(need, id)
				}
			}
			if len(need) > 0 {
				tm := time.Now()
				found, err := r.mget(gctx, r.target, need)
				r.log.Debug("reindex: mget", "ids", len(need), "ms", time.Since(tm).Milliseconds())
				if err != nil {
					failed = fmt.Errorf("reindex: read current documents from %s: %w", r.target, err)
					break
				}
				// A document the target lacks may be a tombstone of the live
				// index (seeding skips them): its last state is the base, and
				// it is copied even when no event is newer. Tombstones whose
				// events were all compacted are dropped this way, the others
				// kept.
				if r.source != "" {
					var missing []string
					for _, id := range need {
						if _, ok := found[id]; !ok {
							missing = append(missing, id)
						}
					}
					if len(missing) > 0 {
						fromSource, err := r.mget(gctx, r.source, missing)
						if err != nil {
							failed = fmt.Errorf("reindex: read current documents from %s: %w", r.source, err)
							break
						}
						for id, d := range fromSource {
							d.copy = true
							found[id] = d
						}
					}
				}
				for _, id := range need {
					st := &docState{}
					if d, ok := found[id]; ok {
						m, err := projections.Decode(d.Source)
						if err == nil {
							st.doc, st.version, st.known, st.copy = m, d.Version, true, d.copy
							if del, _ := m[r.cfg.Def.TombstoneField].(bool); del && r.cfg.Def.DeleteMode == mapping.DeleteSoft {
								st.deleted = true
							}
						}
					}
					cache[id] = st
				}
			}
			ops := make([]indexer.BulkOp, 0, len(order))
			for _, id := range order {
				st := cache[id]
				if st == nil {
					st = &docState{}
					cache[id] = st
				}
				op, ok, err := r.apply(id, st, steps[id])
				if err != nil {
					failed = err
					break
				}
				if ok {
					ops = append(ops, op)
				}
			}
			if failed != nil {
				break
			}
			item := &inflight{last: c.last, events: c.read}
			dmu.Lock()
			queue = append(queue, item)
			dmu.Unlock()
			for i := 0; i < len(ops) || i == 0; i += r.cfg.BulkSize {
				part := ops[i:min(i+r.cfg.BulkSize, len(ops))]
				dmu.Lock()
				item.pending++
				dmu.Unlock()
				g.Go(func() error {
					err := r.w.bulk(gctx, part)
					if err != nil {
						return err
					}
					n := docs.Add(int64(len(part)))
					dmu.Lock()
					item.pending--
					settle()
					dmu.Unlock()
					r.update(func(p *Progress) {
						p.DocsWritten = n
						p.Rate = rt.perSecond(n)
						if done := c.last - first; done > 0 && wm > c.last {
							secs := time.Since(rt.start).Seconds() * float64(wm-c.last) / float64(done)
							p.ETA = (time.Duration(secs) * time.Second).Round(time.Second).String()
						} else {
							p.ETA = "0s"
						}
					})
					return nil
				})
				if len(ops) == 0 {
					break
				}
			}
			if len(cache) > cacheMax {
				// Evict only when no write is in flight, so that a later
				// read of the target sees every write of the replay.
				if err := g.Wait(); err != nil {
					failed = err
					break
				}
				g, gctx = errgroup.WithContext(ctx)
				g.SetLimit(r.cfg.Concurrency)
				clear(cache)
			}
		}
		rcancel()
		for range reads {
		}
		if err := g.Wait(); failed == nil {
			failed = err
		}
		if failed != nil {
			return failed
		}
		dmu.Lock()
		settle()
		dmu.Unlock()
		n := r.snapshot().EventsReplayed
		r.log.Info("reindex: replay pass done", "pass", pass+1, "watermark", wm, "events", n, "docs_written", docs.Load())
		if err := r.saveProgress(ctx); err != nil {
			return err
		}
		if wm-first < int64(r.cfg.ChunkSize) {
			return nil // caught up: what comes now reaches the target by dual writes
		}
	}
	return nil
}

// baseDoc is a current document read for the replay.
type baseDoc struct {
	indexer.Doc
	copy bool // read from the live index: copy it even when no event is newer
}

func (r *Reindexer) mget(ctx context.Context, index string, ids []string) (map[string]baseDoc, error) {
	m, err := r.cfg.Engine.MGet(ctx, index, ids)
	if err != nil {
		return nil, err
	}
	out := make(map[string]baseDoc, len(m))
	for k, v := range m {
		out[k] = baseDoc{Doc: v}
	}
	return out, nil
}

// skipSeeded drops the documents whose every step in the chunk is not newer
// than the version seeded for them, and the steps older than it for the
// others: seeding wrote a later state already.
func (r *Reindexer) skipSeeded(order []string, steps map[string][]*projections.Result, cache map[string]*docState) []string {
	if len(r.seeded) == 0 {
		return order
	}
	out := order[:0]
	for _, id := range order {
		v, ok := r.seeded[id]
		if !ok {
			out = append(out, id)
			continue
		}
		st := steps[id]
		if st[len(st)-1].Version <= v {
			r.skipped.Add(1)
			continue
		}
		if _, cached := cache[id]; !cached {
			// Only the events after the seeded version matter; the base
			// is the seeded document (read from the target).
			i := 0
			for i < len(st) && st[i].Version <= v {
				i++
			}
			steps[id] = st[i:]
		}
		out = append(out, id)
	}
	return out
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
	err := r.raw.scroll(ctx, r.target, query, 5000, false, func(_ int64, hits []scrollHit) error {
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

// restoreSettings puts the definition's refresh interval and number of
// replicas back on the target (the engine's defaults where it sets none),
// refreshes it and waits until its health is as good as the live index's
// (green when that is green: every replica allocated).
func (r *Reindexer) restoreSettings(ctx context.Context, source string) error {
	settings := map[string]any{"refresh_interval": defSetting(r.cfg.Def, "refresh_interval")}
	if ownsReplicas(r.cfg.Def) {
		settings["number_of_replicas"] = defSetting(r.cfg.Def, "number_of_replicas")
	}
	if err := r.raw.putSettings(ctx, r.target, settings); err != nil {
		return err
	}
	if err := r.cfg.Engine.Refresh(ctx, r.target); err != nil {
		return fmt.Errorf("reindex: refresh %s: %w", r.target, err)
	}
	if ownsReplicas(r.cfg.Def) && replicasWanted(r.cfg.Def) == 0 {
		return nil // no replicas to wait for: the primary is active, it was written to
	}
	// Green when the live index is green with at least as many replicas
	// (the cluster can place them), else yellow (every primary). At most
	// replicaWait, then the reindex goes on with what there is, as it did
	// when replicas were built while filling.
	want := "yellow"
	if status, _, err := r.raw.health(ctx, source, "", 0); err != nil {
		return fmt.Errorf("reindex: %w", err)
	} else if status == "green" {
		if info, err := r.cfg.Engine.GetIndex(ctx, source); err == nil && info != nil && replicasOf(info.Settings) >= replicasWanted(r.cfg.Def) {
			want = "green"
		}
	}
	for waited := time.Duration(0); ; {
		step := min(30*time.Second, replicaWait-waited)
		_, timedOut, err := r.raw.health(ctx, r.target, want, step)
		if err != nil {
			return fmt.Errorf("reindex: %w", err)
		}
		if !timedOut {
			break
		}
		if waited += step; waited >= replicaWait {
			r.log.Warn("reindex: the new index is not "+want+"; going on", "index", r.target, "waited", waited.String())
			break
		}
		r.log.Warn("reindex: waiting for the replicas of the new index", "index", r.target, "status_wanted", want, "waited", waited.String())
	}
	return nil
}

// checkSettings logs the settings of the target that differ from the
// definition (none should).
func (r *Reindexer) checkSettings(ctx context.Context) {
	if info, err := r.cfg.Engine.GetIndex(ctx, r.target); err == nil && info != nil {
		if diff := settingChanges(info.Settings, r.cfg.Def); len(diff) > 0 {
			r.log.Warn("reindex: settings of the new index differ from the definition", "index", r.target, "settings", strings.Join(diff, ","))
		}
	}
}

// ownsReplicas says whether the reindex may set the target's replicas
// while filling: not when the definition lets the engine choose them
// (auto_expand_replicas).
func ownsReplicas(def *mapping.Def) bool {
	v := defSetting(def, "auto_expand_replicas")
	return v == nil || v == false || v == "false"
}

// replicaWait bounds the wait for the new index's replicas.
var replicaWait = 10 * time.Minute

// replicasOf reads index.number_of_replicas from an index's settings.
func replicasOf(settings json.RawMessage) int {
	var s struct {
		Index struct {
			Replicas string `json:"number_of_replicas"`
		} `json:"index"`
	}
	_ = json.Unmarshal(settings, &s)
	n, _ := strconv.Atoi(s.Index.Replicas)
	return n
}

// replicasWanted is the definition's number of replicas (the engine's
// default, 1, when it sets none).
func replicasWanted(def *mapping.Def) int {
	v := defSetting(def, "number_of_replicas")
	if v == nil {
		return 1
	}
	n, err := strconv.Atoi(fmt.Sprint(v))
	if err != nil {
		return 1
	}
	return n
}

// defSetting is the definition's index setting name (flat, "index."
// prefixed or nested under "index"); nil (the engine's default) when it
// sets none.
func defSetting(def *mapping.Def, name string) any {
	if v, ok := def.Settings[name]; ok {
		return v
	}
	if v, ok := def.Settings["index."+name]; ok {
		return v
	}
	if ix, ok := def.Settings["index"].(map[string]any); ok {
		if v, ok := ix[name]; ok {
			return v
		}
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}
