package lag

import (
	"cmp"
	"context"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/searchsync/searchsync/internal/background"
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
	// failing is the error of the samples since failingSince, nil while
	// they succeed.
	failing      error
	failingSince time.Time
}

// Failing returns since when samples fail and the latest one's error (nil
// while they succeed): the outbox cannot be read, and Last is from before.
func (s *Sampler) Failing() (time.Time, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.failingSince, s.failing
}

// NewSampler returns a Sampler over r.
func NewSampler(r *Reader, cfg SamplerConfig, logger *slog.Logger) *Sampler {
	cfg.Interval = cmp.Or(cfg.Interval, 2*time.Second)
	return &Sampler{r: r, cfg: cfg, logger: logger}
}

// Name is the sampler's name among the background services.
func (s *Sampler) Name() string { return "lag sampler" }

// Run samples until ctx ends, then returns nil. A sample waits for the
// interval, or for maxDuty (5) times as long as the last read took when
// that is longer, so that a large backlog never keeps the database busy
// with lag queries for more than a fifth of the time.
//
// A failing sample is logged once (WARN) until one succeeds again (INFO),
// not at every interval: a lost database would otherwise write a line
// every few seconds beside the relay's own.
func (s *Sampler) Run(ctx context.Context) error {
	background.Loop{
		Interval:  s.cfg.Interval,
		Immediate: true,
		Pace:      func(took time.Duration) time.Duration { return max(s.cfg.Interval, maxDuty*took) },
		Turn: func(ctx context.Context) error {
			_, err := s.Sample(ctx)
			return err
		},
		Logger:      s.logger,
		Failed:      "lag sample failed; retrying every interval (logged again when it recovers)",
		FailedAgain: "lag sample failed",
		Recovered:   "lag sample recovered",
	}.Run(ctx)
	return nil
}

// maxDuty: a sample starts at least maxDuty times its last read's duration
// after the previous one started.
const maxDuty = 5

// Sample takes a snapshot now, keeps it as the latest and returns it.
func (s *Sampler) Sample(ctx context.Context) (*Snapshot, error) {
	prev := s.Last()
	var from time.Time
	if prev != nil {
		from = prev.CountedUntil
	}
	snap, err := s.r.ReadSince(ctx, from)
	if err != nil {
		if ctx.Err() == nil {
			s.mu.Lock()
			if s.failing == nil {
				s.failingSince = time.Now()
			}
			s.failing = err
			s.mu.Unlock()
		}
		return nil, err
	}
	// The counts add up from window to window; a window that was empty
	// (two samples in one second) shows the previous window's rates.
	if prev != nil && snap.RateFrom.Equal(from) {
		counts := snap.Delivered
		snap.Delivered = maps.Clone(prev.Delivered)
		for k, n := range counts {
			snap.Delivered[k] += n
		}
		if !snap.RateFrom.Before(snap.RateUntil) {
			snap.RateFrom, snap.RateUntil = prev.RateFrom, prev.RateUntil
			snap.DeliveredRate = prev.DeliveredRate
			for i := range snap.Consumers {
				for _, p := range prev.Consumers {
					if p.Name == snap.Consumers[i].Name {
						snap.Consumers[i].DeliveredRate = p.DeliveredRate
					}
				}
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last, s.failing = snap, nil
	return snap, nil
}

// Last returns the latest snapshot, or nil before the first sample.
func (s *Sampler) Last() *Snapshot {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.last
}
