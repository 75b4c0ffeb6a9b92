package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/searchsync/searchsync/backfill"
	"github.com/searchsync/searchsync/internal/config"
	"github.com/searchsync/searchsync/mapping"
	"github.com/searchsync/searchsync/reindex"
)

// ReindexCmd rebuilds an index from the outbox with zero downtime.
type ReindexCmd struct {
	Start   ReindexStartCmd   `cmd:"" default:"withargs" help:"Rebuild <alias> from the current definition (the default: searchsync reindex <alias>)."`
	Abort   ReindexAbortCmd   `cmd:"" help:"Stop the running reindex of <alias>, delete its new index; the live alias is untouched."`
	Cleanup ReindexCleanupCmd `cmd:"" help:"Delete old indexes of finished reindexes whose --keep-old time has passed."`
	Status  ReindexStatusCmd  `cmd:"" help:"Show the reindex jobs of <alias> (all aliases when omitted)."`
}

// ReindexStartCmd is `searchsync reindex <alias>`.
type ReindexStartCmd struct {
	Alias        string        `arg:"" help:"The alias to rebuild (per_tenant indexes: <alias>_<tenant>)."`
	DryRun       bool          `help:"Say what would be done (new index, definition changes, events to replay, documents to seed); change nothing."`
	KeepOld      time.Duration `default:"24h" help:"Keep the old index this long after the swap (0: delete it right away)."`
	Force        bool          `help:"Rebuild even when the live index matches the definition and the projections (after changing what a Go projection function or upcaster does)."`
	Seed         string        `default:"index" help:"Where the new index is seeded from: index (copy the live index) or source:<name> (read the backfill source <name>: backfill.sources, docs/reindex.md)."`
	ClientSeed   bool          `help:"Copy the live documents through searchsync (scroll + bulk) instead of the engine's _reindex API."`
	Resume       bool          `help:"Only resume an interrupted reindex (fail when there is none). Without it, an interrupted one is resumed too."`
	StaleAfter   time.Duration `default:"15s" help:"A running reindex whose heartbeat is older than this is taken over."`
	CatchUpStall time.Duration `default:"30s" help:"Before its check, wait for the relays to deliver what the replay wrote; give up when they deliver nothing of it this long."`
	ChunkSize    int           `default:"5000" help:"Events read and coalesced at once."`
	BulkSize     int           `default:"1000" help:"Documents per bulk request."`
	Concurrency  int           `default:"2" help:"Bulk requests in flight."`
	JSON         bool          `help:"Print the plan or result as JSON."`
}

// Run performs (or resumes) the reindex.
func (c *ReindexStartCmd) Run(ctx context.Context, g *Globals) error {
	e, pool, eng, closeAll, err := g.connectEngine(ctx)
	if err != nil {
		return err
	}
	defer closeAll()
	def, tenant, err := reindexDef(e.cfg, c.Alias)
	if err != nil {
		return err
	}
	set, err := loadProjections(e.cfg, builtinExamples)
	if err != nil {
		return err
	}
	seedSrc, err := reindexSeed(e.cfg, c.Seed, c.ClientSeed)
	if err != nil {
		return err
	}
	keep := c.KeepOld
	if keep == 0 {
		keep = -1 // Config: negative deletes right after the swap
	}
	var last time.Time
	cfg := reindex.Config{
		Pool: pool, Engine: eng, Def: def, Tenant: tenant, Projections: set,
		Wants: searchRoutes(e.cfg, def.Alias), Consumers: searchConsumers(e.cfg, def.Alias), KeepOld: keep, StaleAfter: c.StaleAfter, CatchUpStall: c.CatchUpStall, Force: c.Force, ClientSeed: c.ClientSeed, SeedSource: seedSrc,
		ChunkSize: c.ChunkSize, BulkSize: c.BulkSize, Concurrency: c.Concurrency, Logger: e.logger,
		OnProgress: func(p reindex.Progress) {
			if time.Since(last) < 2*time.Second {
				return
			}
			last = time.Now()
			fmt.Fprintln(os.Stderr, progressLine(p))
		},
	}
	r, err := reindex.New(cfg)
	if err != nil {
		return err
	}
	if c.DryRun {
		plan, err := r.DryRun(ctx)
		if err != nil {
			return err
		}
		if c.JSON {
			return printJSON(plan)
		}
		printPlan(plan)
		return nil
	}
	if c.Resume {
		if _, _, err := reindex.Running(ctx, pool, r.Alias()); errors.Is(err, reindex.ErrNoJob) {
			return fmt.Errorf("reindex %s: nothing to resume", r.Alias())
		} else if err != nil {
			return err
		}
	}
	if done, err := reindex.Cleanup(ctx, pool, eng, time.Now(), e.logger); err != nil {
		e.logger.Warn("reindex: cleanup of old indexes failed", "error", err.Error())
	} else {
		for _, x := range done {
			fmt.Fprintf(os.Stderr, "deleted old index %s of %s (kept until %s)\n", x.Index, x.Alias, x.DeleteAfter.Format(time.RFC3339))
		}
	}
	res, err := r.Run(ctx)
	if err != nil {
		var ce *reindex.CheckError
		if errors.As(err, &ce) {
			fmt.Fprint(os.Stderr, ce.Report.String())
			return fmt.Errorf("reindex %s: the completeness check failed; the alias was not moved and the new index was deleted", r.Alias())
		}
		if errors.Is(err, context.Canceled) {
			fmt.Fprintf(os.Stderr, "interrupted: run `searchsync reindex %s` again to resume (once the heartbeat is %s old), or `searchsync reindex abort %s`\n", r.Alias(), c.StaleAfter, r.Alias())
		}
		return err
	}
	if c.JSON {
		return printJSON(res)
	}
	fmt.Print(res.Verify.String())
	fmt.Printf("%s now points to %s (was %s) after %.1fs: %d documents seeded, %d events replayed, %d documents written\n",
		r.Alias(), res.NewIndex, res.OldIndex, res.Seconds, res.Progress.DocsSeeded, res.Progress.EventsReplayed, res.Progress.DocsWritten)
	if res.OldDeleted {
		fmt.Printf("deleted the old index %s\n", res.OldIndex)
	} else {
		fmt.Printf("the old index %s is kept until %s; `searchsync reindex cleanup` (or the next reindex) deletes it then\n", res.OldIndex, res.DeleteAfter.Format(time.RFC3339))
	}
	return nil
}

// reindexSeed reads --seed: nil for index (the live index), the declared
// backfill source for source:<name>.
func reindexSeed(cfg *config.Config, seed string, clientSeed bool) (*backfill.Source, error) {
	name, ok := strings.CutPrefix(seed, "source:")
	switch {
	case seed == "index":
		return nil, nil
	case !ok || name == "":
		return nil, fmt.Errorf("reindex: --seed %q: want index or source:<name> (a backfill source of the configuration)", seed)
	case clientSeed:
		return nil, errors.New("reindex: --client-seed copies the live index; it does not go with --seed source:…")
	}
	src, err := cfg.BackfillSource(name)
	if err != nil {
		return nil, fmt.Errorf("reindex: --seed %s: %w", seed, err)
	}
	return &src, nil
}

// reindexDef finds the definition of alias: a definition's own alias, or
// <alias>_<tenant> of a per_tenant definition.
func reindexDef(cfg *config.Config, alias string) (*mapping.Def, string, error) {
	defs, err := loadDefs(cfg)
	if err != nil {
		return nil, "", err
	}
	if d := defs[alias]; d != nil {
		return d, "", nil
	}
	for _, name := range defs.Names() {
		d := defs[name]
		if t, ok := strings.CutPrefix(alias, d.Alias+"_"); ok && d.Tenancy.Mode == mapping.TenancyPerTenant && t != "" {
			return d, t, nil
		}
	}
	return nil, "", fmt.Errorf("reindex: no index definition for %q (known: %s)", alias, strings.Join(defs.Names(), ", "))
}

// searchRoutes is the route filter of the search consumers that write
// alias: the events the live index received. nil (every event a projection
// matches) when no search consumer names the alias.
func searchRoutes(cfg *config.Config, alias string) func(eventType, aggregateType string) bool {
	names := searchConsumers(cfg, alias)
	if len(names) == 0 {
		return nil
	}
	table := cfg.Routing()
	return func(et, at string) bool {
		return slices.ContainsFunc(names, func(n string) bool { return table.Routed(n, et, at) })
	}
}

// searchConsumers names the search consumers that write alias, in the
// configuration's order.
func searchConsumers(cfg *config.Config, alias string) []string {
	var names []string
	for _, c := range cfg.Consumers {
		if c.Type == "search" && c.Search != nil && slices.Contains(c.Search.Indexes, alias) {
			names = append(names, c.Name)
		}
	}
	return names
}

func progressLine(p reindex.Progress) string {
	if p.Waiting != "" {
		return p.Phase + ": waiting for the engine: " + p.Waiting
	}
	if p.Phase == reindex.PhaseVerify && p.Owed > 0 {
		return fmt.Sprintf("verify: waiting for the live consumers to deliver %d events the replay wrote", p.Owed)
	}
	switch p.Phase {
	case reindex.PhaseSeed:
		if p.SeedKey != nil {
			return fmt.Sprintf("seed: %d documents written from the source, up to key %s (%.0f docs/s, ETA %s)", p.DocsSeeded, *p.SeedKey, p.Rate, orDash(p.ETA))
		}
		return fmt.Sprintf("seed: %d documents copied (%.0f docs/s, ETA %s)", p.DocsSeeded, p.Rate, orDash(p.ETA))
	case reindex.PhaseReplay:
		return fmt.Sprintf("replay: id %d of %d, %d events, %d documents written (%.0f docs/s, ETA %s)", p.LastID, p.Watermark, p.EventsReplayed, p.DocsWritten, p.Rate, orDash(p.ETA))
	default:
		return p.Phase + "…"
	}
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}

func printPlan(p *reindex.Plan) {
	fmt.Printf("alias:            %s\n", p.Alias)
	fmt.Printf("live index:       %s (hash %s)\n", p.Source, shortHash(p.SourceHash))
	fmt.Printf("new index:        %s (hash %s)\n", p.Target, shortHash(p.Hash))
	if p.UpToDate {
		fmt.Println("definition:       unchanged, projections unchanged (a reindex needs --force)")
	}
	if len(p.MappingChanges) > 0 {
		fmt.Printf("mapping changes:  %s\n", strings.Join(p.MappingChanges, ", "))
	}
	if len(p.SettingChanges) > 0 {
		fmt.Printf("setting changes:  %s\n", strings.Join(p.SettingChanges, ", "))
	}
	for _, c := range p.ProjectionChanges {
		fmt.Printf("projections:      %s\n", c)
	}
	if len(p.ProjectionChanges) > 0 && !strings.HasPrefix(p.Seed, "source:") {
		fmt.Println("                  (seeded from the live index, a document keeps its stored shape until an event newer than it;" +
			" --seed source:<name> projects every document anew: docs/reindex.md)")
	}
	if src, ok := strings.CutPrefix(p.Seed, "source:"); ok {
		fmt.Printf("documents to seed: %d (rows of the backfill source %s; the live index is not copied)\n", p.DocsToSeed, src)
	} else {
		fmt.Printf("documents to seed: %d (from %s, tombstones included)\n", p.DocsToSeed, p.Source)
	}
	fmt.Printf("events to replay:  %d (ids %d–%d)\n", p.EventsToReplay, p.FirstEventID, p.LastEventID)
	if p.Running != nil {
		fmt.Printf("running job:      %d (owner %s, phase %s, last id %d): it would be resumed once its heartbeat is stale\n",
			p.Running.ID, p.Running.Owner, p.Running.Progress.Phase, p.Running.Progress.LastID)
	}
}

func shortHash(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// ReindexAbortCmd is `searchsync reindex abort <alias>`.
type ReindexAbortCmd struct {
	Alias string `arg:"" help:"The alias whose running reindex stops."`
}

// Run aborts the running reindex.
func (c *ReindexAbortCmd) Run(ctx context.Context, g *Globals) error {
	e, pool, eng, closeAll, err := g.connectEngine(ctx)
	if err != nil {
		return err
	}
	defer closeAll()
	target, err := reindex.Abort(ctx, pool, eng, c.Alias, e.logger)
	if errors.Is(err, reindex.ErrNoJob) {
		return fmt.Errorf("reindex abort: no reindex of %s is running", c.Alias)
	}
	if err != nil {
		return err
	}
	if target != "" {
		fmt.Printf("aborted the reindex of %s and deleted %s; the alias is untouched\n", c.Alias, target)
	} else {
		fmt.Printf("aborted the reindex of %s; the alias is untouched\n", c.Alias)
	}
	return nil
}

// ReindexCleanupCmd is `searchsync reindex cleanup`.
type ReindexCleanupCmd struct{}

// Run deletes expired old indexes.
func (c *ReindexCleanupCmd) Run(ctx context.Context, g *Globals) error {
	e, pool, eng, closeAll, err := g.connectEngine(ctx)
	if err != nil {
		return err
	}
	defer closeAll()
	done, err := reindex.Cleanup(ctx, pool, eng, time.Now(), e.logger)
	for _, x := range done {
		fmt.Printf("deleted %s (old index of %s, kept until %s)\n", x.Index, x.Alias, x.DeleteAfter.Format(time.RFC3339))
	}
	if err == nil && len(done) == 0 {
		fmt.Println("no old index is due for deletion")
	}
	return err
}

// ReindexStatusCmd is `searchsync reindex status [alias]`.
type ReindexStatusCmd struct {
	Alias string `arg:"" optional:"" help:"Only this alias."`
	JSON  bool   `help:"Print JSON."`
}

// Run lists reindex jobs.
func (c *ReindexStatusCmd) Run(ctx context.Context, g *Globals) error {
	_, pool, err := g.connect(ctx, config.Secrets())
	if err != nil {
		return err
	}
	defer pool.Close()
	jobs, err := reindex.List(ctx, pool, reindex.Filter{Alias: c.Alias})
	if err != nil {
		return err
	}
	if c.JSON {
		return printJSON(jobs)
	}
	if len(jobs) == 0 {
		fmt.Println("no reindex jobs")
		return nil
	}
	for _, j := range jobs {
		fmt.Printf("job %d  %-10s %-9s %s → %s  phase %s  last id %d/%d  seeded %d  replayed %d  started %s  heartbeat %s ago\n",
			j.ID, j.Alias, j.State, j.Params.Source, j.Params.Target, j.Progress.Phase, j.Progress.LastID, j.Progress.Watermark,
			j.Progress.DocsSeeded, j.Progress.EventsReplayed, j.StartedAt.Format(time.RFC3339), j.HeartbeatAge.Round(time.Second))
		if j.State == "running" && j.Progress.Waiting != "" {
			fmt.Printf("        waiting: %s\n", j.Progress.Waiting)
		}
		if j.Error != "" {
			fmt.Printf("        error: %s\n", firstLine(j.Error))
		}
	}
	return nil
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " …"
	}
	return s
}
