package compaction

import (
	"context"
	"errors"
	"time"

	"github.com/searchsync/searchsync/internal/background"
)

// Scheduler runs the compactor every Config.Interval. Every relay instance
// may run one: the job slot lets one run at a time, and an instance skips its
// turn when any instance completed a run within the last interval, so the
// cluster compacts about once per interval.
type Scheduler struct {
	c *Compactor
}

// NewScheduler returns a scheduler for c.
func NewScheduler(c *Compactor) *Scheduler { return &Scheduler{c: c} }

// Name is the scheduler's name among the background services.
func (s *Scheduler) Name() string { return "compaction scheduler" }

// Run compacts at start and then one interval after each turn ends, until
// ctx ends; it returns nil at once when the interval is negative (schedule
// disabled). Failures are logged and retried at the next turn; they never
// end Run.
func (s *Scheduler) Run(ctx context.Context) error {
	interval := s.c.cfg.Interval
	if interval < 0 {
		s.c.logger.Info("compaction: schedule disabled (compaction.interval < 0); run `searchsync compact` on demand")
		return nil
	}
	background.Loop{
		Interval:  interval,
		Immediate: true,
		Pace:      func(took time.Duration) time.Duration { return took + interval },
		Turn:      func(ctx context.Context) error { s.turn(ctx); return nil },
	}.Run(ctx)
	return nil
}

// turn runs the compactor unless a run completed within the last interval.
func (s *Scheduler) turn(ctx context.Context) {
	log := s.c.logger
	var recent bool
	if err := s.c.db.QueryRow(ctx, s.c.q.recentRun, JobKind, s.c.cfg.Interval.Seconds()).Scan(&recent); err != nil {
		if ctx.Err() == nil {
			log.Warn("compaction: cannot read the last run; trying again next interval", "error", err)
		}
		return
	}
	if recent {
		log.Debug("compaction: a run completed within the interval; skipping this turn")
		return
	}
	_, err := s.c.Run(ctx)
	switch {
	case err == nil, ctx.Err() != nil:
	case errors.Is(err, ErrAlreadyRunning):
		log.Debug("compaction: another instance is running it", "error", err)
	default:
		log.Warn("compaction: run failed; trying again next interval", "error", err)
	}
}
