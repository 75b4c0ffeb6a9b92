// Package jobrow owns the lifecycle of an aa_job row (migrations/sql/00002_job.sql),
// which backfill and reindex share: start a running job (at most one running
// per job_kind and job_key), else take over the running one when its owner
// released it or its heartbeat is stale; record progress and params with a
// heartbeat, guarded by id, owner and state = 'running' (no row: the job is
// lost); finish, release, abort; read a job's state. Params, progress and
// result are JSON: the caller marshals its own types and unmarshals the raw
// ones returned. It imports only pgx, uuid and the standard library.
package jobrow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Querier is what the row operations need of a pool or a transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// NewOwner returns an owner id for this process: host:pid:random.
func NewOwner() string {
	h, _ := os.Hostname()
	return h + ":" + strconv.Itoa(os.Getpid()) + ":" + uuid.NewString()[:8]
}

const (
	insertSQL = `
INSERT INTO aa_job (job_kind, job_key, owner, params, progress)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT DO NOTHING
RETURNING id, started_at, heartbeat_at`
	runningSQL = `
SELECT id, coalesce(owner, ''), params, progress, started_at, heartbeat_at, extract(epoch FROM now() - heartbeat_at)
FROM aa_job WHERE job_kind = $1 AND job_key = $2 AND state = 'running'`
	takeOverSQL = `
UPDATE aa_job SET owner = $2, heartbeat_at = now()
WHERE id = $1 AND state = 'running' AND heartbeat_at = $3
RETURNING id`
	progressSQL = `
UPDATE aa_job SET heartbeat_at = now(), progress = $3
WHERE id = $1 AND owner = $2 AND state = 'running'`
	paramsSQL = `
UPDATE aa_job SET params = $3, heartbeat_at = now()
WHERE id = $1 AND owner = $2 AND state = 'running'`
	releaseSQL = `
UPDATE aa_job SET owner = NULL, heartbeat_at = 'epoch', progress = $3
WHERE id = $1 AND owner = $2 AND state = 'running'`
	finishSQL = `
UPDATE aa_job SET state = $3, progress = $4, result = $5, error = $6, finished_at = now(), heartbeat_at = now()
WHERE id = $1 AND owner = $2 AND state = 'running'`
	abortSQL = `
UPDATE aa_job SET state = 'aborted', error = $2::text, finished_at = now(),
       progress = jsonb_set(progress, '{phase}', '"aborted"')
WHERE id = $1 AND state = 'running'`
	abortKeySQL = `
UPDATE aa_job SET state = 'aborted', error = $3::text, finished_at = now(),
       progress = jsonb_set(progress, '{phase}', '"aborted"')
WHERE job_kind = $1 AND job_key = $2 AND state = 'running'
RETURNING id`
	stateSQL = `SELECT state, coalesce(error, '') FROM aa_job WHERE id = $1`
)

// Row is a running aa_job row. Params and Progress are the row's JSON as
// read (a taken-over or looked-up row) or as written (a new one).
type Row struct {
	ID    int64
	Owner string // this process's owner (Acquire), the current one (Running); "" when released
	// Params and Progress are the row's JSON.
	Params, Progress json.RawMessage
	StartedAt        time.Time
	HeartbeatAt      time.Time
	HeartbeatAge     time.Duration // at the look-up (Running, a take-over)
}

// ErrNotRunning means there is no running job of the kind and key.
var ErrNotRunning = errors.New("jobrow: no running job")

// RunningError says that another live owner runs the job: its heartbeat is
// younger than staleAfter and it did not release the row.
type RunningError struct {
	JobID        int64
	Owner        string
	HeartbeatAge time.Duration
}

func (e *RunningError) Error() string {
	return fmt.Sprintf("job %d is already running (owner %s, last heartbeat %s ago)", e.JobID, e.Owner, e.HeartbeatAge.Round(time.Millisecond))
}

// Step is the step of Acquire that failed.
type Step int

// Steps of Acquire.
const (
	StepStart     Step = iota // inserting the new row
	StepLookUp                // looking up the running row
	StepTakeOver              // taking over the running row
	StepExhausted             // the row changed hands three times
)

// AcquireError is a failure of Acquire other than a RunningError: the step,
// the job (StepTakeOver) and the database's error (nil for StepExhausted).
// The caller words it.
type AcquireError struct {
	Step  Step
	JobID int64
	Err   error
}

func (e *AcquireError) Error() string {
	switch e.Step {
	case StepStart:
		return fmt.Sprintf("start job: %v", e.Err)
	case StepLookUp:
		return fmt.Sprintf("look up the running job: %v", e.Err)
	case StepTakeOver:
		return fmt.Sprintf("take over job %d: %v", e.JobID, e.Err)
	default:
		return "could not start or resume the job (it changed hands three times)"
	}
}

func (e *AcquireError) Unwrap() error { return e.Err }

// Acquire inserts a running job of kind and key owned by owner with params
// and progress, or takes over the running one when its owner released it or
// its heartbeat is older than staleAfter (resumed: the row's own params and
// progress are returned, to unmarshal). A live running job is a
// *RunningError; any other failure an *AcquireError.
func Acquire(ctx context.Context, db Querier, kind, key, owner string, params, progress any, staleAfter time.Duration) (row *Row, resumed bool, err error) {
	pb, err := json.Marshal(params)
	if err != nil {
		return nil, false, &AcquireError{Step: StepStart, Err: err}
	}
	gb, err := json.Marshal(progress)
	if err != nil {
		return nil, false, &AcquireError{Step: StepStart, Err: err}
	}
	for range 3 {
		r := &Row{Owner: owner, Params: pb, Progress: gb}
		err := db.QueryRow(ctx, insertSQL, kind, key, owner, pb, gb).Scan(&r.ID, &r.StartedAt, &r.HeartbeatAt)
		if err == nil {
			return r, false, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return nil, false, &AcquireError{Step: StepStart, Err: err}
		}
		cur, err := Running(ctx, db, kind, key)
		if errors.Is(err, ErrNotRunning) {
			continue // it ended in between: try again
		}
		if err != nil {
			return nil, false, &AcquireError{Step: StepLookUp, Err: err}
		}
		if cur.Owner != "" && cur.HeartbeatAge < staleAfter {
			return nil, false, &RunningError{JobID: cur.ID, Owner: cur.Owner, HeartbeatAge: cur.HeartbeatAge}
		}
		var id int64
		err = db.QueryRow(ctx, takeOverSQL, cur.ID, owner, cur.HeartbeatAt).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			continue // someone else took it over or it ended: look again
		}
		if err != nil {
			return nil, false, &AcquireError{Step: StepTakeOver, JobID: cur.ID, Err: err}
		}
		cur.Owner = owner
		return cur, true, nil
	}
	return nil, false, &AcquireError{Step: StepExhausted}
}

// Running returns the running job of kind and key (Owner is "" when it was
// released), or ErrNotRunning.
func Running(ctx context.Context, db Querier, kind, key string) (*Row, error) {
	r := &Row{}
	var age float64
	err := db.QueryRow(ctx, runningSQL, kind, key).Scan(&r.ID, &r.Owner, &r.Params, &r.Progress, &r.StartedAt, &r.HeartbeatAt, &age)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotRunning
	}
	if err != nil {
		return nil, err
	}
	r.HeartbeatAge = time.Duration(age * float64(time.Second))
	return r, nil
}

// guarded runs an update guarded by id, owner and state = 'running': ok is
// false when no row matched (the job is no longer owner's).
func guarded(ctx context.Context, db Querier, sql string, id int64, owner string, args ...any) (ok bool, err error) {
	tag, err := db.Exec(ctx, sql, append([]any{id, owner}, args...)...)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() > 0, nil
}

// SaveProgress records progress and the heartbeat in db (a pool, or the
// transaction of the work the progress describes); ok is false when the
// row is no longer owner's (aborted, ended, taken over).
func SaveProgress(ctx context.Context, db Querier, id int64, owner string, progress any) (ok bool, err error) {
	b, err := json.Marshal(progress)
	if err != nil {
		return false, err
	}
	return guarded(ctx, db, progressSQL, id, owner, b)
}

// SaveParams records changed params and the heartbeat; ok is false when
// the row is no longer owner's.
func SaveParams(ctx context.Context, db Querier, id int64, owner string, params any) (ok bool, err error) {
	b, err := json.Marshal(params)
	if err != nil {
		return false, err
	}
	return guarded(ctx, db, paramsSQL, id, owner, b)
}

// Release hands the running job back with its progress: the owner is
// cleared and the heartbeat made stale, so that the next Acquire takes it
// over at once. ok is false when the row is no longer owner's.
func Release(ctx context.Context, db Querier, id int64, owner string, progress any) (ok bool, err error) {
	b, err := json.Marshal(progress)
	if err != nil {
		return false, err
	}
	return guarded(ctx, db, releaseSQL, id, owner, b)
}

// Finish ends the running job as state (succeeded, failed) with its final
// progress, result (nil: SQL NULL) and error message (nil: NULL); ok is
// false when the row is no longer owner's.
func Finish(ctx context.Context, db Querier, id int64, owner, state string, progress, result any, errMsg *string) (ok bool, err error) {
	gb, err := json.Marshal(progress)
	if err != nil {
		return false, err
	}
	var rb []byte
	if result != nil {
		if rb, err = json.Marshal(result); err != nil {
			return false, err
		}
	}
	return guarded(ctx, db, finishSQL, id, owner, state, gb, rb, errMsg)
}

// Abort ends the running job id as aborted with reason, whoever owns it
// (its progress phase becomes "aborted"); ok is false when it is not
// running.
func Abort(ctx context.Context, db Querier, id int64, reason string) (ok bool, err error) {
	tag, err := db.Exec(ctx, abortSQL, id, reason)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}

// AbortRunning is Abort of the running job of kind and key; it returns the
// job's id, or ErrNotRunning.
func AbortRunning(ctx context.Context, db Querier, kind, key, reason string) (int64, error) {
	var id int64
	err := db.QueryRow(ctx, abortKeySQL, kind, key, reason).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, ErrNotRunning
	}
	return id, err
}

// State reads the state and error ("" when none) of job id.
func State(ctx context.Context, db Querier, id int64) (state, msg string, err error) {
	err = db.QueryRow(ctx, stateSQL, id).Scan(&state, &msg)
	return state, msg, err
}
