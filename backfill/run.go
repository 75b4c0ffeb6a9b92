package backfill

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/searchsync/searchsync/outbox"
)

// Config configures a Run.
type Config struct {
	// Pool is the outbox database, search_path set to Schema.
	Pool *pgxpool.Pool
	// Schema holds the outbox and aa_job. Default "mdm".
	Schema string
	Source Source
	// Owner names this process in aa_job.owner. Default NewOwner().
	Owner string
	// StaleAfter is how old a running job's heartbeat must be before
	// another process takes it over (after a kill -9). Default 15s.
	StaleAfter time.Duration
	// Heartbeat is how often the job row is touched while the backfill
	// waits. Default 2s.
	Heartbeat time.Duration
	// OnProgress, when set, is called after every chunk and every
	// heartbeat.
	OnProgress func(Progress)
	Logger     *slog.Logger
}

// Result is what a finished backfill records (aa_job.result).
type Result struct {
	Rows    int64   `json:"rows"`
	Chunks  int64   `json:"chunks"`
	Seconds float64 `json:"seconds"` // of the run that finished it
	Resumed bool    `json:"resumed"` // it took over an interrupted job
}

// Run backfills the source into the outbox: it starts the source's job
// (or resumes the interrupted one), then reads the source a chunk at a
// time and writes one snapshot event per row, each chunk in a transaction
// of its own together with the job's progress. It returns when every row
// was read, when the job is aborted (ErrLost) or when ctx ends (the job is
// released, and the next Run resumes it after its last chunk).
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg.Schema = cmp.Or(cfg.Schema, "mdm")
	cfg.Owner = cmp.Or(cfg.Owner, NewOwner())
	cfg.StaleAfter = cmp.Or(cfg.StaleAfter, 15*time.Second)
	cfg.Heartbeat = cmp.Or(cfg.Heartbeat, 2*time.Second)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	rd, err := Open(ctx, cfg.Pool, cfg.Source)
	if err != nil {
		return nil, err
	}
	j, err := acquire(ctx, cfg.Pool, rd.src.Name, cfg.Owner, Params{Source: rd.src, Correlation: uuid.New()}, cfg.StaleAfter)
	if err != nil {
		return nil, err
	}
	if j.resumed {
		// The source as the job began it: its query and key order are what
		// LastKey means.
		if rd, err = Open(ctx, cfg.Pool, j.params.Source); err != nil {
			return nil, err
		}
		cfg.Logger.Info("backfill: resuming", "source", rd.src.Name, "job", j.id, "rows_done", j.progress.Rows, "last_key", j.progress.LastKey)
	} else {
		cfg.Logger.Info("backfill: starting", "source", rd.src.Name, "job", j.id)
	}
	b := &runner{cfg: cfg, rd: rd, job: j, w: outbox.NewWriter(outbox.WriterConfig{Schema: cfg.Schema}), start: time.Now(), rowsAtStart: j.progress.Rows}
	res, err := b.run(ctx)
	if err != nil && !errors.Is(err, ErrLost) {
		// Interrupted (a signal, a bad row, a query the database refuses):
		// hand the job back so that the next run resumes it at once.
		if ctx.Err() == nil {
			b.job.progress.Error = err.Error()
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if rerr := b.job.release(rctx, cfg.Pool); rerr != nil {
			cfg.Logger.Warn("backfill: could not release the job; the next run takes it over once its heartbeat is stale", "source", rd.src.Name, "job", j.id, "error", rerr)
		}
	}
	return res, err
}

type runner struct {
	cfg         Config
	rd          *Reader
	job         *job
	w           *outbox.Writer
	start       time.Time
	rowsAtStart int64
	nextAt      time.Time // the rate limit: when the next chunk may start
}

func (b *runner) run(ctx context.Context) (*Result, error) {
	p := &b.job.progress
	if p.Total == 0 || !b.job.resumed {
		n, err := b.rd.Count(ctx, b.cfg.Pool)
		if err != nil {
			return nil, err
		}
		p.Total = n
	}
	p.Phase, p.Error = PhaseRead, ""
	if err := b.job.save(ctx, b.cfg.Pool); err != nil {
		return nil, err
	}
	b.report()
	for {
		if err := b.throttle(ctx); err != nil {
			return nil, err
		}
		done, err := b.retrying(ctx, b.chunk)
		if err != nil {
			return nil, err
		}
		b.report()
		if done {
			break
		}
	}
	p.Phase, p.Waiting, p.ETA = PhaseDone, "", ""
	res := &Result{Rows: p.Rows, Chunks: p.Chunks, Seconds: time.Since(b.start).Seconds(), Resumed: b.job.resumed}
	if err := b.job.finish(ctx, b.cfg.Pool, res); err != nil {
		return nil, err
	}
	b.report()
	b.cfg.Logger.Info("backfill: done", "source", b.rd.src.Name, "job", b.job.id, "rows", p.Rows, "seconds", res.Seconds)
	return res, nil
}

// chunk writes the next chunk's events and the progress in one
// transaction; done when the source has no rows left.
func (b *runner) chunk(ctx context.Context) (done bool, err error) {
	p := &b.job.progress
	tx, err := b.cfg.Pool.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("backfill source %s: begin: %w", b.rd.src.Name, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit it is a no-op
	o := emit{schema: b.cfg.Schema, correlation: b.job.params.Correlation, createdBy: "searchsync backfill " + b.rd.src.Name}
	written, last, err := b.rd.chunk(ctx, tx, b.w, o, p.LastKey, !p.Started, b.rd.src.ChunkSize)
	if err != nil {
		return false, err
	}
	if last == "" && written == 0 {
		return true, nil
	}
	before := *p
	p.LastKey, p.Started, p.Chunks, p.Rows, p.Waiting = last, true, p.Chunks+1, p.Rows+int64(written), ""
	b.rates()
	if err := b.job.save(ctx, tx); err != nil {
		*p = before
		return false, err
	}
	if err := tx.Commit(ctx); err != nil {
		*p = before
		return false, fmt.Errorf("backfill source %s: commit chunk: %w", b.rd.src.Name, err)
	}
	b.pace(written)
	return false, nil
}

// rates updates the rate and ETA of this run.
func (b *runner) rates() {
	p := &b.job.progress
	p.Rate = float64(p.Rows-b.rowsAtStart) / since(b.start)
	p.ETA = ""
	if left := p.Total - p.Rows; left > 0 && p.Rate > 0 {
		p.ETA = time.Duration(float64(left) / p.Rate * float64(time.Second)).Round(time.Second).String()
	}
}

// pace moves the rate limit's next start by the rows just written.
func (b *runner) pace(rows int) {
	if b.rd.src.Rate <= 0 {
		return
	}
	now := time.Now()
	if b.nextAt.Before(now) {
		b.nextAt = now
	}
	b.nextAt = b.nextAt.Add(time.Duration(float64(rows) / b.rd.src.Rate * float64(time.Second)))
}

// backlogSQL counts the outbox's pending events, up to a bound ($1): the
// pending index answers it without reading more.
const backlogSQL = `SELECT count(*) FROM (SELECT 1 FROM aa_outbox_event WHERE status = 'pending' LIMIT $1) x`

// Bounds of the pause between two counts of the backlog while it is above
// max_backlog: the pause is the time the relays take to deliver the excess
// at the rate they delivered it since the last count.
const (
	minBacklogPoll = 10 * time.Millisecond
	maxBacklogPoll = 100 * time.Millisecond
)

// backlogPoll is the pause before the next count: the excess above the
// bound at the rate the backlog fell since the last count (n0 at t0), within
// minBacklogPoll..maxBacklogPoll; maxBacklogPoll when it did not fall, and
// a quarter of it at the first count of a pause (no rate yet).
func backlogPoll(n0, n, bound int, t0 time.Time) time.Duration {
	if n0 < 0 {
		return maxBacklogPoll / 4
	}
	fell, dt := n0-n, time.Since(t0)
	if fell <= 0 || dt <= 0 {
		return maxBacklogPoll
	}
	d := time.Duration(float64(n-bound) / float64(fell) * float64(dt))
	return min(max(d, minBacklogPoll), maxBacklogPoll)
}

// throttle waits until the rate limit allows the next chunk and the
// outbox's backlog is at most MaxBacklog, heartbeating meanwhile.
func (b *runner) throttle(ctx context.Context) error {
	p := &b.job.progress
	lastBeat := time.Now()
	// The count goes up to a chunk above the bound, so that the pause
	// can follow the excess.
	limit := b.rd.src.MaxBacklog + b.rd.src.ChunkSize + 1
	n0, t0 := -1, time.Time{}
	for {
		wait := time.Until(b.nextAt)
		if wait <= 0 {
			var n int
			if err := b.cfg.Pool.QueryRow(ctx, backlogSQL, limit).Scan(&n); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				n = -1 // the database is away: the chunk's retries wait for it
			}
			if n <= b.rd.src.MaxBacklog {
				if p.Phase == PhaseWait {
					p.Phase, p.Waiting = PhaseRead, ""
				}
				return nil
			}
			if p.Phase != PhaseWait {
				p.Phase = PhaseWait
				p.Waiting = fmt.Sprintf("the outbox holds more than max_backlog (%d) pending events: waiting for the relays to deliver them", b.rd.src.MaxBacklog)
				b.report()
			}
			wait = backlogPoll(n0, n, b.rd.src.MaxBacklog, t0)
			n0, t0 = n, time.Now()
		}
		if time.Since(lastBeat) >= b.cfg.Heartbeat {
			lastBeat = time.Now()
			b.rates()
			if err := b.job.save(ctx, b.cfg.Pool); err != nil && errors.Is(err, ErrLost) {
				return err
			}
			b.report()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(min(wait, b.cfg.Heartbeat)):
		}
	}
}

// retrying runs fn until it succeeds, waiting with backoff while the
// database is away; what retrying cannot mend (a bad row, a query the
// database refuses, the job lost) is returned at once.
func (b *runner) retrying(ctx context.Context, fn func(context.Context) (bool, error)) (bool, error) {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval, bo.MaxInterval, bo.MaxElapsedTime = 100*time.Millisecond, 10*time.Second, 0
	for {
		done, err := fn(ctx)
		if err == nil || !transient(err) || ctx.Err() != nil {
			if ctx.Err() != nil && err != nil {
				return false, ctx.Err()
			}
			return done, err
		}
		d := bo.NextBackOff()
		b.job.progress.Waiting = "database: " + err.Error()
		b.report()
		b.cfg.Logger.Warn("backfill: chunk failed; trying again", "source", b.rd.src.Name, "in", d, "error", err)
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(d):
		}
	}
}

// transient reports whether err is about the database being away or
// busy (a lost connection, a deadlock, a shutdown) rather than the
// source or its rows.
func transient(err error) bool {
	var rowErr *RowError
	if errors.Is(err, ErrLost) || errors.As(err, &rowErr) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code[:2] {
		case "08", "40", "53", "57": // connection, rollback (deadlock), resources, shutdown
			return pgErr.Code != "57014" // a cancelled statement is ours
		}
		return false
	}
	// No answer from the server at all: a refused or lost connection.
	var connErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connErr) || errors.As(err, &netErr) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || pgconn.Timeout(err) || pgconn.SafeToRetry(err)
}

func (b *runner) report() {
	if b.cfg.OnProgress != nil {
		b.cfg.OnProgress(b.job.progress)
	}
}
