package reindex

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/searchsync/searchsync/indexer"
)

// Abort stops the running reindex of alias: the job ends aborted (its owner,
// if alive, notices at its next heartbeat and stops), dual writes stop, and
// the new index is deleted once no consumer writes to it. The live alias is
// never touched. It returns the deleted index ("" when none was created).
func Abort(ctx context.Context, db querier, eng indexer.Engine, alias string, log *slog.Logger) (string, error) {
	if log == nil {
		log = slog.Default()
	}
	j, _, err := Running(ctx, db, alias)
	if err != nil {
		return "", err
	}
	ok, err := markAborted(ctx, db, j.ID, "aborted by an operator (searchsync reindex abort)")
	if err != nil {
		return "", err
	}
	if !ok {
		return "", fmt.Errorf("reindex: job %d of %s finished while aborting", j.ID, alias)
	}
	if j.Progress.SeedTask != "" {
		// A seed copy of a dead owner goes on inside the engine: stop it, or
		// it re-creates the deleted target.
		adm, ok := eng.(indexer.Admin)
		if !ok {
			return "", fmt.Errorf("%w: %T", errNoAdmin, eng)
		}
		if err := adm.CancelTask(ctx, j.Progress.SeedTask); err != nil {
			log.Warn("reindex: cancel the seed task", "task", j.Progress.SeedTask, "error", err.Error())
		}
	}
	target := j.Params.Target
	if target == "" {
		return "", nil
	}
	if aliases, err := eng.AliasTargets(ctx, alias); err == nil && slices.Contains(aliases, target) {
		return "", fmt.Errorf("reindex: the alias %s already points to %s (the swap happened); nothing deleted", alias, target)
	}
	dropTarget(ctx, eng, alias, target, log)
	return target, nil
}

// Expired is an old index whose keep time has passed.
type Expired struct {
	JobID       int64
	Alias       string
	Index       string
	DeleteAfter time.Time
	Orphan      bool // the target of an aborted or failed reindex, re-created by a late write
}

const endedTargetsSQL = `
SELECT id, job_key, params->>'target' FROM aa_job j
WHERE job_kind = $1 AND state IN ('aborted', 'failed') AND coalesce(params->>'target', '') <> ''
  AND NOT EXISTS (SELECT 1 FROM aa_job r WHERE r.job_kind = $1 AND r.state IN ('running', 'succeeded')
                  AND r.params->>'target' = j.params->>'target' AND r.job_key = j.job_key)
ORDER BY id DESC LIMIT 100`

func orphanTargets(ctx context.Context, db querier, eng indexer.Engine) ([]Expired, error) {
	rows, err := db.Query(ctx, endedTargetsSQL, JobKind)
	if err != nil {
		return nil, fmt.Errorf("reindex: cleanup: %w", err)
	}
	var cands []Expired
	for rows.Next() {
		var e Expired
		if err := rows.Scan(&e.JobID, &e.Alias, &e.Index); err != nil {
			rows.Close()
			return nil, fmt.Errorf("reindex: cleanup: %w", err)
		}
		e.Orphan = true
		cands = append(cands, e)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reindex: cleanup: %w", err)
	}
	var out []Expired
	for _, e := range cands {
		if info, err := eng.GetIndex(ctx, e.Index); err != nil {
			return nil, fmt.Errorf("reindex: cleanup: look up %s: %w", e.Index, err)
		} else if info != nil {
			out = append(out, e)
		}
	}
	return out, nil
}

const expiredSQL = `
SELECT id, job_key, result FROM aa_job
WHERE job_kind = $1 AND state = 'succeeded' AND result IS NOT NULL
  AND NOT coalesce((result->>'old_deleted')::boolean, false)
  AND (result->>'delete_after')::timestamptz <= $2
ORDER BY id`

// Cleanup deletes the old indexes of finished reindexes whose keep time
// (--keep-old) has passed at now, and records that in each job's result. An
// index an alias still points to is never deleted. `searchsync reindex
// cleanup` and every `searchsync reindex` run call it; a scheduler may too.
func Cleanup(ctx context.Context, db querier, eng indexer.Engine, now time.Time, log *slog.Logger) ([]Expired, error) {
	if log == nil {
		log = slog.Default()
	}
	rows, err := db.Query(ctx, expiredSQL, JobKind, now)
	if err != nil {
		return nil, fmt.Errorf("reindex: cleanup: %w", err)
	}
	var list []Expired
	for rows.Next() {
		var e Expired
		var raw []byte
		if err := rows.Scan(&e.JobID, &e.Alias, &raw); err != nil {
			rows.Close()
			return nil, fmt.Errorf("reindex: cleanup: %w", err)
		}
		var res Result
		if json.Unmarshal(raw, &res) != nil || res.OldIndex == "" {
			continue
		}
		e.Index, e.DeleteAfter = res.OldIndex, res.DeleteAfter
		list = append(list, e)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reindex: cleanup: %w", err)
	}
	// Targets of aborted or failed jobs that a late live write re-created
	// (the engine creates a missing index on the first write to it).
	orphans, err := orphanTargets(ctx, db, eng)
	if err != nil {
		return nil, err
	}
	list = append(list, orphans...)
	var done []Expired
	for _, e := range list {
		if aliases, err := eng.AliasTargets(ctx, e.Alias); err != nil {
			return done, fmt.Errorf("reindex: cleanup: alias %s: %w", e.Alias, err)
		} else if slices.Contains(aliases, e.Index) {
			log.Warn("reindex: cleanup: the alias points to this index; keeping it", "alias", e.Alias, "index", e.Index)
			continue
		} else if err := eng.DeleteIndex(ctx, e.Index); err != nil {
			return done, fmt.Errorf("reindex: cleanup: delete %s: %w", e.Index, err)
		}
		if e.Orphan {
			log.Info("reindex: deleted the target of an ended reindex", "alias", e.Alias, "index", e.Index, "job_id", e.JobID)
			done = append(done, e)
			continue
		}
		if _, err := db.Exec(ctx, `UPDATE aa_job SET result = jsonb_set(result, '{old_deleted}', 'true') WHERE id = $1`, e.JobID); err != nil {
			return done, fmt.Errorf("reindex: cleanup: record job %d: %w", e.JobID, err)
		}
		log.Info("reindex: deleted old index", "alias", e.Alias, "index", e.Index, "kept_until", e.DeleteAfter)
		done = append(done, e)
	}
	return done, nil
}

// JobInfo is one reindex job as `searchsync reindex status` and the
// console (/api/reindex) show it.
type JobInfo struct {
	ID           int64         `json:"id"`
	Alias        string        `json:"alias"`
	State        string        `json:"state"`
	Owner        string        `json:"owner"`
	Params       Params        `json:"params"`
	Progress     Progress      `json:"progress"`
	Result       *Result       `json:"result,omitempty"`
	Error        string        `json:"error,omitempty"`
	StartedAt    time.Time     `json:"started_at"`
	FinishedAt   *time.Time    `json:"finished_at,omitempty"`
	HeartbeatAge time.Duration `json:"heartbeat_age"`
	// OutboxHead is the outbox's highest id when the jobs were read: where
	// a replay has to get to (0 when the outbox is empty).
	OutboxHead int64 `json:"outbox_head"`
}

// Filter selects the jobs List returns, newest first.
type Filter struct {
	// Alias selects the jobs of one alias ("": of every alias).
	Alias string
	// Since keeps the running jobs and those that ended at or after it
	// (zero: every job).
	Since time.Time
	// PerAlias keeps at most this many jobs of each alias (0: no limit).
	PerAlias int
	// Limit is the most jobs returned. Default 20.
	Limit int
}

// listSQL reads the jobs and the outbox head in one statement; the window
// runs over the reindex rows of aa_job only (a few per alias and day).
const listSQL = `
SELECT id, job_key, state, coalesce(owner, ''), params, progress, result, coalesce(error, ''), started_at, finished_at,
       extract(epoch FROM now() - heartbeat_at), (SELECT coalesce(max(id), 0) FROM aa_outbox_event)
FROM (SELECT *, row_number() OVER (PARTITION BY job_key ORDER BY id DESC) AS nth FROM aa_job
      WHERE job_kind = $1 AND ($2 = '' OR job_key = $2)
        AND (state = 'running' OR coalesce(finished_at, heartbeat_at) >= $4)) j
WHERE $5 = 0 OR nth <= $5
ORDER BY id DESC LIMIT $3`

// List returns the latest reindex jobs that f selects, in one statement.
func List(ctx context.Context, db querier, f Filter) ([]JobInfo, error) {
	rows, err := db.Query(ctx, listSQL, JobKind, f.Alias, cmp.Or(f.Limit, 20), f.Since, f.PerAlias)
	if err != nil {
		return nil, fmt.Errorf("reindex: list jobs: %w", err)
	}
	defer rows.Close()
	var out []JobInfo
	for rows.Next() {
		var j JobInfo
		var p, g, r []byte
		var age float64
		if err := rows.Scan(&j.ID, &j.Alias, &j.State, &j.Owner, &p, &g, &r, &j.Error, &j.StartedAt, &j.FinishedAt, &age, &j.OutboxHead); err != nil {
			return nil, fmt.Errorf("reindex: list jobs: %w", err)
		}
		_ = json.Unmarshal(p, &j.Params)
		_ = json.Unmarshal(g, &j.Progress)
		if r != nil {
			j.Result = &Result{}
			_ = json.Unmarshal(r, j.Result)
		}
		j.HeartbeatAge = time.Duration(age * float64(time.Second))
		out = append(out, j)
	}
	return out, rows.Err()
}
