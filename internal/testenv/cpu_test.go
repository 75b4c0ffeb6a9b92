package testenv_test

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/searchsync/searchsync/internal/testenv"
)

// TestReadCPUPerCore: one entry per core, which together make the
// machine's figures (/proc/stat's first line is the sum of the others), and
// a busy loop shows in the difference of two samples.
func TestReadCPUPerCore(t *testing.T) {
	c0 := testenv.ReadCPU()
	if len(c0.Cores) < runtime.NumCPU() {
		t.Fatalf("%d cores read, this process may use %d", len(c0.Cores), runtime.NumCPU())
	}
	var busy, idle time.Duration
	for _, ct := range c0.Cores {
		busy, idle = busy+ct.Busy, idle+ct.Idle
	}
	near := func(a, b time.Duration) bool { return a-b <= b/100+time.Second && b-a <= b/100+time.Second }
	if !near(busy, c0.MachineBusy) || !near(idle, c0.MachineIdle) {
		t.Fatalf("cores add up to busy %s idle %s, the machine's line says %s and %s", busy, idle, c0.MachineBusy, c0.MachineIdle)
	}
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
	}
	d := testenv.ReadCPU().Sub(c0)
	total := 0.0
	for _, b := range d.CoreBusy() {
		if b < 0 || b > 100 {
			t.Fatalf("busy share %v out of range", d.CoreBusy())
		}
		total += b
	}
	if total == 0 || !strings.Contains(d.String(), "per core busy 0: ") {
		t.Fatalf("a busy loop of 300 ms shows no core busy: %s", d)
	}
}
