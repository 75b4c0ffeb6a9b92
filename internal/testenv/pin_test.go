package testenv_test

import (
	"runtime"
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
		t.Skipf("needs CPU 1 and another; this process may use %d", all.Count())
	}
	procsBefore := runtime.GOMAXPROCS(0)
	restore, err := testenv.Pin(1)
	if err != nil {
		t.Fatal(err)
	}
	// A goroutine locked to a thread of its own, started while pinned:
	// the runtime starts a new thread for the rest of the program.
	mask := make(chan unix.CPUSet)
	next := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for range 2 {
			var m unix.CPUSet
			_ = unix.SchedGetaffinity(0, &m)
			mask <- m
			<-next
		}
		close(mask)
	}()
	started := make(chan struct{})
	go func() {
		runtime.LockOSThread() // this goroutine's thread is new or reused: both must come back
		defer runtime.UnlockOSThread()
		<-started
	}()
	pinned := <-mask
	procs := runtime.GOMAXPROCS(0)
	restore()
	next <- struct{}{}
	after := <-mask
	next <- struct{}{}
	close(started)
	if pinned.IsSet(1) || pinned.Count() != all.Count()-1 {
		t.Fatalf("while pinned this process's thread may use %d CPUs (CPU 1: %v); want every CPU but 1", pinned.Count(), pinned.IsSet(1))
	}
	if procs != all.Count()-1 || runtime.GOMAXPROCS(0) != procsBefore {
		t.Errorf("GOMAXPROCS %d while pinned, %d after; want %d, then %d", procs, runtime.GOMAXPROCS(0), all.Count()-1, procsBefore)
	}
	if after != all {
		t.Fatalf("after restore a thread of this process may use %d CPUs; before Pin %d", after.Count(), all.Count())
	}
	var self unix.CPUSet
	if err := unix.SchedGetaffinity(0, &self); err != nil || self != all {
		t.Fatalf("after restore the test's thread may use %d CPUs, before %d (%v)", self.Count(), all.Count(), err)
	}
}
