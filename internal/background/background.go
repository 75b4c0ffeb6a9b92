// Package background owns the shape of the relay's background services
// (the lag sampler, the console history, the compaction scheduler, the
// searchable and drift watchers, the reindex janitor): the Service that
// `searchsync run` starts under its supervisor, and the Loop each of them
// runs its turns in. Each service keeps its own timing and log lines; the
// loop is what they share. It imports nothing of the module.
package background

import (
	"context"
	"log/slog"
	"time"
)

// Service is one background service of `searchsync run`. Run works until
// ctx ends and returns nil then; it returns earlier only when the service
// cannot go on, which stops the process. Name names the service in the
// supervisor's log lines and errors ("lag sampler").
type Service interface {
	Name() string
	Run(ctx context.Context) error
}

// Loop runs a service's turns, one every Interval, until ctx ends. The zero
// value of every field but Interval and Turn is a default.
type Loop struct {
	// Interval is the time from the start of one turn to the start of the
	// next (a turn that took longer is followed by the next at once).
	// Required (> 0).
	Interval time.Duration
	// Immediate runs the first turn at once; otherwise it comes one
	// Interval after Run started.
	Immediate bool
	// Pace, when set, replaces Interval with the time it returns from the
	// start of a turn that took took to the start of the next: a service
	// that adapts its pace to the work (the lag sampler's duty cycle), or
	// waits a whole interval after a turn ends (the compaction scheduler).
	Pace func(took time.Duration) time.Duration
	// Turn does one turn. An error it returns while ctx is not done is
	// logged (Failed) and the turn is tried again at the next; a turn that
	// logs for itself returns nil. Required.
	Turn func(ctx context.Context) error
	// Logger receives the failed turns. Default: discard.
	Logger *slog.Logger
	// Failed is the WARN line of a failed turn, its error under "err".
	Failed string
	// Recovered, when set, logs a run of failed turns once instead of at
	// every turn, so that a lost database does not write a line every
	// interval: Failed (WARN) at the first, FailedAgain (DEBUG) at the next
	// ones, and Recovered (INFO) at the first turn that succeeds after them.
	Recovered, FailedAgain string
}

// Run runs turns until ctx ends. A turn in progress is not interrupted by
// Run: it sees ctx end and returns.
func (l Loop) Run(ctx context.Context) {
	wait := l.Interval
	if l.Immediate {
		wait = 0
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		if ctx.Err() != nil {
			return
		}
		start := time.Now()
		failing = l.log(ctx, l.Turn(ctx), failing)
		took := time.Since(start)
		next := l.Interval
		if l.Pace != nil {
			next = l.Pace(took)
		}
		timer.Reset(max(0, next-took))
	}
}

// log logs a turn's outcome and reports whether the turns are failing.
func (l Loop) log(ctx context.Context, err error, failing bool) bool {
	logger := l.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case err != nil && ctx.Err() != nil: // stopping: not worth a line
		return failing
	case err != nil && l.Recovered == "":
		logger.Warn(l.Failed, "err", err)
	case err != nil && !failing:
		logger.Warn(l.Failed, "err", err)
	case err != nil:
		logger.Debug(l.FailedAgain, "err", err)
	case failing && l.Recovered != "":
		logger.Info(l.Recovered)
	}
	return err != nil
}
