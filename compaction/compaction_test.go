package compaction

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/searchsync/searchsync/internal/testenv"
)

// fixture is an outbox with rows in every state; old are the ids a run must
// delete.
type fixture struct {
	db  *testenv.DB
	old []int64
}

// insert adds n rows with the given status whose dispatched_at lies age in
// the past (NULL when age is 0) and returns their ids.
func insert(t *testing.T, db *testenv.DB, n int, status string, age time.Duration) []int64 {
	t.Helper()
	var dispatchedAt *time.Time
	if age > 0 {
		ts := time.Now().Add(-age)
		dispatchedAt = &ts
	}
	rows, err := db.Pool.Query(t.Context(), `
INSERT INTO aa_outbox_event (event_type, aggregate_type, aggregate_id, payload, status, dispatched_at, created_at)
SELECT 'entity.customer.updated', 'DDM_ENTITY', gen_random_uuid(), '{}', $2::outbox_status, $3, now() - interval '30 days'
FROM generate_series(1, $1)
RETURNING id`, n, status, dispatchedAt)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func newFixture(t *testing.T) *fixture {
	db := testenv.NewDB(t)
	f := &fixture{db: db}
	const day = 24 * time.Hour
	// Interleave so that the old rows are not one contiguous id range.
	f.old = append(f.old, insert(t, db, 20, "dispatched", 11*day)...)
	insert(t, db, 3, "dispatched", 9*day) // younger than the retention
	insert(t, db, 2, "failed", 0)
	f.old = append(f.old, insert(t, db, 30, "dispatched", 30*day)...)
	// failed and skipped rows with an old dispatched_at (a retried event that
	// failed later): never touched all the same.
	insert(t, db, 3, "failed", 20*day)
	insert(t, db, 3, "skipped", 20*day)
	insert(t, db, 4, "pending", 0)
	insert(t, db, 2, "dispatched", time.Hour)
	return f
}

func (f *fixture) ids(t *testing.T) []int64 {
	rows, err := f.db.Pool.Query(t.Context(), `SELECT id FROM aa_outbox_event ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func newCompactor(t *testing.T, db *testenv.DB, cfg Config) *Compactor {
	t.Helper()
	cfg.Schema = db.Schema
	c, err := New(db.Pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type jobRow struct {
	ID     int64
	State  string
	Owner  string
	Result json.RawMessage
	Error  *string
}

func jobs(t *testing.T, db *testenv.DB) []jobRow {
	rows, err := db.Pool.Query(t.Context(), `SELECT id, state, coalesce(owner, ''), result, error FROM aa_job WHERE job_kind = $1 ORDER BY id`, JobKind)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[jobRow])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestRunDeletesExactlyOldDispatchedInBatches(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	before := f.ids(t)
	c := newCompactor(t, f.db, Config{BatchSize: 7})
	// Records of events delivered out of order: one older than the
	// retention, one recent.
	if _, err := f.db.Pool.Exec(t.Context(), `INSERT INTO aa_outbox_overtaken (event_id, aggregate_type, aggregate_id, after_event_id, instance, detected_at)
		VALUES (1, 'DDM_ENTITY', gen_random_uuid(), 2, 'r', now() - interval '11 days'), (3, 'DDM_ENTITY', gen_random_uuid(), 4, 'r', now())`); err != nil {
		t.Fatal(err)
	}

	dry, err := c.DryRun(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if dry.Deleted != 50 || dry.Batches != 8 {
		t.Fatalf("dry run: would delete %d in %d batches, want 50 in 8", dry.Deleted, dry.Batches)
	}
	if got := f.ids(t); !slices.Equal(got, before) || len(jobs(t, f.db)) != 0 {
		t.Fatalf("dry run changed something")
	}

	res, err := c.Run(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if res.Deleted != 50 || res.Batches != 8 {
		t.Fatalf("run deleted %d in %d batches, want 50 in 8", res.Deleted, res.Batches)
	}
	want := slices.DeleteFunc(slices.Clone(before), func(id int64) bool { return slices.Contains(f.old, id) })
	if got := f.ids(t); !slices.Equal(got, want) {
		t.Fatalf("rows left %v, want %v", got, want)
	}
	// Everything that is not old-and-dispatched is still there, per status.
	var counts [4]int
	if err := f.db.Pool.QueryRow(t.Context(), `SELECT
		count(*) FILTER (WHERE status = 'dispatched'), count(*) FILTER (WHERE status = 'failed'),
		count(*) FILTER (WHERE status = 'skipped'), count(*) FILTER (WHERE status = 'pending')
		FROM aa_outbox_event`).Scan(&counts[0], &counts[1], &counts[2], &counts[3]); err != nil {
		t.Fatal(err)
	}
	if counts != [4]int{5, 5, 3, 4} {
		t.Fatalf("left dispatched/failed/skipped/pending = %v, want [5 5 3 4]", counts)
	}

	var overtaken []int64
	rows, _ := f.db.Pool.Query(t.Context(), `SELECT event_id FROM aa_outbox_overtaken ORDER BY event_id`)
	if overtaken, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil || !slices.Equal(overtaken, []int64{3}) {
		t.Fatalf("out-of-order records left %v (%v), want the recent one only", overtaken, err)
	}

	js := jobs(t, f.db)
	if len(js) != 1 || js[0].State != "succeeded" || js[0].ID != res.JobID || js[0].Error != nil {
		t.Fatalf("job rows %+v, want one succeeded row for job %d", js, res.JobID)
	}
	var recorded struct {
		Deleted    int64     `json:"deleted"`
		Batches    int       `json:"batches"`
		Cutoff     time.Time `json:"cutoff"`
		DurationMS *int64    `json:"duration_ms"`
		Duration   string    `json:"duration"`
	}
	if err := json.Unmarshal(js[0].Result, &recorded); err != nil {
		t.Fatal(err)
	}
	if recorded.Deleted != 50 || recorded.Batches != 8 || recorded.DurationMS == nil || recorded.Duration == "" ||
		time.Since(recorded.Cutoff) < 239*time.Hour || time.Since(recorded.Cutoff) > 241*time.Hour {
		t.Fatalf("recorded result %s", js[0].Result)
	}

	// A second run finds nothing and records that too.
	res2, err := c.Run(t.Context())
	if err != nil || res2.Deleted != 0 || res2.Batches != 0 {
		t.Fatalf("second run: %+v, %v; want nothing deleted", res2, err)
	}
	if n := len(jobs(t, f.db)); n != 2 {
		t.Fatalf("%d job rows after two runs, want 2", n)
	}
}

// Two concurrent runs: one holds the slot, the other reports it is already
// running and records nothing.
func TestOneRunAtATime(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	inBatch := make(chan struct{})
	release := make(chan struct{})
	a := newCompactor(t, f.db, Config{BatchSize: 10, Owner: "instance-a"})
	var once sync.Once
	a.beforeBatch = func(context.Context, int) {
		once.Do(func() { close(inBatch); <-release })
	}
	b := newCompactor(t, f.db, Config{BatchSize: 10, Owner: "instance-b"})

	type result struct {
		res *Result
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := a.Run(t.Context())
		done <- result{res, err}
	}()
	select {
	case <-inBatch:
	case <-time.After(30 * time.Second):
		t.Fatal("run a did not start")
	}
	_, err := b.Run(t.Context())
	var running *AlreadyRunningError
	if !errors.Is(err, ErrAlreadyRunning) || !errors.As(err, &running) || running.Owner != "instance-a" {
		t.Fatalf("second run: %v, want already running (owner instance-a)", err)
	}
	close(release)
	r := <-done
	if r.err != nil || r.res.Deleted != 50 {
		t.Fatalf("first run: %+v, %v", r.res, r.err)
	}
	js := jobs(t, f.db)
	if len(js) != 1 || js[0].Owner != "instance-a" || js[0].State != "succeeded" {
		t.Fatalf("job rows %+v, want only instance-a's", js)
	}
}

// A running row whose heartbeat is stale (its owner crashed) does not block
// compaction for ever: the next run marks it failed and takes over. A fresh
// one does block.
func TestStaleRunIsTakenOver(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var crashed int64
	if err := f.db.Pool.QueryRow(t.Context(), `INSERT INTO aa_job (job_kind, owner, started_at, heartbeat_at)
		VALUES ($1, 'crashed-host-1', now() - interval '2 hours', now() - interval '1 hour') RETURNING id`, JobKind).Scan(&crashed); err != nil {
		t.Fatal(err)
	}
	c := newCompactor(t, f.db, Config{BatchSize: 100, StaleAfter: 10 * time.Minute})
	res, err := c.Run(t.Context())
	if err != nil {
		t.Fatalf("run after a crashed one: %v", err)
	}
	if res.Deleted != 50 || !slices.Equal(res.TookOver, []int64{crashed}) {
		t.Fatalf("result %+v, want 50 deleted and job %d taken over", res, crashed)
	}
	js := jobs(t, f.db)
	if len(js) != 2 || js[0].State != "failed" || js[0].Error == nil || !strings.Contains(*js[0].Error, "abandoned") ||
		!strings.Contains(*js[0].Error, "crashed-host-1") || js[1].State != "succeeded" {
		t.Fatalf("job rows %+v", js)
	}

	// A running row with a fresh heartbeat blocks.
	if _, err := f.db.Pool.Exec(t.Context(), `INSERT INTO aa_job (job_kind, owner) VALUES ($1, 'alive-host')`, JobKind); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Run(t.Context()); !errors.Is(err, ErrAlreadyRunning) || !strings.Contains(err.Error(), "alive-host") {
		t.Fatalf("run beside a live one: %v, want already running (alive-host)", err)
	}
}

// A run that was declared stale (paused too long) stops at its next batch
// and rolls it back; it never deletes beside its successor.
func TestTakenOverRunStops(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	paused := make(chan struct{})
	release := make(chan struct{})
	c := newCompactor(t, f.db, Config{BatchSize: 10})
	c.beforeBatch = func(_ context.Context, batch int) {
		if batch == 2 {
			close(paused)
			<-release
		}
	}
	done := make(chan error, 1)
	var res *Result
	go func() {
		var err error
		res, err = c.Run(t.Context())
		done <- err
	}()
	<-paused
	if _, err := f.db.Pool.Exec(t.Context(), `UPDATE aa_job SET state = 'failed', error = 'declared stale by test' WHERE job_kind = $1 AND state = 'running'`, JobKind); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-done; !errors.Is(err, ErrTakenOver) {
		t.Fatalf("run: %v, want ErrTakenOver", err)
	}
	if res.Deleted != 10 {
		t.Fatalf("deleted %d, want only the first batch (10)", res.Deleted)
	}
	var left int
	f.db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM aa_outbox_event WHERE id = ANY($1)`, f.old).Scan(&left)
	if left != 40 {
		t.Fatalf("%d old rows left, want 40 (the second batch rolled back)", left)
	}
	if js := jobs(t, f.db); len(js) != 1 || js[0].State != "failed" || *js[0].Error != "declared stale by test" {
		t.Fatalf("job row %+v was overwritten by the fenced run", js)
	}
}

// A run whose batch takes longer than StaleAfter keeps its row fresh (the
// heartbeat runs beside the batches), so nobody takes it over; when its row
// is taken from it all the same, the heartbeat stops it at once, mid-batch.
func TestHeartbeatKeepsASlowRunAndStopsATakenOne(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const stale = 300 * time.Millisecond
	paused := make(chan struct{})
	var stopped atomic.Bool
	c := newCompactor(t, f.db, Config{BatchSize: 10, StaleAfter: stale, Owner: "slow"})
	c.beforeBatch = func(ctx context.Context, batch int) {
		if batch == 2 {
			close(paused)
			<-ctx.Done() // a batch that never ends by itself
			stopped.Store(true)
		}
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Run(t.Context())
		done <- err
	}()
	<-paused
	// Three stale periods later another run still finds it alive.
	other := newCompactor(t, f.db, Config{BatchSize: 10, StaleAfter: stale, Owner: "other"})
	deadline := time.Now().Add(3 * stale)
	for time.Now().Before(deadline) {
		if _, err := other.Run(t.Context()); !errors.Is(err, ErrAlreadyRunning) {
			t.Fatalf("a run beside a slow but live one: %v, want already running", err)
		}
		time.Sleep(stale / 3)
	}
	// Its row is taken (as a takeover after a long pause would).
	if _, err := f.db.Pool.Exec(t.Context(), `UPDATE aa_job SET state = 'failed', error = 'taken' WHERE owner = 'slow'`); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrTakenOver) || !stopped.Load() {
			t.Fatalf("run: %v, want ErrTakenOver", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the heartbeat did not stop a run whose row was taken")
	}
}

func TestCancelledRunIsAborted(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx, cancel := context.WithCancel(t.Context())
	c := newCompactor(t, f.db, Config{BatchSize: 10})
	c.beforeBatch = func(_ context.Context, batch int) {
		if batch == 3 {
			cancel()
		}
	}
	res, err := c.Run(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("run: %v, want context.Canceled", err)
	}
	js := jobs(t, f.db)
	if len(js) != 1 || js[0].State != "aborted" || res.Deleted != 20 {
		t.Fatalf("job rows %+v, result %+v; want one aborted row after 20 deleted", js, res)
	}
	var recorded Result
	json.Unmarshal(js[0].Result, &recorded)
	if recorded.Deleted != 20 || recorded.Batches != 2 {
		t.Fatalf("recorded %s, want deleted 20 in 2 batches", js[0].Result)
	}
}

// The scheduler runs at start and then skips turns while a recent run exists.
func TestSchedulerRunsOncePerInterval(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c := newCompactor(t, f.db, Config{BatchSize: 100, Interval: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- NewScheduler(c).Run(ctx) }()
	testenv.Eventually(t, 30*time.Second, func() bool {
		js := jobs(t, f.db)
		return len(js) >= 2 && js[0].State == "succeeded"
	}, "the scheduler did not run twice")
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("scheduler: %v", err)
	}
	js := jobs(t, f.db)
	var first Result
	json.Unmarshal(js[0].Result, &first)
	if first.Deleted != 50 {
		t.Fatalf("first scheduled run deleted %d, want 50", first.Deleted)
	}

	// Disabled schedule: Run returns at once.
	off := newCompactor(t, f.db, Config{Interval: -1})
	if err := NewScheduler(off).Run(t.Context()); err != nil {
		t.Fatal(err)
	}
}
