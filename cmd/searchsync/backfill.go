package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/searchsync/searchsync/backfill"
	"github.com/searchsync/searchsync/internal/config"
	"github.com/searchsync/searchsync/projections"
	"github.com/searchsync/searchsync/projections/dryrun"
)

// BackfillCmd writes snapshot events of existing data from a declared
// source (docs/backfill.md).
type BackfillCmd struct {
	Start  BackfillStartCmd  `cmd:"" default:"withargs" help:"Backfill <source> into the outbox as snapshot events (the default: searchsync backfill <source>); resumes an interrupted one."`
	Status BackfillStatusCmd `cmd:"" help:"Show the backfill jobs of <source> (all sources when omitted)."`
	Abort  BackfillAbortCmd  `cmd:"" help:"Stop the backfill of <source>; the events written stay, the next backfill starts anew."`
}

// BackfillStartCmd is `searchsync backfill <source>`.
type BackfillStartCmd struct {
	Source     string        `arg:"" help:"The backfill source (backfill.sources[].name)."`
	DryRun     bool          `help:"Check the source, count its rows and print a sample of the events it would write; write nothing."`
	Sample     int           `default:"3" help:"Events shown by --dry-run."`
	StaleAfter time.Duration `default:"15s" help:"A running backfill whose heartbeat is older than this is taken over (after a crash)."`
	JSON       bool          `help:"Print the plan or result as JSON."`
}

// Run performs, resumes or plans the backfill.
func (c *BackfillStartCmd) Run(ctx context.Context, g *Globals) error {
	e, pool, err := g.connect(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	src, err := e.cfg.BackfillSource(c.Source)
	if err != nil {
		return err
	}
	if c.DryRun {
		plan, err := backfill.DryRun(ctx, pool, src, c.Sample, c.StaleAfter)
		if err != nil {
			return err
		}
		if c.JSON {
			return printJSON(plan)
		}
		dr, err := dryRunner(e.cfg)
		if err != nil {
			return err
		}
		printBackfillPlan(ctx, e.cfg, plan, dr)
		return nil
	}
	var last time.Time
	res, err := backfill.Run(ctx, backfill.Config{
		Pool: pool, Schema: e.cfg.Database.Schema, Source: src, StaleAfter: c.StaleAfter, Logger: e.logger,
		OnProgress: func(p backfill.Progress) {
			if time.Since(last) < 2*time.Second && p.Phase != backfill.PhaseDone {
				return
			}
			last = time.Now()
			fmt.Fprintln(os.Stderr, backfillLine(src.Name, p))
		},
	})
	switch {
	case errors.Is(err, context.Canceled):
		fmt.Fprintf(os.Stderr, "backfill %s: interrupted; every chunk before is written: run `searchsync backfill %s` to resume\n", src.Name, src.Name)
		return err
	case errors.Is(err, backfill.ErrLost):
		return fmt.Errorf("backfill %s: stopped: the job was aborted or taken over by another process", src.Name)
	case err != nil:
		return fmt.Errorf("%w\n(every chunk before is written; fix the cause and run `searchsync backfill %s` to resume)", err, src.Name)
	}
	if c.JSON {
		return printJSON(res)
	}
	fmt.Printf("backfilled %s: %d rows as snapshot events in %d chunks, %.1fs\n", src.Name, res.Rows, res.Chunks, res.Seconds)
	return nil
}

// backfillLine is one progress line on stderr.
func backfillLine(name string, p backfill.Progress) string {
	pct := ""
	if p.Total > 0 {
		pct = fmt.Sprintf(" (%.0f%%)", 100*float64(min(p.Rows, p.Total))/float64(p.Total))
	}
	s := fmt.Sprintf("backfill %s: %s  %d/%d rows%s  %.0f rows/s", name, p.Phase, p.Rows, p.Total, pct, p.Rate)
	if p.ETA != "" {
		s += "  ETA " + p.ETA
	}
	if p.Waiting != "" {
		s += "  waiting: " + p.Waiting
	}
	return s
}

// sampleText is what a search consumer would write for a sample event,
// from the projection dry run (the one the console and `projections test`
// show): the projection, whether it is full state, the document.
func sampleText(cr *dryrun.ConsumerReport) string {
	res := cr.Result
	switch {
	case cr.Error != nil:
		return "poison: " + cr.Error.Message
	case cr.Skipped != "":
		return cr.Skipped
	case res == nil:
		return "no document"
	case res.Op != projections.OpIndex:
		return fmt.Sprintf("projection %s: %s, not a document (check delete_on and ignore_on)", res.Projection, res.Op)
	}
	doc, _ := json.Marshal(res.Doc)
	if res.Partial {
		return fmt.Sprintf("projection %s → %s/%s v%d PARTIAL (add \"*.snapshot\" to the projection's full_state_on): %s", res.Projection, res.Index, res.ID, res.Version, doc)
	}
	return fmt.Sprintf("projection %s → %s/%s v%d full state: %s", res.Projection, res.Index, res.ID, res.Version, doc)
}

func printBackfillPlan(ctx context.Context, cfg *config.Config, p *backfill.Plan, dr *dryrun.Runner) {
	s := p.Source
	fmt.Printf("backfill %s (dry run: nothing written)\n", s.Name)
	fmt.Printf("  rows now:     %d (one snapshot event each)\n", p.Rows)
	fmt.Printf("  key:          %s, chunks of %d, rate %s, max_backlog %d\n", s.Key, s.ChunkSize, rateText(s.Rate), s.MaxBacklog)
	if p.Resume != nil {
		fmt.Printf("  resumes:      job %d (%s) after key %s, %d rows done\n", p.Resume.ID, p.Resume.State, p.Resume.Progress.LastKey, p.Resume.Progress.Rows)
	}
	routes := cfg.Routing()
	for i, r := range p.Sample {
		ev := r.Event
		to := routes.To(ev.EventType, ev.AggregateType)
		fmt.Printf("\nsample %d: key %s  %s  %s/%s  schema_version %d  → consumers %v\n", i+1, r.Key, ev.EventType, ev.AggregateType, ev.AggregateID, ev.SchemaVersion, to)
		if ev.TenantID != nil {
			fmt.Printf("  tenant_id %s\n", ev.TenantID)
		}
		fmt.Printf("  payload %s\n", ev.Payload)
		for _, cr := range dr.Run(ctx, &ev).Consumers {
			fmt.Printf("  %s: %s\n", cr.Consumer, sampleText(&cr))
		}
		if len(to) == 0 {
			fmt.Println("  (no route takes this event: it would be skipped)")
		}
	}
}

func rateText(r float64) string {
	if r <= 0 {
		return "unbounded"
	}
	return fmt.Sprintf("%g rows/s", r)
}

// BackfillStatusCmd is `searchsync backfill status [<source>]`.
type BackfillStatusCmd struct {
	Source     string        `arg:"" optional:"" help:"The source (all when omitted)."`
	Limit      int           `default:"20" help:"Jobs shown, newest first."`
	StaleAfter time.Duration `default:"15s" help:"A running job whose heartbeat is older than this shows as interrupted."`
	JSON       bool          `help:"Print the jobs as JSON."`
}

// Run prints the jobs.
func (c *BackfillStatusCmd) Run(ctx context.Context, g *Globals) error {
	_, pool, err := g.connect(ctx, config.Secrets())
	if err != nil {
		return err
	}
	defer pool.Close()
	jobs, err := backfill.List(ctx, pool, c.Source, c.Limit, c.StaleAfter)
	if err != nil {
		return err
	}
	if c.JSON {
		return printJSON(jobs)
	}
	if len(jobs) == 0 {
		fmt.Println("no backfill jobs")
		return nil
	}
	for _, j := range jobs {
		fmt.Printf("job %d  %-12s %-11s %s  started %s  heartbeat %s ago\n", j.ID, j.Source, j.State,
			backfillLine(j.Source, j.Progress), j.StartedAt.Format(time.RFC3339), j.HeartbeatAge.Round(time.Second))
		if j.Progress.Error != "" && j.State == backfill.StateInterrupted {
			fmt.Printf("        interrupted by: %s\n", firstLine(j.Progress.Error))
		}
		if j.Error != "" {
			fmt.Printf("        %s\n", firstLine(j.Error))
		}
	}
	return nil
}

// BackfillAbortCmd is `searchsync backfill abort <source>`.
type BackfillAbortCmd struct {
	Source string `arg:"" help:"The source whose backfill stops."`
}

// Run aborts the job.
func (c *BackfillAbortCmd) Run(ctx context.Context, g *Globals) error {
	_, pool, err := g.connect(ctx, config.Secrets())
	if err != nil {
		return err
	}
	defer pool.Close()
	id, err := backfill.Abort(ctx, pool, c.Source, "aborted by `searchsync backfill abort`")
	if errors.Is(err, backfill.ErrNoJob) {
		return fmt.Errorf("backfill abort: no backfill of %s is running or interrupted", c.Source)
	}
	if err != nil {
		return err
	}
	fmt.Printf("aborted backfill job %d of %s; the events it wrote stay in the outbox\n", id, c.Source)
	return nil
}
