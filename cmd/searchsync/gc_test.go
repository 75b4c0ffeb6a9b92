package main

import (
	"os"
	"runtime/debug"
	"testing"
)

// Without GOGC searchsync runs with its own GC percent; GOGC set wins.
func TestGCPercentDefaultUnlessGOGC(t *testing.T) {
	was := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(was) })

	t.Setenv("GOGC", "150") // restored after the test
	setGCPercent()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GOGC set: GC percent %d, want it left alone (100)", got)
	}
	if err := os.Unsetenv("GOGC"); err != nil {
		t.Fatal(err)
	}
	setGCPercent()
	if got := debug.SetGCPercent(100); got != defaultGCPercent {
		t.Errorf("GOGC unset: GC percent %d, want %d", got, defaultGCPercent)
	}
}
