//go:build searchsync_mutate_no_source_guard

package projections

// sourceGuard is off: a mutant build for the relation property test's
// mutation check (sink/search, TestRelationPropertyFailsWithoutTheSourceGuard).
// Never build production with this tag.
const sourceGuard = false
