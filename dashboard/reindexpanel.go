package dashboard

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/searchsync/searchsync/reindex"
)

// NewReindexPanel feeds the console's Reindex panel (/api/reindex): the
// aliases as the drift watcher last found them, and the reindex jobs as
// `searchsync reindex status` reads them (reindex.List, one statement).
func NewReindexPanel(pool JobsDB, drift *DriftWatcher) *Reindex {
	return &Reindex{
		Aliases: drift.AliasStates,
		Jobs: func(ctx context.Context, since time.Time) ([]ReindexJob, error) {
			jobs, err := reindex.List(ctx, pool, reindex.Filter{Since: since, PerAlias: 1, Limit: 200})
			if err != nil {
				return nil, err
			}
			out := make([]ReindexJob, 0, len(jobs))
			for _, j := range jobs {
				out = append(out, panelJob(j))
			}
			return out, nil
		},
	}
}

// JobsDB is what reindex.List needs of a pool.
type JobsDB interface {
	DB
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// panelJob is a job as the panel shows it.
func panelJob(j reindex.JobInfo) ReindexJob {
	p := j.Progress
	if j.Result != nil && j.State == "succeeded" {
		p = j.Result.Progress // the final figures
		p.Phase = reindex.PhaseDone
	}
	pj := ReindexJob{ID: j.ID, Alias: j.Alias, State: j.State, Phase: p.Phase, Source: j.Params.Source, Target: j.Params.Target,
		DocsSeeded: p.DocsSeeded, DocsTotal: p.DocsTotal, LastID: p.LastID, Watermark: p.Watermark, OutboxHead: j.OutboxHead,
		EventsReplayed: p.EventsReplayed, DocsWritten: p.DocsWritten, Rate: p.Rate, ETA: p.ETA, Waiting: p.Waiting, Owed: p.Owed,
		StartedAt: j.StartedAt, UpdatedAt: p.UpdatedAt, FinishedAt: j.FinishedAt, HeartbeatAgeSeconds: j.HeartbeatAge.Seconds(),
		Owner: j.Owner, Error: j.Error}
	if j.State != "running" {
		pj.Rate, pj.ETA, pj.Waiting, pj.Owed = 0, "", "", 0
	}
	if j.Result != nil {
		pj.Seconds, pj.NewIndex = j.Result.Seconds, j.Result.NewIndex
	}
	return pj
}
