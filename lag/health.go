package lag

import (
	"fmt"
	"strings"
)

// Health states of a consumer and of the whole outbox (Snapshot.Health),
// the console's health line and `status`'s first line.
const (
	// HealthHealthy: it delivers, nothing is failed, backing off or paused.
	HealthHealthy = "healthy"
	// HealthDegraded: it delivers, but some aggregates back off after
	// errors (a consumer), or something is not healthy (the whole).
	HealthDegraded = "degraded"
	// HealthFailing: events failed for it; their aggregates wait for an
	// operator.
	HealthFailing = "failing"
	// HealthPaused: its engine, endpoint or server is unavailable; it is
	// probed and resumes by itself.
	HealthPaused = "paused"
	// HealthDown: nothing delivers (no live relay, or no consumer can).
	HealthDown = "down"
)

// Health is the verdict on the whole outbox with the reasons behind it,
// one sentence each, the most serious first.
type Health struct {
	State   string   `json:"state"`
	Reasons []string `json:"reasons,omitempty"`
}

// judge sets the health of every consumer and of the whole snapshot.
func (s *Snapshot) judge() {
	var reasons []string
	delivering := 0
	for i := range s.Consumers {
		c := &s.Consumers[i]
		c.Health, c.HealthReason = c.judge()
		if s.Relays.Live == 0 {
			c.Health, c.HealthReason = HealthDown, "no live relay delivers to it"
		}
		if c.Health != HealthHealthy {
			reasons = append(reasons, c.Name+": "+c.HealthReason)
		}
		if c.Health != HealthPaused && c.Health != HealthDown {
			delivering++
		}
	}
	switch {
	case s.Relays.Live == 0:
		s.Health = Health{State: HealthDown, Reasons: []string{"no live relay: nothing is delivered (start searchsync run)"}}
		return
	case len(s.Consumers) > 0 && delivering == 0:
		s.Health = Health{State: HealthDown, Reasons: reasons}
		return
	}
	if o := s.OutOfOrder.Last24h; o > 0 {
		reasons = append(reasons, fmt.Sprintf("%d events delivered out of id order in the last 24 h: a producer skips the aggregate lock (docs/ordering.md)", o))
	}
	if len(reasons) > 0 {
		s.Health = Health{State: HealthDegraded, Reasons: reasons}
		return
	}
	s.Health = Health{State: HealthHealthy}
}

// judge is one consumer's health and its reason ("" when healthy), while
// a relay is alive.
func (c *ConsumerLag) judge() (string, string) {
	switch {
	case c.Paused != nil:
		return HealthPaused, fmt.Sprintf("paused for %s, %d events held: %s", ageText(c.Paused.Age), c.Blocked.Paused.Events, oneLine(c.Paused.Reason))
	case c.Failed > 0:
		f := c.Blocked.Failed
		return HealthFailing, fmt.Sprintf("%d failed %s %d %s for an operator (oldest: event %d, %s)",
			c.Failed, plural(c.Failed, "event holds", "events hold"), f.Aggregates, plural(f.Aggregates, "aggregate", "aggregates"), f.HeadID, oneLine(f.Why))
	case c.Blocked.BackingOff.Aggregates > 0:
		b := c.Blocked.BackingOff
		return HealthDegraded, fmt.Sprintf("%d %s backing off after errors (oldest: event %d, %s)",
			b.Aggregates, plural(b.Aggregates, "aggregate", "aggregates"), b.HeadID, oneLine(b.Why))
	}
	return HealthHealthy, ""
}

func plural(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// oneLine keeps the first line of a reason, at most 160 characters.
func oneLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return Truncate(s, 160)
}

// ageText prints seconds as 12s, 3m4s or 2h5m.
func ageText(sec float64) string {
	n := int64(sec + 0.5)
	switch {
	case n < 60:
		return fmt.Sprintf("%ds", n)
	case n < 3600:
		return fmt.Sprintf("%dm%ds", n/60, n%60)
	}
	return fmt.Sprintf("%dh%dm", n/3600, n%3600/60)
}
