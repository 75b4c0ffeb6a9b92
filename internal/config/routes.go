package config

import (
	"fmt"
	"maps"
	"path"
	"slices"

	"github.com/searchsync/searchsync/routing"
)

// Route sends matching events to consumers. Patterns use path.Match syntax
// ("entity.customer.*"); an empty list matches everything.
type Route struct {
	// Consumer names a configured consumer. Required.
	Consumer string `yaml:"consumer"`
	// EventTypes are patterns on event_type.
	EventTypes []string `yaml:"event_types"`
	// Snapshots says whether the route takes snapshot events (event types
	// ending in ".snapshot", written by a backfill). Default: true for a
	// search consumer, false for every other (docs/backfill.md).
	Snapshots *bool `yaml:"snapshots"`
	// AggregateTypes are patterns on aggregate_type.
	AggregateTypes []string `yaml:"aggregate_types"`
}

// validateRoutes checks the routes against the consumers' names.
func (c *Config) validateRoutes(v *validator, names map[string]bool) {
	for i, r := range c.Routes {
		key := fmt.Sprintf("routes[%d]", i)
		if r.Consumer == "" {
			v.add(key+".consumer", "is required")
		} else if !names[r.Consumer] {
			// With a consumer's name unread, an unknown name may be its
			// name: only a likely typo of another is reported.
			near := DidYouMean(r.Consumer, slices.Sorted(maps.Keys(names)))
			if near != "" || !c.unreadMatch(consumerNamesUnread) {
				v.add(key+".consumer", fmt.Sprintf("names unknown consumer %q%s", r.Consumer, near))
			}
		}
		for j, p := range r.EventTypes {
			if _, err := path.Match(p, ""); err != nil {
				v.add(fmt.Sprintf("%s.event_types[%d]", key, j), fmt.Sprintf("bad pattern %q: %v", p, err))
			}
		}
		for j, p := range r.AggregateTypes {
			if _, err := path.Match(p, ""); err != nil {
				v.add(fmt.Sprintf("%s.aggregate_types[%d]", key, j), fmt.Sprintf("bad pattern %q: %v", p, err))
			}
		}
	}
}

// Rule is the route as package routing takes it, to a consumer of
// consumerType.
func (r Route) Rule(consumerType string) routing.Route {
	snapshots := consumerType == "search"
	if r.Snapshots != nil {
		snapshots = *r.Snapshots
	}
	return routing.Route{Consumer: r.Consumer, EventTypes: r.EventTypes, AggregateTypes: r.AggregateTypes, SkipSnapshots: !snapshots}
}

// Routing is the routing table of consumers and routes: the one place the
// relay, the operator admin, the lag read model and the commands ask which
// events go to which consumer.
func Routing(consumers []Consumer, routes []Route) *routing.Table {
	t := &routing.Table{}
	types := map[string]string{}
	for _, c := range consumers {
		t.Consumers = append(t.Consumers, c.Name)
		types[c.Name] = c.Type
	}
	for _, r := range routes {
		t.Routes = append(t.Routes, r.Rule(types[r.Consumer]))
	}
	return t
}

// Routing is the configuration's routing table.
func (c *Config) Routing() *routing.Table { return Routing(c.Consumers, c.Routes) }
