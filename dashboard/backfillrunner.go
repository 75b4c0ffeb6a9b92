package dashboard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/searchsync/searchsync/backfill"
)

// Backfills runs the backfills the console starts and feeds the Backfills
// panel (/api/backfill). It is a background service of `searchsync run`
// (internal/background.Service): the backfills it starts run in this
// process, each with a context of its own under the service's, and when the
// service stops (the process shuts down) they stop too — their jobs are
// released, interrupted, and the next start (here or `searchsync backfill
// <source>`) resumes them after their last chunk.
type Backfills struct {
	// Sources are the declared sources (backfill.sources), in the
	// configuration's order, with their defaults.
	Sources []backfill.Source
	// Pool is the outbox database, search_path set to Schema.
	Pool   *pgxpool.Pool
	Schema string
	// StaleAfter is how old a running job's heartbeat must be before it
	// counts as interrupted. Default 15s.
	StaleAfter time.Duration
	// Route names the consumers an event would be routed to (nil: not
	// shown in a dry run's sample).
	Route  func(eventType, aggregateType string) []string
	Logger *slog.Logger

	mu      sync.Mutex
	base    context.Context // the service's; nil until Run, done once it stops
	stopped bool
	running map[string]*backfillRun
	wg      sync.WaitGroup
}

// backfillRun is one backfill this process runs.
type backfillRun struct {
	cancel context.CancelFunc
	by     string
}

// Name names the service in the supervisor's log lines.
func (b *Backfills) Name() string { return "console backfills" }

// Run lets the console start backfills until ctx ends, then stops those
// that run and waits until each released its job.
func (b *Backfills) Run(ctx context.Context) error {
	b.mu.Lock()
	b.base, b.stopped = ctx, false
	b.mu.Unlock()
	<-ctx.Done()
	b.mu.Lock()
	b.stopped = true
	n := len(b.running)
	b.mu.Unlock()
	if n > 0 {
		b.logger().Info("console backfills: stopping; their jobs are released and resume at the next start", "running", n)
	}
	b.wg.Wait() // ctx is done: every run's context too
	return nil
}

func (b *Backfills) logger() *slog.Logger {
	if b.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return b.Logger
}

func (b *Backfills) staleAfter() time.Duration { return cmp.Or(b.StaleAfter, 15*time.Second) }

// source returns the declared source of that name.
func (b *Backfills) source(name string) (backfill.Source, bool) {
	for _, s := range b.Sources {
		if s.Name == name {
			return s.WithDefaults(), true
		}
	}
	return backfill.Source{}, false
}

// names are the declared sources' names.
func (b *Backfills) names() []string {
	out := make([]string, len(b.Sources))
	for i, s := range b.Sources {
		out[i] = s.Name
	}
	return out
}

// Here reports whether this process runs a backfill of the source.
func (b *Backfills) Here(name string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.running[name] != nil
}

// Errors of Start.
var (
	// ErrBackfillsStopped: the service is not running (starting, or the
	// process stops).
	ErrBackfillsStopped = errors.New("backfills cannot start: this process is starting or stopping")
	// ErrRunningHere: this process runs a backfill of the source already.
	ErrRunningHere = errors.New("a backfill of this source already runs in this process")
)

// Started is what Start saw of a backfill it started: the job once the
// backfill took it (nil when it had not within the wait).
type Started struct {
	Progress *backfill.Progress
	// Done is closed when the backfill returned; Err is then its error.
	Done chan struct{}
	Err  error
}

// Start starts (or resumes) the backfill of src in the background, owned
// by by (console:NAME), and waits up to wait for it to take its job and
// report its first progress, or to fail: an error it returns within that
// time (a RunningError when another process runs it, the source's query
// refused) is returned.
func (b *Backfills) Start(src backfill.Source, by string, wait time.Duration) (*Started, error) {
	b.mu.Lock()
	if b.base == nil || b.stopped {
		b.mu.Unlock()
		return nil, ErrBackfillsStopped
	}
	if b.running[src.Name] != nil {
		b.mu.Unlock()
		return nil, ErrRunningHere
	}
	ctx, cancel := context.WithCancel(b.base)
	if b.running == nil {
		b.running = map[string]*backfillRun{}
	}
	run := &backfillRun{cancel: cancel, by: by}
	b.running[src.Name] = run
	b.wg.Add(1)
	b.mu.Unlock()

	st := &Started{Done: make(chan struct{})}
	first := make(chan backfill.Progress, 1)
	log := b.logger().With("source", src.Name, "by", by)
	go func() {
		defer b.wg.Done()
		defer close(st.Done)
		defer func() {
			cancel()
			b.mu.Lock()
			if b.running[src.Name] == run {
				delete(b.running, src.Name)
			}
			b.mu.Unlock()
		}()
		res, err := backfill.Run(ctx, backfill.Config{Pool: b.Pool, Schema: b.Schema, Source: src, StaleAfter: b.staleAfter(),
			Owner: by + "@" + backfill.NewOwner(), Logger: b.Logger,
			OnProgress: func(p backfill.Progress) {
				select {
				case first <- p:
				default:
				}
			}})
		st.Err = err
		switch {
		case err == nil:
			log.Info("console backfill: done", "rows", res.Rows, "chunks", res.Chunks, "seconds", res.Seconds, "resumed", res.Resumed)
		case errors.Is(err, context.Canceled):
			log.Info("console backfill: stopped with the process; the job is released and resumes at the next start")
		case errors.Is(err, backfill.ErrLost):
			log.Info("console backfill: stopped: the job was aborted or taken over")
		default:
			log.Warn("console backfill: interrupted; the job resumes at the next start", "err", err)
		}
	}()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case p := <-first:
		st.Progress = &p
		return st, nil
	case <-st.Done:
		if st.Err != nil {
			return nil, st.Err
		}
		return st, nil
	case <-t.C:
		return st, nil
	}
}

// LatestBackfills returns the newest backfill job of every source that has
// one: of each of names (the declared sources, in their order), then of
// any other source with a job (no longer declared), newest first. A running
// or interrupted job is always its source's newest (a source has at most
// one running job, and none starts before it ends). One statement
// (backfill.Latest).
func LatestBackfills(ctx context.Context, db JobsDB, names []string, staleAfter time.Duration) ([]backfill.JobInfo, error) {
	latest, err := backfill.Latest(ctx, db, staleAfter)
	if err != nil {
		return nil, err
	}
	bySource := make(map[string]backfill.JobInfo, len(latest))
	for _, j := range latest {
		bySource[j.Source] = j
	}
	var out []backfill.JobInfo
	for _, n := range names {
		if j, ok := bySource[n]; ok {
			out = append(out, j)
			delete(bySource, n)
		}
	}
	for _, j := range latest { // the sources no longer declared, newest first
		if _, ok := bySource[j.Source]; ok {
			out = append(out, j)
		}
	}
	return out, nil
}

// describeStart is the log and answer text of a start.
func describeStart(src string, p *backfill.Progress) string {
	if p == nil {
		return fmt.Sprintf("backfill of %s started; it is still counting the source's rows", src)
	}
	if p.Rows > 0 {
		return fmt.Sprintf("backfill of %s resumed after %d rows", src, p.Rows)
	}
	return fmt.Sprintf("backfill of %s started: %d rows to write", src, p.Total)
}
