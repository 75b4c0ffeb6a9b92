package main

import (
	"errors"
	"log/slog"
	"math"
	"os"
	"runtime/debug"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// defaultGCPercent is the garbage collector's target of searchsync unless
// GOGC is set: the heap may grow to 5 times what is live before a
// collection (Go's default, 100, lets it double). The consumer makes a lot
// of short-lived garbage per event (decoded payloads, documents) on a small
// live heap, so with 100 the collector ran often: 7-14 µs of CPU per event
// of the 20-30 the realistic benchmark measured, 1.3-1.6 µs with 400, for a
// peak heap of about 165 MiB instead of 30-50 (docs/benchmarks.md). GOGC
// set in the environment wins. A memory limit (GOMEMLIMIT, or the one
// setMemoryLimit takes from the container) makes the collector run as
// often as it must to stay under it, whatever GOGC says: docs/memory.md.
//
// BenchmarkEndToEndRealistic applies the same default.
const defaultGCPercent = 400

// setGCPercent applies defaultGCPercent unless the environment sets GOGC.
func setGCPercent() {
	if _, ok := os.LookupEnv("GOGC"); !ok {
		debug.SetGCPercent(defaultGCPercent)
	}
}

// setMemoryLimit gives the runtime a soft memory limit of 90 % of the
// container's (cgroup memory.max), so that a relay in a container collects
// harder near its limit instead of being killed: unless GOMEMLIMIT is set
// (it wins) or AUTOMEMLIMIT=off. AUTOMEMLIMIT=0.8 takes another share
// (github.com/KimMachineGun/automemlimit, which reads the cgroup). It logs
// the limit in force, if any.
func setMemoryLimit(logger *slog.Logger) {
	limit, err := memlimit.Set(memlimit.WithProvider(memlimit.FromCgroup), memlimit.WithLogger(slog.New(slog.DiscardHandler)))
	switch {
	case errors.Is(err, memlimit.ErrNoCgroup) || errors.Is(err, memlimit.ErrCgroupsNotSupported):
		logger.Debug("memory limit: not in a container with one; none set", "error", err)
	case err != nil:
		logger.Warn("memory limit: could not read the container's; none set", "error", err)
	case limit > 0 && limit < math.MaxInt64:
		source := "90 % of the container's memory limit"
		if os.Getenv("GOMEMLIMIT") != "" {
			source = "GOMEMLIMIT"
		}
		logger.Info("memory limit", "mib", limit>>20, "from", source)
	}
}
