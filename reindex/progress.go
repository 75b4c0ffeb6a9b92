package reindex

import (
	"context"
	"errors"
	"time"
)

func (r *Reindexer) heartbeats(ctx context.Context, cancel context.CancelCauseFunc, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(r.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if r.finished.Load() {
			return
		}
		if err := r.saveProgress(ctx); errors.Is(err, ErrLost) && !r.finished.Load() {
			r.log.Error("reindex: the job was aborted or taken over; stopping")
			cancel(ErrLost)
			return
		} else if err != nil && ctx.Err() == nil {
			r.log.Warn("reindex: heartbeat failed", "error", err.Error())
		}
	}
}

func (r *Reindexer) saveProgress(ctx context.Context) error {
	r.saveMu.Lock() // the heartbeat and the seed's task callback both save
	defer r.saveMu.Unlock()
	p := r.snapshot()
	if r.cfg.OnProgress != nil {
		r.cfg.OnProgress(p)
	}
	if r.job == nil {
		return nil
	}
	r.job.Progress = p
	return r.job.heartbeat(ctx, r.cfg.Pool)
}

func (r *Reindexer) snapshot() Progress {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.progress
	p.Stale = r.w.stale.Load()
	p.Poison = r.poison.Load()
	p.SeedNewer = r.skipped.Load() + r.skippedEvents.Load()
	return p
}

func (r *Reindexer) update(fn func(p *Progress)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fn(&r.progress)
}

func (r *Reindexer) setPhase(phase string) {
	r.update(func(p *Progress) { p.Phase = phase; p.Rate = 0; p.ETA = "" })
	r.log.Info("reindex: phase", "phase", phase)
}

// rate is a moving docs/s figure.
type rate struct {
	start time.Time
	n     int64
}

func (r *rate) perSecond(n int64) float64 {
	d := time.Since(r.start).Seconds()
	if d <= 0 {
		return 0
	}
	return float64(n-r.n) / d
}
