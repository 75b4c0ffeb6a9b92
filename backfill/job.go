package backfill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/searchsync/searchsync/internal/jobrow"
)

// JobKind is aa_job.job_kind of a backfill; job_key is the source's name.
const JobKind = "backfill"

// Phases of a backfill, in aa_job.progress.phase.
const (
	PhaseCount   = "count"   // counting the source's rows
	PhaseRead    = "read"    // reading chunks and writing their events
	PhaseWait    = "wait"    // paused: the outbox's backlog is above max_backlog
	PhaseDone    = "done"    // every row was read
	PhaseAborted = "aborted" // aborted by an operator
)

// Params are what a backfill decided at its start (aa_job.params); a
// resumed run keeps them.
type Params struct {
	Source Source `json:"source"`
	// Correlation is the correlation_id of every event the backfill
	// writes: `outbox list` finds them by it.
	Correlation uuid.UUID `json:"correlation_id"`
}

// Progress is where a backfill stands (aa_job.progress). It is written in
// the transaction of each chunk's events, so a resumed run starts after the
// last chunk whose events were committed, and reads no chunk twice.
type Progress struct {
	Phase string `json:"phase"`
	// LastKey is the key of the last row of the last committed chunk;
	// Started says that there is one ("" can be a key).
	LastKey string `json:"last_key,omitempty"`
	Started bool   `json:"started"`
	Chunks  int64  `json:"chunks"`
	Rows    int64  `json:"rows"`  // rows read and written as events
	Total   int64  `json:"total"` // rows the source yielded when the job started
	// Rate is rows per second of this run (not counting earlier runs of
	// the job); ETA is what remains of Total at that rate.
	Rate float64 `json:"rate_per_s"`
	ETA  string  `json:"eta,omitempty"`
	// Waiting is why the backfill pauses (the outbox backlog, a lost
	// database); "" while it reads.
	Waiting string `json:"waiting,omitempty"`
	// Error is what interrupted the last run; the next run resumes.
	Error     string    `json:"error,omitempty"`
	UpdatedAt time.Time `json:"updated_at"`
}

// States of a backfill job as List reports them.
const (
	StateRunning     = "running"     // its owner's heartbeat is fresh
	StateInterrupted = "interrupted" // stopped or killed mid-way: `searchsync backfill <source>` resumes it
	StateSucceeded   = "succeeded"
	StateAborted     = "aborted"
)

// RunningError says that another live process runs a backfill of the
// source.
type RunningError struct {
	Source       string
	JobID        int64
	Owner        string
	HeartbeatAge time.Duration
}

func (e *RunningError) Error() string {
	return fmt.Sprintf("a backfill of %s is already running (job %d, owner %s, last heartbeat %s ago); wait for it, or run `searchsync backfill abort %s`",
		e.Source, e.JobID, e.Owner, e.HeartbeatAge.Round(time.Millisecond), e.Source)
}

// ErrLost means the job row was aborted or taken over while this process
// ran it; the process stops without writing another chunk.
var ErrLost = errors.New("backfill: the job is no longer ours (aborted, or taken over after a stale heartbeat)")

// ErrNoJob means there is no running or interrupted backfill of the source.
var ErrNoJob = errors.New("backfill: no running or interrupted backfill")

// NewOwner returns an owner id for this process: host:pid:random.
func NewOwner() string { return jobrow.NewOwner() }

const listSQL = `
SELECT id, job_key, state, coalesce(owner, ''), params, progress, coalesce(result, 'null'::jsonb), coalesce(error, ''),
       started_at, finished_at, extract(epoch FROM now() - heartbeat_at)
FROM aa_job WHERE job_kind = 'backfill' AND ($1 = '' OR job_key = $1)
ORDER BY started_at DESC, id DESC LIMIT $2`

// latestSQL is the newest job of every source, newest first.
const latestSQL = `
SELECT * FROM (
  SELECT DISTINCT ON (job_key) id, job_key, state, coalesce(owner, ''), params, progress, coalesce(result, 'null'::jsonb),
         coalesce(error, ''), started_at, finished_at, extract(epoch FROM now() - heartbeat_at)
  FROM aa_job WHERE job_kind = 'backfill'
  ORDER BY job_key, started_at DESC, id DESC) j
ORDER BY started_at DESC, id DESC`

// job is the backfill row this process holds.
type job struct {
	id       int64
	owner    string
	params   Params
	progress Progress
	resumed  bool
}

// acquire starts a backfill job for the source, or takes over the running
// one when its owner released it or its heartbeat is older than staleAfter.
func acquire(ctx context.Context, db querier, name, owner string, params Params, staleAfter time.Duration) (*job, error) {
	j := &job{owner: owner, params: params, progress: Progress{Phase: PhaseCount, UpdatedAt: time.Now()}}
	row, resumed, err := jobrow.Acquire(ctx, db, JobKind, name, owner, j.params, j.progress, staleAfter)
	if err != nil {
		return nil, acquireError(name, err)
	}
	j.id, j.resumed = row.ID, resumed
	if !resumed {
		return j, nil
	}
	if err := json.Unmarshal(row.Params, &j.params); err != nil {
		return nil, fmt.Errorf("backfill: job %d: params: %w", j.id, err)
	}
	if err := json.Unmarshal(row.Progress, &j.progress); err != nil {
		return nil, fmt.Errorf("backfill: job %d: progress: %w", j.id, err)
	}
	return j, nil
}

// acquireError words a failure of jobrow.Acquire for the source.
func acquireError(name string, err error) error {
	var re *jobrow.RunningError
	if errors.As(err, &re) {
		return &RunningError{Source: name, JobID: re.JobID, Owner: re.Owner, HeartbeatAge: re.HeartbeatAge}
	}
	var ae *jobrow.AcquireError
	if !errors.As(err, &ae) {
		return fmt.Errorf("backfill: start job for %s: %w", name, err)
	}
	switch ae.Step {
	case jobrow.StepStart:
		return fmt.Errorf("backfill: start job for %s: %w", name, ae.Err)
	case jobrow.StepLookUp:
		return fmt.Errorf("backfill: look up the running job of %s: %w", name, ae.Err)
	case jobrow.StepTakeOver:
		return fmt.Errorf("backfill: take over job %d of %s: %w", ae.JobID, name, ae.Err)
	default:
		return fmt.Errorf("backfill: could not start or resume the job of %s (it changed hands three times)", name)
	}
}

// save records the progress (and the heartbeat) in db, which is the
// chunk's transaction when a chunk was written; ErrLost when the row is no
// longer ours.
func (j *job) save(ctx context.Context, db querier) error {
	j.progress.UpdatedAt = time.Now()
	ok, err := jobrow.SaveProgress(ctx, db, j.id, j.owner, j.progress)
	if err != nil {
		return fmt.Errorf("backfill: record progress of job %d: %w", j.id, err)
	}
	if !ok {
		return ErrLost
	}
	return nil
}

// release hands the job back (interrupted): the next run resumes it at
// once, without waiting for the heartbeat to go stale.
func (j *job) release(ctx context.Context, db querier) error {
	j.progress.UpdatedAt = time.Now()
	if _, err := jobrow.Release(ctx, db, j.id, j.owner, j.progress); err != nil {
		return fmt.Errorf("backfill: release job %d: %w", j.id, err)
	}
	return nil
}

// finish ends the job as succeeded.
func (j *job) finish(ctx context.Context, db querier, res *Result) error {
	j.progress.UpdatedAt = time.Now()
	ok, err := jobrow.Finish(ctx, db, j.id, j.owner, "succeeded", j.progress, res, nil)
	if err != nil {
		return fmt.Errorf("backfill: finish job %d: %w", j.id, err)
	}
	if !ok {
		return ErrLost
	}
	return nil
}

// Abort ends the running (or interrupted) backfill of the source, whoever
// runs it: the runner stops before its next chunk, and what was written
// stays (each chunk's events are whole). It returns the job's id, or
// ErrNoJob.
func Abort(ctx context.Context, db querier, source, reason string) (int64, error) {
	id, err := jobrow.AbortRunning(ctx, db, JobKind, source, reason)
	if errors.Is(err, jobrow.ErrNotRunning) {
		return 0, ErrNoJob
	}
	if err != nil {
		return 0, fmt.Errorf("backfill: abort %s: %w", source, err)
	}
	return id, nil
}

// JobInfo is one backfill job as List reports it.
type JobInfo struct {
	ID           int64         `json:"id"`
	Source       string        `json:"source"`
	State        string        `json:"state"` // running, interrupted, succeeded, aborted
	Owner        string        `json:"owner,omitempty"`
	Params       Params        `json:"params"`
	Progress     Progress      `json:"progress"`
	Result       *Result       `json:"result,omitempty"`
	Error        string        `json:"error,omitempty"`
	StartedAt    time.Time     `json:"started_at"`
	FinishedAt   *time.Time    `json:"finished_at,omitempty"`
	HeartbeatAge time.Duration `json:"heartbeat_age_ns"`
}

// List returns the newest backfill jobs (of source; of every source when
// ""), at most limit, newest first. A running job whose owner released it
// or whose heartbeat is older than staleAfter is reported interrupted.
func List(ctx context.Context, db querier, source string, limit int, staleAfter time.Duration) ([]JobInfo, error) {
	rows, err := db.Query(ctx, listSQL, source, limit)
	return scanJobs(rows, err, staleAfter)
}

// Latest returns the newest job of every source that has one, newest
// first, in one statement; states as List reports them.
func Latest(ctx context.Context, db querier, staleAfter time.Duration) ([]JobInfo, error) {
	rows, err := db.Query(ctx, latestSQL)
	return scanJobs(rows, err, staleAfter)
}

// scanJobs reads the rows of listSQL or latestSQL.
func scanJobs(rows pgx.Rows, err error, staleAfter time.Duration) ([]JobInfo, error) {
	if err != nil {
		return nil, fmt.Errorf("backfill: list jobs: %w", err)
	}
	defer rows.Close()
	var out []JobInfo
	for rows.Next() {
		var (
			ji               JobInfo
			pRaw, gRaw, rRaw []byte
			age              float64
		)
		if err := rows.Scan(&ji.ID, &ji.Source, &ji.State, &ji.Owner, &pRaw, &gRaw, &rRaw, &ji.Error, &ji.StartedAt, &ji.FinishedAt, &age); err != nil {
			return nil, fmt.Errorf("backfill: list jobs: %w", err)
		}
		_ = json.Unmarshal(pRaw, &ji.Params)
		_ = json.Unmarshal(gRaw, &ji.Progress)
		_ = json.Unmarshal(rRaw, &ji.Result)
		ji.HeartbeatAge = time.Duration(age * float64(time.Second))
		if ji.State == "running" && (ji.Owner == "" || ji.HeartbeatAge >= staleAfter) {
			ji.State = StateInterrupted
		}
		out = append(out, ji)
	}
	return out, rows.Err()
}
