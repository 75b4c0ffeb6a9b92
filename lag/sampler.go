package lag

import (
	"cmp"
	"context"
	"log/slog"
	"sync"
	"time"
)

// SamplerConfig configures a Sampler.
type SamplerConfig struct {
	// Interval between samples. Default 2s.
	Interval time.Duration
}

// Sampler keeps a current Snapshot (the history the console draws is kept in
// PostgreSQL by package dashboard). It is safe for concurrent use.
type Sampler struct {
	r      *Reader
	cfg    SamplerConfig
	logger *slog.Logger

	mu   sync.RWMutex
	last *Snapshot
}

// NewSampler returns a Sampler over r.
func NewSampler(r *Reader, cfg SamplerConfig, logger *slog.Logger) *Sampler {
	cfg.Interval = cmp.Or(cfg.Interval, 2*time.Second)
	return &Sampler{r: r, cfg: cfg, logger: logger}
}

// Run samples until ctx ends. A sample waits for the interval, or for
// maxDuty (5) times as long as the last read took when that is longer, so
// that a large backlog never keeps the database busy with lag queries for
// more than a fifth of the time.
//
// A failing sample is logged once (WARN) until one succeeds again (INFO),
// not at every interval: a lost database would otherwise write a line
// every few seconds beside the relay's own.
func (s *Sampler) Run(ctx context.Context) {
	failing := false
	for {
		start := time.Now()
		_, err := s.Sample(ctx)
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			s.logger.Warn("lag sample failed; retrying every interval (logged again when it recovers)", "err", err)
			failing = true
		case err != nil && ctx.Err() == nil:
			s.logger.Debug("lag sample failed", "err", err)
		case err == nil && failing:
			s.logger.Info("lag sample recovered")
			failing = false
		}
		wait := max(s.cfg.Interval, maxDuty*time.Since(start)) - time.Since(start)
		select {
		case <-ctx.Done():
			return
		case <-time.After(max(0, wait)):
		}
	}
}

// maxDuty: a sample starts at least maxDuty times its last read's duration
// after the previous one started.
const maxDuty = 5

// Sample takes a snapshot now, keeps it as the latest and returns it.
func (s *Sampler) Sample(ctx context.Context) (*Snapshot, error) {
	snap, err := s.r.Read(ctx)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.last; p != nil {
		if dt := snap.At.Sub(p.At).Seconds(); dt > 0 {
			handled := float64(snap.LastID-p.LastID) - float64((snap.Pending+snap.Failed)-(p.Pending+p.Failed))
			snap.DeliveredRate = max(0, handled/dt)
		}
	}
	s.last = snap
	return snap, nil
}

// Last returns the latest snapshot, or nil before the first sample.
func (s *Sampler) Last() *Snapshot {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.last
}
