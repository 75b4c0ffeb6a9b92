package reindex

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/searchsync/searchsync/internal/jobrow"
)

// JobKind is aa_job.job_kind of a reindex; job_key is the alias.
const JobKind = "reindex"

// Phases of a reindex, recorded in aa_job.progress.phase.
const (
	PhaseCreate  = "create"  // the target index is being created
	PhaseSeed    = "seed"    // documents are copied from the live index (or read from a backfill source)
	PhaseReplay  = "replay"  // the outbox is replayed into the target
	PhaseVerify  = "verify"  // the completeness check runs
	PhaseSwap    = "swap"    // the alias moves
	PhaseDone    = "done"    // finished
	PhaseAborted = "aborted" // aborted by an operator
)

// Params are what a reindex decided at its start (aa_job.params). A resumed
// run keeps them.
type Params struct {
	Alias      string `json:"alias"`
	Source     string `json:"source"`      // the live physical index at the start
	SourceHash string `json:"source_hash"` // its definition hash
	Target     string `json:"target"`      // the new physical index
	Hash       string `json:"hash"`        // the current definition's hash
	KeepOld    string `json:"keep_old"`    // how long the old index is kept after the swap
	// DualWrite is set once the target exists: from then on the search
	// consumer writes every op to the target too (see Targets).
	DualWrite bool `json:"dual_write"`
	// Seed is where the seed reads: "" for the live index, "source:<name>"
	// for a backfill source (Config.SeedSource). A resumed run must seed
	// the same way.
	Seed string `json:"seed,omitempty"`
	// ProjectionsHash is the fingerprint of the projections the job
	// replays with (projections.Set.Fingerprint), recorded in the target's
	// _meta; a resumed run must have the same ("" in jobs of an earlier
	// release: not checked).
	ProjectionsHash string `json:"projections_hash,omitempty"`
}

// Progress is where a reindex stands (aa_job.progress), written with every
// heartbeat; a resumed run continues from it.
type Progress struct {
	Phase      string `json:"phase"`
	DocsSeeded int64  `json:"docs_seeded"`
	// DocsTotal is what the seed copies: the live index's documents, as
	// the copy counts them (0 until the engine has told).
	DocsTotal int64  `json:"docs_total,omitempty"`
	SeedDone  bool   `json:"seed_done"`
	SeedTask  string `json:"seed_task,omitempty"` // the engine's _reindex task while seeding
	// SeedKey is, when seeding from a backfill source, the key of the last
	// source row whose document is written (with every row before it): a
	// resumed seed reads after it. Nil before the first chunk.
	SeedKey *string `json:"seed_key,omitempty"`
	// SeedLeftOut counts the source rows read that gave no document of
	// this alias (another index or tenant, an ignored event type); the
	// completeness check subtracts them from the source's rows.
	SeedLeftOut int64 `json:"seed_left_out,omitempty"`
	// TombstonesDropped counts the tombstones of the live index not
	// copied (or deleted after the replay) because their events were all
	// compacted.
	TombstonesDropped int64 `json:"tombstones_dropped"`
	// DropTombstones says that the seed may have copied such tombstones
	// (too many to exclude, or an interrupted copy): they are deleted after
	// the replay.
	DropTombstones bool    `json:"drop_tombstones,omitempty"`
	LastID         int64   `json:"last_id"`   // the last outbox id replayed
	Watermark      int64   `json:"watermark"` // the max outbox id of the current pass
	EventsReplayed int64   `json:"events_replayed"`
	DocsWritten    int64   `json:"docs_written"` // replay writes (after coalescing)
	Stale          int64   `json:"stale"`        // writes the target already held (409)
	Poison         int64   `json:"poison"`       // events the projections reject (skipped)
	SeedNewer      int64   `json:"seed_newer"`   // replayed documents not written: the seeded version is newer
	Rate           float64 `json:"rate_per_s"`   // docs/s of the current phase
	// Waiting is why the writes pause while the engine cannot take them
	// (a write block, no answer, not authorized); empty while writing.
	Waiting string `json:"waiting,omitempty"`
	// Owed is, before the check, how many events the replay wrote that the
	// live consumers have not delivered yet.
	Owed      int64     `json:"owed,omitempty"`
	ETA       string    `json:"eta,omitempty"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Result is what a finished reindex records (aa_job.result).
type Result struct {
	OldIndex    string    `json:"old_index"`
	NewIndex    string    `json:"new_index"`
	DeleteAfter time.Time `json:"delete_after"` // when cleanup may delete OldIndex
	OldDeleted  bool      `json:"old_deleted"`
	Verify      *Report   `json:"verify,omitempty"`
	Seconds     float64   `json:"seconds"`
	Timings     Timings   `json:"timings"`
	Progress    Progress  `json:"progress"` // the final figures
}

// Timings are the seconds each phase of this run took.
type Timings struct {
	Wait    float64 `json:"wait_s"`    // until every consumer writes the target too (2×TargetsTTL)
	Seed    float64 `json:"seed_s"`    // refresh of the live index, the look-ups beyond the wait, copy
	Replay  float64 `json:"replay_s"`  // outbox replay (and tombstone deletes, if any)
	Refresh float64 `json:"refresh_s"` // the definition's refresh interval back, target refreshed
	Verify  float64 `json:"verify_s"`  // completeness check
}

// Job is a running reindex row held by this process.
type Job struct {
	ID        int64
	Owner     string
	Params    Params
	Progress  Progress
	Resumed   bool // taken over from an owner whose heartbeat was stale
	StartedAt time.Time
}

// RunningError says that another live process runs a reindex of the alias.
type RunningError struct {
	Alias        string
	JobID        int64
	Owner        string
	HeartbeatAge time.Duration
}

func (e *RunningError) Error() string {
	return fmt.Sprintf("reindex of %s is already running (job %d, owner %s, last heartbeat %s ago); wait for it, or run `searchsync reindex abort %s`",
		e.Alias, e.JobID, e.Owner, e.HeartbeatAge.Round(time.Millisecond), e.Alias)
}

// ErrLost means the job row was taken over or aborted while this process ran
// it; the process must stop without touching anything.
var ErrLost = errors.New("reindex: the job is no longer ours (aborted, or taken over after a stale heartbeat)")

// FailedError says that the job row was ended failed by another party
// than this run: a search consumer whose live write the new index rejected
// (Targets.Rejected). Reason is what the row records.
type FailedError struct {
	JobID  int64
	Reason string
}

func (e *FailedError) Error() string {
	return fmt.Sprintf("reindex: job %d failed: %s", e.JobID, e.Reason)
}

// ErrNoJob means there is no running reindex of the alias.
var ErrNoJob = errors.New("reindex: no running reindex")

// querier is what the job functions need of a pool or a transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// NewOwner returns an owner id for this process: host:pid:random.
func NewOwner() string { return jobrow.NewOwner() }

const (
	rejectSQL = `
UPDATE aa_job SET state = 'failed', error = $4, finished_at = now(), heartbeat_at = now()
WHERE job_kind = $1 AND job_key = $2 AND state = 'running' AND params->>'target' = $3`
	targetsSQL = `
SELECT job_key, params->>'target' FROM aa_job
WHERE job_kind = $1 AND state = 'running' AND (params->>'dual_write')::boolean`
)

// Acquire starts a reindex job for alias, or resumes the running one when
// its owner's heartbeat is older than staleAfter. A running job with a fresh
// heartbeat is a *RunningError. params is used only for a new job.
func Acquire(ctx context.Context, db querier, alias, owner string, params Params, staleAfter time.Duration) (*Job, error) {
	j := &Job{Owner: owner, Params: params, Progress: Progress{Phase: PhaseCreate, UpdatedAt: time.Now()}}
	row, resumed, err := jobrow.Acquire(ctx, db, JobKind, alias, owner, j.Params, j.Progress, staleAfter)
	if err != nil {
		return nil, acquireError(alias, err)
	}
	j.ID, j.StartedAt, j.Resumed = row.ID, row.StartedAt, resumed
	if !resumed {
		return j, nil
	}
	if err := json.Unmarshal(row.Params, &j.Params); err != nil {
		return nil, fmt.Errorf("reindex: job %d: params: %w", j.ID, err)
	}
	if err := json.Unmarshal(row.Progress, &j.Progress); err != nil {
		return nil, fmt.Errorf("reindex: job %d: progress: %w", j.ID, err)
	}
	return j, nil
}

// acquireError words a failure of jobrow.Acquire for alias.
func acquireError(alias string, err error) error {
	var re *jobrow.RunningError
	if errors.As(err, &re) {
		return &RunningError{Alias: alias, JobID: re.JobID, Owner: re.Owner, HeartbeatAge: re.HeartbeatAge}
	}
	var ae *jobrow.AcquireError
	if !errors.As(err, &ae) {
		return fmt.Errorf("reindex: start job for %s: %w", alias, err)
	}
	switch ae.Step {
	case jobrow.StepStart:
		return fmt.Errorf("reindex: start job for %s: %w", alias, ae.Err)
	case jobrow.StepLookUp:
		return fmt.Errorf("reindex: look up running job for %s: %w", alias, ae.Err)
	case jobrow.StepTakeOver:
		return fmt.Errorf("reindex: take over job %d of %s: %w", ae.JobID, alias, ae.Err)
	default:
		return fmt.Errorf("reindex: could not start or resume the job of %s (it changed hands three times)", alias)
	}
}

// Running returns the running reindex of alias, or ErrNoJob.
func Running(ctx context.Context, db querier, alias string) (*Job, time.Duration, error) {
	row, err := jobrow.Running(ctx, db, JobKind, alias)
	if errors.Is(err, jobrow.ErrNotRunning) {
		return nil, 0, ErrNoJob
	}
	if err != nil {
		return nil, 0, fmt.Errorf("reindex: look up running job for %s: %w", alias, err)
	}
	j := &Job{ID: row.ID, Owner: row.Owner, StartedAt: row.StartedAt}
	_ = json.Unmarshal(row.Params, &j.Params)
	_ = json.Unmarshal(row.Progress, &j.Progress)
	return j, row.HeartbeatAge, nil
}

// heartbeat records progress; ErrLost when the row is no longer ours.
func (j *Job) heartbeat(ctx context.Context, db querier) error {
	j.Progress.UpdatedAt = time.Now()
	ok, err := jobrow.SaveProgress(ctx, db, j.ID, j.Owner, j.Progress)
	if err != nil {
		return fmt.Errorf("reindex: heartbeat of job %d: %w", j.ID, err)
	}
	if !ok {
		return ErrLost
	}
	return nil
}

// saveParams records changed params; ErrLost when the row is no longer ours.
func (j *Job) saveParams(ctx context.Context, db querier) error {
	ok, err := jobrow.SaveParams(ctx, db, j.ID, j.Owner, j.Params)
	if err != nil {
		return fmt.Errorf("reindex: record params of job %d: %w", j.ID, err)
	}
	if !ok {
		return ErrLost
	}
	return nil
}

// finish ends the job as succeeded or failed.
func (j *Job) finish(ctx context.Context, db querier, state string, res *Result, cause error) error {
	j.Progress.UpdatedAt = time.Now()
	var result any // nil: no result (NULL)
	if res != nil {
		result = res
	}
	var msg *string
	if cause != nil {
		s := cause.Error()
		msg = &s
	}
	ok, err := jobrow.Finish(ctx, db, j.ID, j.Owner, state, j.Progress, result, msg)
	if err != nil {
		return fmt.Errorf("reindex: finish job %d as %s: %w", j.ID, state, err)
	}
	if !ok {
		return ErrLost
	}
	return nil
}

// state reads the job row's state and error.
func (j *Job) state(ctx context.Context, db querier) (state, msg string, err error) {
	if state, msg, err = jobrow.State(ctx, db, j.ID); err != nil {
		return "", "", fmt.Errorf("reindex: look up job %d: %w", j.ID, err)
	}
	return state, msg, nil
}

// markAborted ends a running job as aborted, whoever owns it.
func markAborted(ctx context.Context, db querier, id int64, reason string) (bool, error) {
	ok, err := jobrow.Abort(ctx, db, id, reason)
	if err != nil {
		return false, fmt.Errorf("reindex: abort job %d: %w", id, err)
	}
	return ok, nil
}

// TargetsTTL is how long Targets caches the running reindex targets. A
// reindex waits 2×TargetsTTL after switching dual writes on before it starts
// replaying, and after switching them off before it deletes an index, so
// that every search consumer has seen the change.
const TargetsTTL = time.Second

// Targets tells the search consumer which extra physical indexes a live op
// of an alias must also be written to: the targets of the running reindexes
// (aa_job rows of kind reindex, state running, params.dual_write). Every
// write is versioned, so live writes and the replay may overlap in any
// order. The answer is cached for TargetsTTL; it is safe for concurrent use.
//
// The consumer calls For once per batch, before it builds its bulk request,
// and writes each op of the alias to the alias and to every target. A
// target that refuses a document for good (its new mapping rejects it) is
// reported with Rejected: the reindex fails, the live event does not. When the
// lookup fails and the cache is older than TargetsTTL, For returns the error
// and the consumer must retry the batch (writing to the alias only could
// leave a reindex target without an event it will never see again).
type Targets struct {
	db  querier
	ttl time.Duration
	now func() time.Time

	mu sync.Mutex
	at time.Time
	m  map[string][]string
}

// NewTargets returns a lookup over db (a pool with search_path set to the
// outbox schema).
func NewTargets(db querier) *Targets {
	return &Targets{db: db, ttl: TargetsTTL, now: time.Now}
}

// For returns the reindex targets of alias (usually none).
func (t *Targets) For(ctx context.Context, alias string) ([]string, error) {
	m, err := t.all(ctx)
	if err != nil {
		return nil, err
	}
	return m[alias], nil
}

func (t *Targets) all(ctx context.Context) (map[string][]string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if t.m != nil && now.Sub(t.at) < t.ttl {
		return t.m, nil
	}
	rows, err := t.db.Query(ctx, targetsSQL, JobKind)
	if err != nil {
		return nil, fmt.Errorf("reindex: look up reindex targets: %w", err)
	}
	m := map[string][]string{}
	for rows.Next() {
		var alias, target *string
		if err := rows.Scan(&alias, &target); err != nil {
			rows.Close()
			return nil, fmt.Errorf("reindex: look up reindex targets: %w", err)
		}
		if alias != nil && target != nil && *target != "" {
			m[*alias] = append(m[*alias], *target)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reindex: look up reindex targets: %w", err)
	}
	t.m, t.at = m, now
	return m, nil
}

// Rejected ends the running reindex of alias whose target is target as
// failed with the engine's reason (the job row's error, which `searchsync
// reindex status` shows); its owner notices at its next heartbeat, stops and
// deletes the target. The cached targets are dropped, so that the next
// batch no longer writes to it. A job already ended is left as it is.
func (t *Targets) Rejected(ctx context.Context, alias, target, reason string) error {
	msg := fmt.Sprintf("the new index %s rejected a live write: %s; fix the definition (or the data) and run `searchsync reindex %s` again", target, reason, alias)
	if _, err := t.db.Exec(ctx, rejectSQL, JobKind, alias, target, msg); err != nil {
		return fmt.Errorf("reindex: fail the reindex of %s: %w", alias, err)
	}
	t.mu.Lock()
	t.m = nil
	t.mu.Unlock()
	return nil
}
