package reindex

import (
	"context"
	"testing"
	"time"

	"github.com/searchsync/searchsync/internal/testenv"
)

// List reads the jobs and the outbox head in one statement: of one alias,
// or the newest of each alias among the running ones and those that ended
// since a time (what the console's Reindex panel asks).
func TestListFilters(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	job := func(alias, state, endedAgo string) int64 {
		t.Helper()
		var id int64
		err := db.Pool.QueryRow(ctx, `INSERT INTO aa_job (job_kind, job_key, state, owner, params, progress, started_at, heartbeat_at, finished_at)
			VALUES ($1, $2, $3, 'host:1:ab', '{"target": "x_v2"}', '{"phase": "seed", "docs_seeded": 5, "docs_total": 9}',
			        now() - $4::interval - interval '1 minute', now() - $4::interval,
			        CASE WHEN $3 = 'running' THEN NULL ELSE now() - $4::interval END)
			RETURNING id`, JobKind, alias, state, endedAgo).Scan(&id)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	job("a", "failed", "30 hours")
	aDone := job("a", "succeeded", "1 hour")
	aRun := job("a", "running", "1 second")
	job("b", "succeeded", "48 hours")
	cAbort := job("c", "aborted", "2 hours")
	if _, err := db.Pool.Exec(ctx, `INSERT INTO aa_job (job_kind, job_key, state) VALUES ('outbox_compact', 'a', 'running')`); err != nil {
		t.Fatal(err)
	}
	var head int64
	if err := db.Pool.QueryRow(ctx, `INSERT INTO aa_outbox_event (event_type, aggregate_type, aggregate_id, payload)
		VALUES ('entity.customer.created', 'DDM_ENTITY', gen_random_uuid(), '{}') RETURNING id`).Scan(&head); err != nil {
		t.Fatal(err)
	}

	recent, err := List(ctx, db.Pool, Filter{Since: time.Now().Add(-24 * time.Hour), PerAlias: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(recent) != 2 || recent[0].ID != cAbort || recent[1].ID != aRun {
		t.Fatalf("recent, one per alias: %+v; want jobs %d (c) and %d (a, running)", recent, cAbort, aRun)
	}
	if j := recent[1]; j.State != "running" || j.FinishedAt != nil || j.OutboxHead != head || j.Progress.DocsTotal != 9 || j.Params.Target != "x_v2" {
		t.Errorf("running job: %+v (head %d)", j, head)
	}
	if j := recent[0]; j.FinishedAt == nil || time.Since(*j.FinishedAt) < time.Hour {
		t.Errorf("aborted job: finished %v", j.FinishedAt)
	}

	all, err := List(ctx, db.Pool, Filter{Alias: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 3 || all[0].ID != aRun || all[1].ID != aDone {
		t.Errorf("all jobs of a: %+v", all)
	}
	two, err := List(ctx, db.Pool, Filter{Limit: 2})
	if err != nil || len(two) != 2 {
		t.Errorf("limit 2: %d jobs, %v", len(two), err)
	}
}
