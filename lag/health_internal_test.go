package lag

import (
	"slices"
	"strings"
	"testing"
)

func TestHealthVerdicts(t *testing.T) {
	running := func(name string) ConsumerLag { return ConsumerLag{Name: name, State: "running"} }
	failing := running("search")
	failing.Failed = 2
	failing.Blocked.Failed = BlockedFigure{Aggregates: 1, HeadID: 7, Why: "engine answered 400: mapper_parsing_exception\nmore"}
	backing := running("hook")
	backing.Blocked.BackingOff = BlockedFigure{Aggregates: 3, HeadID: 9, Why: "HTTP 503"}
	paused := running("queue")
	paused.State, paused.Paused = "paused", &Pause{Age: 75, Reason: "nats: no servers available"}
	paused.Blocked.Paused.Events = 40
	for _, c := range []struct {
		name      string
		snap      Snapshot
		want      string
		consumers []string
		reason    string
	}{
		{"healthy", Snapshot{Relays: Relays{Live: 1}, Consumers: []ConsumerLag{running("search"), running("hook")}}, HealthHealthy, []string{"healthy", "healthy"}, ""},
		{"failed event", Snapshot{Relays: Relays{Live: 2}, Consumers: []ConsumerLag{failing, running("hook")}}, HealthDegraded, []string{"failing", "healthy"},
			"search: 2 failed events hold 1 aggregate for an operator (oldest: event 7, engine answered 400: mapper_parsing_exception)"},
		{"backing off", Snapshot{Relays: Relays{Live: 1}, Consumers: []ConsumerLag{backing}}, HealthDegraded, []string{"degraded"},
			"hook: 3 aggregates backing off after errors (oldest: event 9, HTTP 503)"},
		{"one of two paused", Snapshot{Relays: Relays{Live: 1}, Consumers: []ConsumerLag{paused, running("search")}}, HealthDegraded, []string{"paused", "healthy"},
			"queue: paused for 1m15s, 40 events held: nats: no servers available"},
		{"every consumer paused", Snapshot{Relays: Relays{Live: 1}, Consumers: []ConsumerLag{paused}}, HealthDown, []string{"paused"}, "queue: paused"},
		{"no live relay", Snapshot{Consumers: []ConsumerLag{{Name: "search", State: StateNoRelay}}}, HealthDown, []string{"down"}, "no live relay"},
		{"out of order", Snapshot{Relays: Relays{Live: 1}, Consumers: []ConsumerLag{running("search")}, OutOfOrder: OutOfOrder{Last24h: 3}}, HealthDegraded, []string{"healthy"},
			"3 events delivered out of id order"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.snap.judge()
			var got []string
			for _, cl := range c.snap.Consumers {
				got = append(got, cl.Health)
			}
			if c.snap.Health.State != c.want || !slices.Equal(got, c.consumers) {
				t.Errorf("health %s, consumers %v; want %s, %v", c.snap.Health.State, got, c.want, c.consumers)
			}
			if all := strings.Join(c.snap.Health.Reasons, " | "); !strings.Contains(all, c.reason) || (c.reason == "") != (all == "") {
				t.Errorf("reasons %q, want one with %q", all, c.reason)
			}
		})
	}
}
