package backfill

import (
	"context"
	"time"
)

// Plan is what a backfill would do, as `searchsync backfill <source>
// --dry-run` prints it: nothing is written.
type Plan struct {
	Source Source `json:"source"`
	// Rows is how many rows the source yields now: the events a new
	// backfill would write.
	Rows int64 `json:"rows"`
	// Sample is the first rows' events, as they would be written.
	Sample []Row `json:"sample"`
	// Resume is the interrupted job the backfill would resume (its
	// progress says from where), or nil when it would start anew.
	Resume *JobInfo `json:"resume,omitempty"`
}

// DryRun checks the source against the database and reads its count and
// its first sample rows (checked as the backfill would: a bad row is an
// error naming its key).
func DryRun(ctx context.Context, db querier, src Source, sample int, staleAfter time.Duration) (*Plan, error) {
	rd, err := Open(ctx, db, src)
	if err != nil {
		return nil, err
	}
	n, err := rd.Count(ctx, db)
	if err != nil {
		return nil, err
	}
	rows, err := rd.Read(ctx, db, "", true, max(sample, 1))
	if err != nil {
		return nil, err
	}
	if sample < 1 {
		rows = nil
	}
	p := &Plan{Source: rd.src, Rows: n, Sample: rows}
	jobs, err := List(ctx, db, rd.src.Name, 1, staleAfter)
	if err != nil {
		return nil, err
	}
	if len(jobs) == 1 && (jobs[0].State == StateInterrupted || jobs[0].State == StateRunning) {
		p.Resume = &jobs[0]
	}
	return p, nil
}
