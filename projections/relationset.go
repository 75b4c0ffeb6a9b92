package projections

import (
	"fmt"
	"slices"

	"github.com/searchsync/searchsync/outbox"
)

// AddRelations checks relation declarations and adds them to the set.
func (s *Set) AddRelations(rs ...Relation) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range rs {
		r := rs[i]
		if err := r.check(); err != nil {
			return err
		}
		if s.declared(r.Name) {
			return fmt.Errorf("relation %q: a projection or relation of that name is declared already", r.Name)
		}
		r.setDefaults()
		s.relations = append(s.relations, &r)
	}
	s.found.Clear()
	return nil
}

// declared reports whether a projection or relation is named name (s.mu held).
func (s *Set) declared(name string) bool {
	for _, p := range s.projections {
		if p.Name == name {
			return true
		}
	}
	for _, r := range s.relations {
		if r.Name == name {
			return true
		}
	}
	return false
}

// Relations returns the declared relations (read only).
func (s *Set) Relations() []*Relation {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Clone(s.relations)
}

// Linked reports whether a relation reaches documents of index: an index
// that is an endpoint of a relation. Its documents carry the versions of
// every source that wrote them (docs/relations.md) and are written
// conditioned on their sequence number instead of an external version.
func (s *Set) Linked(index string) bool {
	for _, r := range s.Relations() {
		if r.Source.Index == index || r.Target.Index == index {
			return true
		}
	}
	return false
}

// RelationFields returns the fields of index's documents that list relations.
func (s *Set) RelationFields(index string) []string {
	var out []string
	for _, r := range s.Relations() {
		for _, ep := range []*Endpoint{&r.Source, &r.Target} {
			if ep.Index == index && ep.Field != "" && !slices.Contains(out, ep.Field) {
				out = append(out, ep.Field)
			}
		}
	}
	return out
}

// findRelation returns the relation for an event type and aggregate type
// that reaches one of indexes (all when empty), or nil.
func (s *Set) findRelation(eventType, aggregateType string, indexes []string) *Relation {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, r := range s.relations {
		if !r.proj.Matches(eventType, aggregateType) {
			continue
		}
		if len(indexes) == 0 || slices.Contains(indexes, r.Source.Index) || slices.Contains(indexes, r.Target.Index) {
			return r
		}
	}
	return nil
}

// ProjectAll projects one event into every document it reaches in
// indexes: the one result of an entity projection (Project), or the
// results of a relation's event (one per document it reaches, each with
// its Link). A projection takes precedence over a relation for the same
// event type. No match gives (nil, nil).
func (s *Set) ProjectAll(e *outbox.Event, indexes []string, versionPath func(index string) string) ([]*Result, error) {
	res, err := s.Project(e, indexes, versionPath)
	if err != nil || res != nil {
		if res == nil {
			return nil, err
		}
		return []*Result{res}, err
	}
	r := s.findRelation(e.EventType, e.AggregateType, indexes)
	if r == nil {
		return nil, nil
	}
	payload, err := s.Upcast(e, r.proj.SchemaVersion)
	if err != nil {
		return nil, err
	}
	return r.project(e, payload, indexes)
}

// Endpoint returns the declaration of the endpoint whose documents in
// index list relations in field, nil when none does.
func (s *Set) Endpoint(index, field string) *Endpoint {
	for _, r := range s.Relations() {
		for _, ep := range []*Endpoint{&r.Source, &r.Target} {
			if ep.Index == index && ep.Field == field {
				return ep
			}
		}
	}
	return nil
}

// OtherIndex returns the index of the other endpoint of the relations that
// index's documents list in field ("" when none does).
func (s *Set) OtherIndex(index, field string) string {
	for _, r := range s.Relations() {
		for _, pair := range r.endpoints() {
			if pair[0].Index == index && pair[0].Field == field {
				return pair[1].Index
			}
		}
	}
	return ""
}
