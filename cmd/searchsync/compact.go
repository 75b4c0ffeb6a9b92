package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/searchsync/searchsync/compaction"
	"github.com/searchsync/searchsync/internal/config"
)

// CompactCmd runs the outbox_compact job once, now.
type CompactCmd struct {
	DryRun    bool          `help:"Show what would be deleted; change nothing."`
	JSON      bool          `help:"Print JSON."`
	Retention time.Duration `help:"Override compaction.retention for this run (e.g. 240h)."`
	BatchSize int           `help:"Override compaction.batch_size for this run."`
}

// Run compacts the outbox: dispatched events older than the retention are
// deleted in batches and the run is recorded in aa_job. It fails when another
// run holds the job.
func (c *CompactCmd) Run(ctx context.Context, g *Globals) error {
	e, pool, err := g.connect(ctx, config.Secrets())
	if err != nil {
		return err
	}
	defer pool.Close()
	cc := compactionConfig(e)
	if c.Retention > 0 {
		cc.Retention = c.Retention
	}
	if c.BatchSize > 0 {
		cc.BatchSize = c.BatchSize
	}
	comp, err := compaction.New(pool, cc)
	if err != nil {
		return err
	}
	var res *compaction.Result
	if c.DryRun {
		res, err = comp.DryRun(ctx)
	} else {
		res, err = comp.Run(ctx)
	}
	if errors.Is(err, compaction.ErrAlreadyRunning) {
		return fmt.Errorf("compact: %w; try again when it has finished", err)
	}
	if err != nil {
		return err
	}
	if c.JSON {
		return printJSON(res)
	}
	if c.DryRun {
		fmt.Printf("dry run: would delete %d dispatched events (ids %d–%d) dispatched before %s (retention %s) in %d batches of %d\n",
			res.Deleted, res.MinID, res.MaxID, res.Cutoff.Format(time.RFC3339), res.Retention, res.Batches, res.BatchSize)
		return nil
	}
	fmt.Printf("job %d: deleted %d dispatched events dispatched before %s (retention %s) in %d batches of at most %d, in %s\n",
		res.JobID, res.Deleted, res.Cutoff.Format(time.RFC3339), res.Retention, res.Batches, res.BatchSize, res.DurationText)
	for _, id := range res.TookOver {
		fmt.Printf("took over crashed run (job %d), marked failed\n", id)
	}
	return nil
}

// compactionConfig is the compactor's configuration from the file; `run`
// uses it for the scheduler as well.
func compactionConfig(e *env) compaction.Config {
	cc := e.cfg.CompactionConfig()
	cc.Logger = e.logger
	return cc
}
