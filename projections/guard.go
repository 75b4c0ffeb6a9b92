//go:build !searchsync_mutate_no_source_guard

package projections

// sourceGuard keeps the per-source version guard of LinkedFold on. The
// build tag searchsync_mutate_no_source_guard turns it off (guard_mutated.go)
// for the mutation check of the relation property test only; production
// builds never set it.
const sourceGuard = true
