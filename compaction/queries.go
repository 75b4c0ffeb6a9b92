package compaction

import (
	"strings"

	"github.com/jackc/pgx/v5"
)

// abandonStaleSQL fails a running compaction whose owner stopped
// heartbeating (crashed, killed) so that a new run can take over.
// $1 job_kind, $2 stale after (seconds), $3 the new owner.
const abandonStaleSQL = `
UPDATE {schema}.aa_job
SET state = 'failed', finished_at = now(),
    error = format('abandoned: no heartbeat since %s (owner %s); taken over by %s', heartbeat_at, coalesce(owner, '?'), $3::text)
WHERE job_kind = $1 AND job_key IS NULL AND state = 'running'
  AND heartbeat_at < now() - make_interval(secs => $2)
RETURNING id`

// startJobSQL records a new running job; the unique index on running
// (job_kind, job_key) makes it return nothing when one already runs.
// $1 job_kind, $2 owner, $3 params.
const startJobSQL = `
INSERT INTO {schema}.aa_job (job_kind, owner, params)
VALUES ($1, $2, $3)
ON CONFLICT DO NOTHING
RETURNING id`

// runningJobSQL reads the job that holds the slot. $1 job_kind.
const runningJobSQL = `
SELECT id, coalesce(owner, ''), started_at, heartbeat_at
FROM {schema}.aa_job
WHERE job_kind = $1 AND job_key IS NULL AND state = 'running'`

// cutoffSQL is the database's now() minus the retention (seconds), so that
// clocks of the relay hosts do not matter.
const cutoffSQL = `SELECT now() - make_interval(secs => $1)`

// deleteBatchSQL deletes the next batch of old dispatched events after id $1
// (keyset over the primary key: the whole run reads the table once).
// $2 cutoff, $3 batch size. It returns how many rows it deleted and the
// largest id among them. The ids go through an array so that the DELETE
// finds its rows by the primary key (a join with the selection made the
// planner hash the whole table for every batch: ten times slower).
const deleteBatchSQL = `
WITH deleted AS (
    DELETE FROM {schema}.aa_outbox_event
    WHERE id = ANY (ARRAY(
        SELECT id FROM {schema}.aa_outbox_event
        WHERE id > $1 AND status = 'dispatched' AND dispatched_at < $2
        ORDER BY id
        LIMIT $3
        FOR UPDATE SKIP LOCKED))
    RETURNING id
)
SELECT count(*), coalesce(max(id), 0) FROM deleted`

// deleteOvertakenSQL deletes the records of events delivered out of order
// (aa_outbox_overtaken) older than the cutoff $1: few rows, one statement.
const deleteOvertakenSQL = `DELETE FROM {schema}.aa_outbox_overtaken WHERE detected_at < $1`

// heartbeatSQL records progress inside the batch's transaction; no row means
// the job is no longer ours (it was declared stale and taken over), and the
// batch is rolled back. $1 job id, $2 progress.
const heartbeatSQL = `
UPDATE {schema}.aa_job SET heartbeat_at = now(), progress = $2
WHERE id = $1 AND state = 'running'`

// touchSQL is the heartbeat between batches. $1 job id.
const touchSQL = `UPDATE {schema}.aa_job SET heartbeat_at = now() WHERE id = $1 AND state = 'running'`

// finishJobSQL closes the job. $1 id, $2 state, $3 result, $4 error.
const finishJobSQL = `
UPDATE {schema}.aa_job
SET state = $2, result = $3, error = $4, finished_at = now(), heartbeat_at = now()
WHERE id = $1 AND state = 'running'`

// countSQL is the dry run: what a run would delete. $1 cutoff.
const countSQL = `
SELECT count(*), coalesce(min(id), 0), coalesce(max(id), 0)
FROM {schema}.aa_outbox_event
WHERE status = 'dispatched' AND dispatched_at < $1`

// recentRunSQL tells the scheduler whether any instance ran compaction
// within the last interval (seconds $2). $1 job_kind.
const recentRunSQL = `
SELECT EXISTS (
    SELECT 1 FROM {schema}.aa_job
    WHERE job_kind = $1 AND state = 'succeeded'
      AND started_at > now() - make_interval(secs => $2))`

type queries struct {
	abandonStale, startJob, runningJob, cutoff, deleteBatch, heartbeat, touch, finishJob, count, recentRun string
	deleteOvertaken                                                                                        string
}

func newQueries(schema string) queries {
	r := strings.NewReplacer("{schema}", pgx.Identifier{schema}.Sanitize())
	return queries{
		abandonStale:    r.Replace(abandonStaleSQL),
		startJob:        r.Replace(startJobSQL),
		runningJob:      r.Replace(runningJobSQL),
		cutoff:          cutoffSQL,
		deleteBatch:     r.Replace(deleteBatchSQL),
		deleteOvertaken: r.Replace(deleteOvertakenSQL),
		heartbeat:       r.Replace(heartbeatSQL),
		touch:           r.Replace(touchSQL),
		finishJob:       r.Replace(finishJobSQL),
		count:           r.Replace(countSQL),
		recentRun:       r.Replace(recentRunSQL),
	}
}
