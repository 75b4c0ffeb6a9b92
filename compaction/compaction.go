// Package compaction owns the outbox_compact job: it hard-deletes dispatched
// outbox events whose dispatched_at is older than the retention (10 days by
// default), in bounded batches, one instance at a time, and records every run
// as one aa_job row. failed and skipped events are never touched; they stay
// until an operator retries or acknowledges them (`searchsync outbox`). A
// run also deletes the records of events delivered out of id order
// (aa_outbox_overtaken) older than the retention.
//
// # Batches
//
// A run computes its cutoff once (the database's now() minus the retention)
// and then deletes in a loop of short transactions, each
//
//	DELETE … WHERE id = ANY (ARRAY(SELECT id … WHERE id > <last> AND status = 'dispatched'
//	                               AND dispatched_at < <cutoff> ORDER BY id LIMIT <batch_size>
//	                               FOR UPDATE SKIP LOCKED))
//
// plus a heartbeat of the job row. The keyset on id makes a whole run read the
// table once along its primary key, and no lock is held longer than one batch.
//
// # One at a time
//
// aa_job has a unique index on running (job_kind, job_key): a run starts by
// inserting its running row, and a second run that finds the slot taken
// reports ErrAlreadyRunning. A run refreshes heartbeat_at every
// Config.StaleAfter/3, beside its batches (so a slow batch does not look like
// a crash), and with every batch. A running row whose heartbeat is older than
// Config.StaleAfter belongs to a crashed run: it is marked failed (with the
// reason) and the new run takes over. A run whose row was taken over that way
// (it was paused too long) stops as soon as its heartbeat finds no running
// row; a batch in flight then is rolled back, because the batch's own
// heartbeat, in its transaction, finds no running row either.
package compaction

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// JobKind is aa_job.job_kind of a compaction run.
const JobKind = "outbox_compact"

// DB is what the compactor needs of a connection pool (*pgxpool.Pool). It is
// used from two goroutines at once (batches and heartbeat), so a single
// *pgx.Conn will not do.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Config configures a Compactor. The zero value of every field means its
// default.
type Config struct {
	// Schema holds the outbox and aa_job. Default "mdm".
	Schema string
	// Retention keeps dispatched events this long after dispatched_at; at
	// least 1m. Default 240h (10 days).
	Retention time.Duration
	// BatchSize is the most rows one DELETE removes; positive. Default 1000.
	BatchSize int
	// Interval between scheduled runs (Scheduler). Default 1h; negative
	// disables the schedule.
	Interval time.Duration
	// StaleAfter is how old the heartbeat of a running compaction may be
	// before another run declares it crashed and takes over. Default 5m.
	StaleAfter time.Duration
	// Owner names this process in aa_job.owner. Default "<hostname>-<pid>".
	Owner string
	// Logger receives the job's logs. Default: discarded.
	Logger *slog.Logger
}

// Compactor runs the outbox_compact job.
type Compactor struct {
	db     DB
	cfg    Config
	q      queries
	logger *slog.Logger

	// beforeBatch, when set (tests), is called before each batch with the
	// run's context.
	beforeBatch func(ctx context.Context, batch int)
}

// WithDefaults returns c with every zero tunable replaced by its default (the
// one its field's comment gives); Owner and Logger are left as they are (New
// fills them). New calls it; internal/config calls it to know and show the
// effective values of a file.
func (c Config) WithDefaults() Config {
	c.Schema = cmp.Or(c.Schema, "mdm")
	c.Retention = cmp.Or(c.Retention, 240*time.Hour)
	c.BatchSize = cmp.Or(c.BatchSize, 1000)
	c.Interval = cmp.Or(c.Interval, time.Hour)
	c.StaleAfter = cmp.Or(c.StaleAfter, 5*time.Minute)
	return c
}

// ConfigError is one invalid value of a Config. Key is the setting's name
// as the configuration file spells it under compaction: ("batch_size"), so
// that internal/config can point at the key's line.
type ConfigError struct {
	Key    string
	Reason string
}

func (e *ConfigError) Error() string { return "compaction: " + e.Key + ": " + e.Reason }

// Validate checks c as New would use it (after WithDefaults) and reports
// every invalid value as a *ConfigError, joined.
func (c Config) Validate() error {
	var errs []error
	if c.Retention < time.Minute {
		errs = append(errs, &ConfigError{Key: "retention", Reason: "must be at least 1m"})
	}
	if c.BatchSize < 1 {
		errs = append(errs, &ConfigError{Key: "batch_size", Reason: "must be positive"})
	}
	if c.StaleAfter < 0 {
		errs = append(errs, &ConfigError{Key: "stale_after", Reason: "must not be negative"})
	}
	return errors.Join(errs...)
}

// New returns a compactor on db. It fails when a value of cfg is out of range
// (Validate).
func New(db DB, cfg Config) (*Compactor, error) {
	cfg = cfg.WithDefaults()
	if cfg.Owner == "" {
		host, _ := os.Hostname()
		cfg.Owner = fmt.Sprintf("%s-%d", cmp.Or(host, "searchsync"), os.Getpid())
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Compactor{db: db, cfg: cfg, q: newQueries(cfg.Schema), logger: logger.With("job", JobKind)}, nil
}

// Result is what one run did (or, for a dry run, would do); a run records it
// as aa_job.result.
type Result struct {
	JobID     int64     `json:"job_id,omitempty"`
	DryRun    bool      `json:"dry_run,omitempty"`
	Deleted   int64     `json:"deleted"`
	Batches   int       `json:"batches"`
	Cutoff    time.Time `json:"cutoff"`
	Retention string    `json:"retention"`
	BatchSize int       `json:"batch_size"`
	// MinID and MaxID bound what a dry run would delete.
	MinID int64 `json:"min_id,omitempty"`
	MaxID int64 `json:"max_id,omitempty"`
	// TookOver is the id of a crashed run this run declared failed.
	TookOver   []int64       `json:"took_over,omitempty"`
	Duration   time.Duration `json:"-"`
	DurationMS int64         `json:"duration_ms"`
	// DurationText is Duration as text ("1.234s").
	DurationText string `json:"duration"`
}

func (r *Result) setDuration(d time.Duration) {
	r.Duration, r.DurationMS, r.DurationText = d, d.Milliseconds(), d.Round(time.Millisecond).String()
}

// ErrAlreadyRunning reports that another run holds the job slot.
var ErrAlreadyRunning = errors.New("outbox_compact is already running")

// AlreadyRunningError names the run that holds the slot. It matches
// ErrAlreadyRunning with errors.Is.
type AlreadyRunningError struct {
	JobID       int64
	Owner       string
	StartedAt   time.Time
	HeartbeatAt time.Time
}

func (e *AlreadyRunningError) Error() string {
	return fmt.Sprintf("%s (job %d, owner %s, started %s, last heartbeat %s)", ErrAlreadyRunning, e.JobID, e.Owner,
		e.StartedAt.Format(time.RFC3339), e.HeartbeatAt.Format(time.RFC3339))
}

// Is makes errors.Is(err, ErrAlreadyRunning) true.
func (e *AlreadyRunningError) Is(target error) bool { return target == ErrAlreadyRunning }

// ErrTakenOver reports a run whose job row another run declared stale.
var ErrTakenOver = errors.New("outbox_compact: this run's job was declared stale and taken over")

// DryRun reports what a run would delete now, changing nothing (no job row).
func (c *Compactor) DryRun(ctx context.Context) (*Result, error) {
	start := time.Now()
	res := &Result{DryRun: true, Retention: c.cfg.Retention.String(), BatchSize: c.cfg.BatchSize}
	if err := c.db.QueryRow(ctx, c.q.cutoff, c.cfg.Retention.Seconds()).Scan(&res.Cutoff); err != nil {
		return nil, fmt.Errorf("compaction: cutoff: %w", err)
	}
	if err := c.db.QueryRow(ctx, c.q.count, res.Cutoff).Scan(&res.Deleted, &res.MinID, &res.MaxID); err != nil {
		return nil, fmt.Errorf("compaction: count old dispatched events in %s.aa_outbox_event: %w", c.cfg.Schema, err)
	}
	res.Batches = int((res.Deleted + int64(c.cfg.BatchSize) - 1) / int64(c.cfg.BatchSize))
	res.setDuration(time.Since(start))
	return res, nil
}

// Run performs one compaction: it takes the job slot (or returns an
// *AlreadyRunningError), deletes the old dispatched events batch by batch and
// records the result in its aa_job row (state succeeded; failed with the error,
// or aborted when ctx ends, each with what it deleted so far).
func (c *Compactor) Run(ctx context.Context) (*Result, error) {
	start := time.Now()
	res := &Result{Retention: c.cfg.Retention.String(), BatchSize: c.cfg.BatchSize}
	jobID, tookOver, err := c.startJob(ctx)
	if err != nil {
		return nil, err
	}
	res.JobID, res.TookOver = jobID, tookOver
	for _, id := range tookOver {
		c.logger.Warn("compaction: took over a crashed run", "stale_job_id", id, "job_id", jobID)
	}
	log := c.logger.With("job_id", jobID)

	// The heartbeat goroutine keeps the row fresh however long a batch
	// takes, and stops the run when the row is no longer ours.
	runCtx, cancel := context.WithCancelCause(ctx)
	hbDone := make(chan struct{})
	go func() { defer close(hbDone); c.heartbeat(runCtx, jobID, cancel) }()
	runErr := c.deleteAll(runCtx, jobID, res)
	cancel(nil)
	<-hbDone
	if errors.Is(context.Cause(runCtx), ErrTakenOver) {
		runErr = fmt.Errorf("%w (job %d)", ErrTakenOver, jobID)
	}
	res.setDuration(time.Since(start))

	state, errText := "succeeded", ""
	switch {
	case runErr == nil:
	case ctx.Err() != nil:
		state, errText = "aborted", "stopped: "+context.Cause(ctx).Error()
	default:
		state, errText = "failed", runErr.Error()
	}
	if !errors.Is(runErr, ErrTakenOver) {
		if err := c.finish(ctx, jobID, state, res, errText); err != nil {
			return res, errors.Join(runErr, err)
		}
	}
	if runErr != nil {
		log.Warn("compaction: run ended early", "state", state, "deleted", res.Deleted, "batches", res.Batches, "error", runErr)
		return res, runErr
	}
	log.Info("compaction: done", "deleted", res.Deleted, "batches", res.Batches, "cutoff", res.Cutoff, "duration", res.Duration)
	return res, nil
}

// heartbeat refreshes the job row every StaleAfter/3 until ctx ends; when
// the row is no longer running (another run declared it stale) it cancels the
// run with ErrTakenOver.
func (c *Compactor) heartbeat(ctx context.Context, jobID int64, cancel context.CancelCauseFunc) {
	t := time.NewTicker(max(c.cfg.StaleAfter/3, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		tag, err := c.db.Exec(ctx, c.q.touch, jobID)
		switch {
		case err != nil:
			if ctx.Err() == nil {
				c.logger.Warn("compaction: heartbeat failed", "job_id", jobID, "error", err)
			}
		case tag.RowsAffected() == 0:
			cancel(ErrTakenOver)
			return
		}
	}
}

// startJob takes over a stale running row, if any, and inserts this run's row.
func (c *Compactor) startJob(ctx context.Context) (int64, []int64, error) {
	rows, err := c.db.Query(ctx, c.q.abandonStale, JobKind, c.cfg.StaleAfter.Seconds(), c.cfg.Owner)
	if err != nil {
		return 0, nil, fmt.Errorf("compaction: check for a stale run in %s.aa_job: %w", c.cfg.Schema, err)
	}
	tookOver, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return 0, nil, fmt.Errorf("compaction: check for a stale run in %s.aa_job: %w", c.cfg.Schema, err)
	}
	params, _ := json.Marshal(map[string]any{
		"retention": c.cfg.Retention.String(), "batch_size": c.cfg.BatchSize,
	})
	var id int64
	err = c.db.QueryRow(ctx, c.q.startJob, JobKind, c.cfg.Owner, params).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		e := &AlreadyRunningError{}
		if err := c.db.QueryRow(ctx, c.q.runningJob, JobKind).Scan(&e.JobID, &e.Owner, &e.StartedAt, &e.HeartbeatAt); err != nil {
			if errors.Is(err, pgx.ErrNoRows) { // it finished in between
				return 0, nil, ErrAlreadyRunning
			}
			return 0, nil, fmt.Errorf("compaction: read the running job: %w", err)
		}
		return 0, nil, e
	}
	if err != nil {
		return 0, nil, fmt.Errorf("compaction: record the run in %s.aa_job: %w", c.cfg.Schema, err)
	}
	return id, tookOver, nil
}

// deleteAll runs the batches until one deletes fewer rows than the batch size.
func (c *Compactor) deleteAll(ctx context.Context, jobID int64, res *Result) error {
	if err := c.db.QueryRow(ctx, c.q.cutoff, c.cfg.Retention.Seconds()).Scan(&res.Cutoff); err != nil {
		return fmt.Errorf("compaction: cutoff: %w", err)
	}
	if _, err := c.db.Exec(ctx, c.q.deleteOvertaken, res.Cutoff); err != nil {
		return fmt.Errorf("compaction: delete old records of %s.aa_outbox_overtaken: %w", c.cfg.Schema, err)
	}
	var last int64
	for batch := 1; ; batch++ {
		if c.beforeBatch != nil {
			c.beforeBatch(ctx, batch)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		n, maxID, err := c.deleteBatch(ctx, jobID, last, res)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		if n > 0 {
			res.Deleted += n
			res.Batches++
			last = maxID
		}
		if n < int64(c.cfg.BatchSize) {
			return nil
		}
	}
}

// deleteBatch deletes one batch and heartbeats the job in one transaction.
func (c *Compactor) deleteBatch(ctx context.Context, jobID, after int64, res *Result) (n, maxID int64, err error) {
	tx, err := c.db.Begin(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("compaction: begin batch: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if err := tx.QueryRow(ctx, c.q.deleteBatch, after, res.Cutoff, c.cfg.BatchSize).Scan(&n, &maxID); err != nil {
		return 0, 0, fmt.Errorf("compaction: delete batch after id %d from %s.aa_outbox_event: %w", after, c.cfg.Schema, err)
	}
	progress, _ := json.Marshal(map[string]any{"deleted": res.Deleted + n, "batches": res.Batches + 1, "last_id": max(after, maxID)})
	tag, err := tx.Exec(ctx, c.q.heartbeat, jobID, progress)
	if err != nil {
		return 0, 0, fmt.Errorf("compaction: heartbeat job %d: %w", jobID, err)
	}
	if tag.RowsAffected() == 0 {
		return 0, 0, fmt.Errorf("%w (job %d)", ErrTakenOver, jobID)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, 0, fmt.Errorf("compaction: commit batch: %w", err)
	}
	return n, maxID, nil
}

func (c *Compactor) finish(ctx context.Context, jobID int64, state string, res *Result, errText string) error {
	result, err := json.Marshal(res)
	if err != nil {
		return err
	}
	var e *string
	if errText != "" {
		e = &errText
	}
	// The row is closed even when ctx was cancelled (a stopping relay).
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := c.db.Exec(fctx, c.q.finishJob, jobID, state, result, e); err != nil {
		return fmt.Errorf("compaction: record the end of job %d: %w", jobID, err)
	}
	return nil
}
