package reindex

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/searchsync/searchsync/backfill"
	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/linked"
	"github.com/searchsync/searchsync/mapping"
	"github.com/searchsync/searchsync/projections"
)

// Config configures one reindex of one alias.
type Config struct {
	// Pool reaches the outbox (search_path set to its schema). Required.
	Pool *pgxpool.Pool
	// Engine is the search engine. Required.
	Engine indexer.Engine
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
	// Consumers are the names of the search consumers that write the alias
	// (with Wants, their routes). The completeness check first waits for
	// them to deliver what the replay wrote (see CatchUpStall); an event
	// whose consumers went different ways counts as delivered once none of
	// these has a pending delivery row for it. Default: any consumer's
	// pending row counts.
	Consumers []string
	// CatchUpStall is how long the check waits for the live consumers
	// while they deliver nothing of what they still owe; then it checks
	// anyway, and a failed check says how many events the live index
	// lacked. Default 30s.
	CatchUpStall time.Duration
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
	// SeedSource, when set, seeds the target from this backfill source
	// (`--seed source:<name>`) instead of copying the live index: its rows
	// are read in key order, projected as the replay projects events and
	// written with their versions as external versions; the completeness
	// check then compares with the source's rows (see seedFromSource and
	// verifySource).
	SeedSource *backfill.Source
	// Force rebuilds even when the live index already matches the definition
	// and the projections (after changing what a Go projection function
	// or upcaster does, which the projections fingerprint cannot see).
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
	c.CatchUpStall = cmp.Or(c.CatchUpStall, 30*time.Second)
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
	case c.SeedSource != nil && c.Projections.Linked(c.Def.Alias):
		// One source holds the entities, not their relations, whose
		// events compaction may have removed: the new index would lack
		// them.
		return fmt.Errorf("reindex: relations reach %s: seed it from the live index (without --seed), which holds the relations; "+
			"to bring in what the platform's tables hold, run `searchsync backfill` for its entity and relation sources (their snapshots complete the live documents in place)", c.Def.Alias)
	}
	return nil
}

// Reindexer rebuilds one alias. Use it once.
type Reindexer struct {
	cfg      Config
	alias    string // the alias applications read (per tenant in per_tenant mode)
	adm      indexer.Admin
	log      *slog.Logger
	aggTypes []string // aggregate types of the alias's projections (nil: patterns)
	// writers is the fingerprint of the projections that write the alias:
	// recorded in the new index's _meta (mapping.Def.Writers).
	writers *projections.Fingerprint

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
	prep     *seedPrep // the seed's look-ups (nil: not started)
	skipped  atomic.Int64

	// versionPathSQL is the version path of every projection of the alias
	// (nil when they differ or use Go code); idIsAggregate says that every
	// one uses the aggregate id as document id. Both allow skipping events
	// older than the seed before projecting them.
	versionPathSQL []string
	idIsAggregate  bool
	skippedEvents  atomic.Int64
	finished       atomic.Bool      // the job row was ended by this run
	seedDone       chan struct{}    // closed when the seed of this run finished (nil: no seed runs)
	srcReader      *backfill.Reader // Config.SeedSource, opened (nil: not yet)
	versionsKnown  chan struct{}    // closed once seeded is complete, before the copy ends (nil: with seedDone)

	slow   time.Duration     // tests: a pause per replayed chunk
	source string            // the live index (tombstones are read from it)
	rules  projections.Rules // the definition's, for projections.Fold
	// lw replays the documents of an alias that relations reach (nil for
	// any other alias).
	lw    *linked.Writer
	hooks replayHooks // tests: points of the replay to hold or stop it at
}

// replayHooks are called, when set, by the seed and the replay (tests
// only): beforeCopy once the seed's look-ups are done, right before the
// copy starts; beforeSeedWrite, seeding from a source, with the rows of a
// chunk read and projected, before their writes are sent; beforeDispatch once a chunk is queued for its writes, before
// they are sent; beforeBulk in each write of a chunk, right before it is
// sent. The last two get the last outbox id of the chunk.
type replayHooks struct {
	beforeCopy      func()
	beforeSeedWrite func(rows []backfill.Row)
	beforeDispatch  func(chunkLast int64)
	beforeBulk      func(chunkLast int64)
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
	adm, ok := cfg.Engine.(indexer.Admin)
	if !ok {
		return nil, fmt.Errorf("%w: %T", errNoAdmin, cfg.Engine)
	}
	if indexer.Serverless(cfg.Engine) {
		return nil, ErrServerless
	}
	r := &Reindexer{cfg: cfg, alias: alias, adm: adm, seeded: map[string]int64{}, rules: cfg.Def.FoldRules()}
	r.log = cfg.Logger.With("alias", alias)
	r.w = newWriter(cfg.Engine, cfg.BulkSize, cfg.Concurrency, r.log, func(reason string) {
		r.update(func(p *Progress) { p.Waiting = reason })
	})
	r.aggTypes = aggregateTypes(cfg.Projections, cfg.Def.Alias)
	r.writers = cfg.Projections.Fingerprint(cfg.Def.Alias)
	r.versionPathSQL, r.idIsAggregate = prefilter(cfg.Projections, cfg.Def)
	if cfg.Projections.Linked(cfg.Def.Alias) {
		// Relations reach the alias: its documents carry their sources'
		// versions and are replayed through the linked writer, read,
		// folded and written guarded, chunk after chunk. The engine's
		// version of a seeded document says nothing about its events.
		r.versionPathSQL, r.idIsAggregate = nil, false
		if cfg.Def.Tenancy.Mode == mapping.TenancyPerTenant {
			return nil, fmt.Errorf("reindex: relations reach %s, which needs tenancy mode shared", cfg.Def.Alias)
		}
		lw, err := linked.New(linked.Config{Engine: cfg.Engine, Writer: r.w.w, Projections: cfg.Projections, NoFanOut: true, Logger: r.log,
			Rules: func(ix string) projections.Rules {
				if ix == cfg.Def.Alias {
					return r.rules
				}
				return projections.Rules{}
			}})
		if err != nil {
			return nil, fmt.Errorf("reindex: %w", err)
		}
		r.lw = lw
	}
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
	add := func(types []string) bool {
		if len(types) == 0 {
			return false
		}
		for _, a := range types {
			if strings.ContainsAny(a, `*?[\`) {
				return false
			}
			if !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
		return true
	}
	for _, p := range set.Projections() {
		if p.Index == index && !add(p.AggregateTypes) {
			return nil
		}
	}
	for _, rel := range set.Relations() {
		if (rel.Source.Index == index || rel.Target.Index == index) && !add(rel.AggregateTypes) {
			return nil
		}
	}
	if out == nil {
		return []string{} // no projection writes the alias: nothing to replay
	}
	return out
}

// projectionChanges describes how the projections differ from those
// recorded in the live index's mappings (nil when they do not, or when the
// index records none: mapping.Ensure adopts the current ones then).
func (r *Reindexer) projectionChanges(mappings json.RawMessage) []string {
	return r.writers.Changes(mapping.LiveProjections(mappings))
}

// Alias is the alias being rebuilt.
func (r *Reindexer) Alias() string { return r.alias }

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

// ErrServerless is the error of New for Amazon OpenSearch Serverless: a
// rebuild walks the outbox into a new index and the live one with the
// scroll API, copies with _reindex as a task, waits for _cluster/health and
// makes the copy searchable with _refresh before it moves the alias, and
// Serverless serves none of them.
var ErrServerless = errors.New("reindex: not available on Amazon OpenSearch Serverless (engine.aws.service: aoss): " +
	"it serves neither the scroll API, _reindex and tasks, _cluster/health nor _refresh, which a rebuild needs; " +
	"the search consumer delivers there all the same (docs/engine-connection.md)")

// errNoAdmin is the error of New for an engine without indexer.Admin.
var errNoAdmin = errors.New("reindex: Config.Engine does not implement indexer.Admin (the engines of indexer.New do)")

// ErrUpToDate means the live index already matches the definition (use
// Force to rebuild anyway).
var ErrUpToDate = errors.New("reindex: the live index already matches the definition and the projections; nothing to do " +
	"(use --force to rebuild anyway, e.g. after changing what a Go projection function or upcaster does)")

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
	params := Params{Alias: r.alias, Source: src, SourceHash: mapping.LiveHash(info.Mappings), Hash: hash, KeepOld: r.cfg.KeepOld.String(), Seed: r.cfg.seedSpec(),
		ProjectionsHash: r.writers.Hash}
	upToDate := params.SourceHash == hash && len(r.projectionChanges(info.Mappings)) == 0
	if running, _, err := Running(ctx, r.cfg.Pool, r.alias); errors.Is(err, ErrNoJob) && upToDate && !r.cfg.Force {
		return nil, ErrUpToDate
	} else if err != nil && !errors.Is(err, ErrNoJob) {
		return nil, err
	} else if running != nil && running.Params.Seed != params.Seed {
		return nil, seedMismatch(running.ID, running.Params.Seed, params.Seed, r.alias)
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
		if job.Params.ProjectionsHash != "" && job.Params.ProjectionsHash != params.ProjectionsHash {
			return nil, fmt.Errorf("reindex: job %d was started for projections %s, the projections now have %s; run `searchsync reindex abort %s` first",
				job.ID, short(job.Params.ProjectionsHash), short(params.ProjectionsHash), r.alias)
		}
		if job.Params.Seed != params.Seed {
			return nil, seedMismatch(job.ID, job.Params.Seed, params.Seed, r.alias)
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
			err = r.lost(context.WithoutCancel(ctx))
			return
		}
		if ctx.Err() != nil {
			// Interrupted (SIGINT/SIGTERM): leave the job running so that the
			// next `searchsync reindex` resumes it once the heartbeat is stale.
			if serr := r.saveProgress(context.WithoutCancel(ctx)); serr != nil {
				// The resume starts from the last progress saved, which is
				// behind this one: safe, only slower.
				r.log.Warn("reindex: could not save the progress of the interrupted job", "err", serr)
			}
			return
		}
		if ferr := r.fail(context.WithoutCancel(ctx), err, nil); ferr != nil {
			err = ferr
		}
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
	swapped, err := r.prepareTarget(ctx)
	if err != nil {
		return nil, err
	}
	if swapped {
		// A crash between the swap and the end of the job: the alias
		// already points to the target.
		return r.finish(ctx, start, nil)
	}

	// 2. Dual writes on, then wait until every search consumer has seen it:
	// from then on every live op reaches the target, and everything
	// delivered before is committed and visible to the replay. The seed's
	// look-ups run meanwhile (startSeedPrep says why that is safe).
	// 3. Seed from the live index or the source (history compaction
	// removed).
	tw := time.Now()
	t0, err := r.dualWritesAndSeed(ctx)
	if err != nil {
		return nil, err
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
	owed, err := r.catchUp(ctx, r.snapshot().Watermark)
	if err != nil {
		return nil, err
	}
	var report *Report
	if r.cfg.SeedSource != nil {
		report, err = r.verifySource(ctx, r.target)
	} else {
		report, err = r.verify(ctx, job.Params.Source, r.target)
	}
	if err != nil {
		return nil, err
	}
	report.Owed = owed
	r.timings.Verify = time.Since(t3).Seconds()
	if !report.OK {
		return nil, &CheckError{Report: report}
	}

	// 6. Swap.
	return r.finish(ctx, start, report)
}

// dualWritesAndSeed switches dual writes on and waits until every search
// consumer has seen it, starting the seed's look-ups meanwhile, then seeds
// the target when this run has to (from the live index, or from the backfill
// source). t0 is when the wait ended.
func (r *Reindexer) dualWritesAndSeed(ctx context.Context) (t0 time.Time, err error) {
	job := r.job
	fromSource := r.cfg.SeedSource != nil
	seeding := !r.snapshot().SeedDone
	if seeding {
		r.seedDone = make(chan struct{})
		if job.Resumed && !fromSource {
			// An interrupted copy may have copied any tombstone.
			r.update(func(p *Progress) { p.DropTombstones = true })
		}
	}
	if !job.Params.DualWrite {
		job.Params.DualWrite = true
		if err := job.saveParams(ctx, r.cfg.Pool); err != nil {
			return t0, err
		}
		switch {
		case seeding && fromSource:
			r.startPrefetch(ctx, true) // nothing to look up in the live index
		case seeding:
			r.prep = r.startSeedPrep(ctx, job.Params.Source, r.cfg.Reproject == nil && !r.cfg.ClientSeed, true)
		}
		if err := sleep(ctx, 2*TargetsTTL+200*time.Millisecond); err != nil {
			if r.prep != nil {
				<-r.prep.done // it ends with ctx
			}
			return t0, err
		}
	}
	t0 = time.Now()
	if fromSource {
		if r.prefetch == nil {
			r.startPrefetch(ctx, false)
		}
		if seeding {
			if err := r.seedFromSource(ctx); err != nil {
				return t0, err
			}
			close(r.seedDone)
		}
		return t0, nil
	}
	// A refresh first, so that the copy sees every write made before dual
	// writes began.
	if err := r.cfg.Engine.Refresh(ctx, job.Params.Source); err != nil {
		return t0, fmt.Errorf("reindex: refresh %s: %w", job.Params.Source, err)
	}
	r.log.Debug("reindex: live index refreshed", "ms", time.Since(t0).Milliseconds())
	if !seeding {
		r.startPrefetch(ctx, false)
		return t0, nil
	}
	if err := r.seed(ctx, job.Params.Source); err != nil {
		return t0, err
	}
	close(r.seedDone)
	return t0, nil
}

// prepareTarget names the job's target index (the next free one, saved in
// the job), creates it from the definition or checks the one there, and
// sets it up for filling. swapped reports that the alias already points to
// it (the job was interrupted after its swap).
func (r *Reindexer) prepareTarget(ctx context.Context) (swapped bool, err error) {
	job := r.job
	if job.Params.Target == "" {
		name, err := mapping.NextFree(ctx, r.cfg.Engine, r.alias)
		if err != nil {
			return false, err
		}
		job.Params.Target = name
		if err := job.saveParams(ctx, r.cfg.Pool); err != nil {
			return false, err
		}
	}
	r.target, r.source = job.Params.Target, job.Params.Source
	info, err := r.cfg.Engine.GetIndex(ctx, r.target)
	if err != nil {
		return false, fmt.Errorf("reindex: look up %s: %w", r.target, err)
	}
	if info == nil {
		def := *r.cfg.Def
		def.Alias, def.Writers = r.alias, r.writers
		if err := mapping.CreatePhysical(ctx, r.cfg.Engine, &def, r.target, false); err != nil {
			return false, err
		}
		r.log.Info("reindex: created the new index", "index", r.target, "hash", short(job.Params.Hash), "projections_hash", short(r.writers.Hash))
	} else if h := mapping.LiveHash(info.Mappings); h != job.Params.Hash {
		return false, fmt.Errorf("reindex: %s exists with hash %s, the job expects %s", r.target, short(h), short(job.Params.Hash))
	} else if lp := mapping.LiveProjections(info.Mappings); job.Params.ProjectionsHash != "" && (lp == nil || lp.Hash != job.Params.ProjectionsHash) {
		return false, fmt.Errorf("reindex: %s exists without the projections fingerprint %s the job expects", r.target, short(job.Params.ProjectionsHash))
	}
	if targets, err := r.cfg.Engine.AliasTargets(ctx, r.alias); err == nil && len(targets) == 1 && targets[0] == r.target {
		return true, nil
	}

	// Nobody searches the target before the swap: no periodic refresh and
	// no replicas while it fills (the reads of the replay are real-time
	// gets; replicas are built once from the finished index). The
	// definition's values come back right after the replay.
	fill := map[string]any{"refresh_interval": "-1"}
	if ownsReplicas(r.cfg.Def) {
		fill["number_of_replicas"] = 0
	}
	if err := r.adm.PutSettings(ctx, r.target, fill); err != nil {
		return false, fmt.Errorf("reindex: %w", err)
	}
	return false, nil
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
	if len(targets) != 1 || targets[0] != r.target {
		if len(targets) != 1 || targets[0] != job.Params.Source {
			return nil, fmt.Errorf("reindex: alias %s points to %v, not to %s as at the start; not swapping", r.alias, targets, job.Params.Source)
		}
		if err := r.cfg.Engine.Refresh(ctx, r.target); err != nil {
			return nil, fmt.Errorf("reindex: refresh %s: %w", r.target, err)
		}
		// Still ours right before the swap: a consumer may have failed
		// the job (its target rejected a live write) since the last
		// heartbeat.
		if err := r.saveProgress(ctx); err != nil {
			return nil, err
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
// alias stays where it was. When the row is no longer ours it returns what
// lost says (a search consumer may have failed it first, with the reason
// that explains cause).
func (r *Reindexer) fail(ctx context.Context, cause error, report *Report) error {
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
	if errors.Is(err, ErrLost) {
		return r.lost(ctx)
	}
	if err != nil {
		r.log.Error("reindex: could not record the failure", "error", err.Error())
		return nil
	}
	if r.job.Params.Target != "" {
		r.dropTarget(ctx, r.job.Params.Target)
	}
	return nil
}

// lost is the error of a run whose job row is no longer its own: ErrLost
// (aborted, or taken over after a stale heartbeat), or a *FailedError when
// the row was ended failed — by a search consumer whose live write the
// target rejected (Targets.Rejected); the target is deleted then.
func (r *Reindexer) lost(ctx context.Context) error {
	state, msg, err := r.job.state(ctx, r.cfg.Pool)
	if err != nil || state != "failed" {
		return ErrLost
	}
	r.log.Error("reindex: the job was failed", "job_id", r.job.ID, "error", msg)
	if r.job.Params.Target != "" {
		r.dropTarget(ctx, r.job.Params.Target)
	}
	return &FailedError{JobID: r.job.ID, Reason: msg}
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
