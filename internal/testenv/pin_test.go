package testenv_test

import (
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/searchsync/searchsync/internal/testenv"
)

// TestPinRestoresThreadsStartedWhilePinned: a thread that starts while
// pinned inherits the pinned CPUs; restore must give it back what its
// process had, or the next (unpinned) benchmark runs on one core.
func TestPinRestoresThreadsStartedWhilePinned(t *testing.T) {
	testenv.EngineURL(t) // Pin needs an engine JVM to pin
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		t.Fatal(err)
	}
	if all.Count() < 2 || !all.IsSet(1) {
		// Nothing to pin here: Pin must say so, not pin everything to one CPU.
		if _, err := testenv.Pin(1); err == nil || !strings.Contains(err.Error(), "at least one other needed") {
			t.Fatalf("Pin(1) with %d CPUs: %v; want an error naming the CPUs it needs", all.Count(), err)
		}
		return
	}
	procsBefore := runtime.GOMAXPROCS(0)
	restore, err := testenv.Pin(1)
	if err != nil {
		t.Fatal(err)
	}
	// Goroutines locked to threads of their own, started while pinned:
	// more than the process has threads, so the runtime starts new ones.
	const locked = 16
	masks := make(chan unix.CPUSet)
	next := make(chan struct{})
	for range locked {
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			for range 2 {
				var m unix.CPUSet
				_ = unix.SchedGetaffinity(0, &m)
				masks <- m
				<-next
			}
		}()
	}
	read := func() []unix.CPUSet {
		var ms []unix.CPUSet
		for range locked {
			ms = append(ms, <-masks)
		}
		return ms
	}
	during := read()
	procs := runtime.GOMAXPROCS(0)
	restore()
	close(next)
	after := read()
	pinned := during[0]
	for _, m := range during {
		if m != pinned {
			t.Fatalf("while pinned the threads of this process may use different CPUs: %d and %d", m.Count(), pinned.Count())
		}
	}
	if pinned.IsSet(1) || pinned.Count() != all.Count()-1 {
		t.Fatalf("while pinned this process's thread may use %d CPUs (CPU 1: %v); want every CPU but 1", pinned.Count(), pinned.IsSet(1))
	}
	if procs != all.Count()-1 || runtime.GOMAXPROCS(0) != procsBefore {
		t.Errorf("GOMAXPROCS %d while pinned, %d after; want %d, then %d", procs, runtime.GOMAXPROCS(0), all.Count()-1, procsBefore)
	}
	for i, m := range after {
		if m != all {
			t.Fatalf("after restore thread %d of %d started while pinned may use %d CPUs; before Pin %d", i+1, locked, m.Count(), all.Count())
		}
	}
	var self unix.CPUSet
	if err := unix.SchedGetaffinity(0, &self); err != nil || self != all {
		t.Fatalf("after restore the test's thread may use %d CPUs, before %d (%v)", self.Count(), all.Count(), err)
	}
}
