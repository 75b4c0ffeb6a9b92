// Package routing owns which events go to which consumer: routes of a
// consumer name, event type patterns and aggregate type patterns
// (path.Match globs, none meaning all), in a Table in the configuration's
// order; and which routes take snapshot events (event types ending in
// ".snapshot", written by a backfill: docs/backfill.md). The relay, the operator admin (outbox), the lag read model and the
// commands all ask a Table, so a rule of routing lives here alone.
package routing

import (
	"path"
	"strings"
)

// Route sends the events whose event type matches one of EventTypes and
// whose aggregate type matches one of AggregateTypes (an empty list matches
// everything) to Consumer.
type Route struct {
	Consumer       string
	EventTypes     []string
	AggregateTypes []string
	// SkipSnapshots keeps snapshot events (IsSnapshot) away from the
	// consumer whatever its patterns say. The configuration sets it on the
	// routes of every consumer but search ones, unless a route says
	// `snapshots: true`.
	SkipSnapshots bool
}

// SnapshotSuffix ends the event type of every snapshot event: the whole
// state of an aggregate at a version, written by a backfill rather than by
// a change.
const SnapshotSuffix = ".snapshot"

// IsSnapshot reports whether eventType names a snapshot event.
func IsSnapshot(eventType string) bool { return strings.HasSuffix(eventType, SnapshotSuffix) }

// Matches reports whether the route takes an event of this type and
// aggregate type.
func (r Route) Matches(eventType, aggregateType string) bool {
	if r.SkipSnapshots && IsSnapshot(eventType) {
		return false
	}
	return matchAny(r.EventTypes, eventType) && matchAny(r.AggregateTypes, aggregateType)
}

func matchAny(patterns []string, s string) bool {
	if len(patterns) == 0 {
		return true
	}
	for _, p := range patterns {
		if ok, _ := path.Match(p, s); ok {
			return true
		}
	}
	return false
}

// Table is the configured consumers, in order, and the routes to them.
type Table struct {
	Consumers []string
	Routes    []Route
}

// Routed reports whether any route sends this kind of event to consumer.
func (t *Table) Routed(consumer, eventType, aggregateType string) bool {
	for _, r := range t.Routes {
		if r.Consumer == consumer && r.Matches(eventType, aggregateType) {
			return true
		}
	}
	return false
}

// To lists the consumers this kind of event goes to, in the order of
// Consumers.
func (t *Table) To(eventType, aggregateType string) []string {
	var out []string
	for _, c := range t.Consumers {
		if t.Routed(c, eventType, aggregateType) {
			out = append(out, c)
		}
	}
	return out
}
