package lag

import (
	"cmp"
	"context"
	"log/slog"
	"sync"
	"time"
)

// Point is one sample of the history the dashboard draws.
type Point struct {
	At               time.Time `json:"at"`
	Pending          int64     `json:"pending"`
	Failed           int64     `json:"failed"`
	OldestPendingAge float64   `json:"oldest_pending_age_seconds"`
	DeliverableLag   float64   `json:"deliverable_lag_seconds"`
	DeliveredRate    float64   `json:"delivered_per_second"`
	// ConsumerLag is each consumer's deliverable lag; ConsumerBlocked its
	// blocked aggregates (all causes but paused), ConsumerPaused 1 while it
	// is paused.
	ConsumerLag     map[string]float64 `json:"consumer_lag_seconds"`
	ConsumerBlocked map[string]int64   `json:"consumer_blocked_aggregates"`
	ConsumerPaused  map[string]int     `json:"consumer_paused"`
}

// SamplerConfig configures a Sampler.
type SamplerConfig struct {
	// Interval between samples. Default 2s.
	Interval time.Duration
	// History is how much history is kept. Default 1h.
	History time.Duration
}

// Sampler keeps a current Snapshot and the last hour of Points. It is safe for
// concurrent use.
type Sampler struct {
	r      *Reader
	cfg    SamplerConfig
	logger *slog.Logger

	mu      sync.RWMutex
	last    *Snapshot
	history []Point
}

// NewSampler returns a Sampler over r.
func NewSampler(r *Reader, cfg SamplerConfig, logger *slog.Logger) *Sampler {
	cfg.Interval = cmp.Or(cfg.Interval, 2*time.Second)
	cfg.History = cmp.Or(cfg.History, time.Hour)
	return &Sampler{r: r, cfg: cfg, logger: logger}
}

// Run samples until ctx ends. A sample waits for the interval, or for
// maxDuty (5) times as long as the last read took when that is longer, so
// that a large backlog never keeps the database busy with lag queries for
// more than a fifth of the time.
func (s *Sampler) Run(ctx context.Context) {
	for {
		start := time.Now()
		if _, err := s.Sample(ctx); err != nil && ctx.Err() == nil {
			s.logger.Warn("lag sample failed", "err", err)
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

// Sample takes a snapshot now, records it in the history and returns it.
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
	pt := Point{At: snap.At, Pending: snap.Pending, Failed: snap.Failed, OldestPendingAge: snap.OldestPendingAge,
		DeliverableLag: snap.DeliverableLag, DeliveredRate: snap.DeliveredRate,
		ConsumerLag: map[string]float64{}, ConsumerBlocked: map[string]int64{}, ConsumerPaused: map[string]int{}}
	for _, c := range snap.Consumers {
		pt.ConsumerLag[c.Name] = c.DeliverableLag
		pt.ConsumerBlocked[c.Name] = c.Blocked.Failed.Aggregates + c.Blocked.BackingOff.Aggregates
		if c.Paused != nil {
			pt.ConsumerPaused[c.Name] = 1
		} else {
			pt.ConsumerPaused[c.Name] = 0
		}
	}
	s.history = append(s.history, pt)
	cut := 0
	for cut < len(s.history) && snap.At.Sub(s.history[cut].At) > s.cfg.History {
		cut++
	}
	s.history = s.history[cut:]
	return snap, nil
}

// Last returns the latest snapshot, or nil before the first sample.
func (s *Sampler) Last() *Snapshot {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.last
}

// History returns a copy of the kept points, oldest first.
func (s *Sampler) History() []Point {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return append([]Point(nil), s.history...)
}
