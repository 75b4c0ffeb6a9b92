package main

import (
	"os"
	"runtime/debug"
)

// defaultGCPercent is the garbage collector's target of searchsync unless
// GOGC is set: the heap may grow to 5 times what is live before a
// collection (Go's default, 100, lets it double). The consumer makes a lot
// of short-lived garbage per event (decoded payloads, documents) on a small
// live heap, so with 100 the collector ran often: 7-14 µs of CPU per event
// of the 20-30 the realistic benchmark measured, 1.3-1.6 µs with 400, for a
// peak heap of about 165 MiB instead of 30-50 (docs/benchmarks.md). GOGC
// set in the environment wins, GOMEMLIMIT caps the heap as in any Go
// program.
//
// BenchmarkEndToEndRealistic applies the same default.
const defaultGCPercent = 400

// setGCPercent applies defaultGCPercent unless the environment sets GOGC.
func setGCPercent() {
	if _, ok := os.LookupEnv("GOGC"); !ok {
		debug.SetGCPercent(defaultGCPercent)
	}
}
