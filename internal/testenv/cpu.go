package testenv

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// CPU is the processor time used so far by the processes a benchmark
// involves, read from /proc (Linux): the search engine (java processes
// whose command line names opensearch or elasticsearch), PostgreSQL (every
// postgres process, with the children the postmaster has reaped, so that
// closed connections count too), this process, and the whole machine (busy
// and idle, over all cores, and per core). Benchmarks take one before and
// one after a run and report the difference, to show where the machine's
// cores went; per core, a pinned run shows whether the core PostgreSQL and
// searchsync share was the bound.
type CPU struct {
	Engine, Postgres, Self   time.Duration
	MachineBusy, MachineIdle time.Duration
	Cores                    []CoreTime // by core number
}

// CoreTime is one core's busy and idle time.
type CoreTime struct{ Busy, Idle time.Duration }

// Sub returns c - o.
func (c CPU) Sub(o CPU) CPU {
	d := CPU{Engine: c.Engine - o.Engine, Postgres: c.Postgres - o.Postgres, Self: c.Self - o.Self,
		MachineBusy: c.MachineBusy - o.MachineBusy, MachineIdle: c.MachineIdle - o.MachineIdle}
	if len(c.Cores) == len(o.Cores) {
		for i := range c.Cores {
			d.Cores = append(d.Cores, CoreTime{Busy: c.Cores[i].Busy - o.Cores[i].Busy, Idle: c.Cores[i].Idle - o.Cores[i].Idle})
		}
	}
	return d
}

// CoreBusy is the busy share (0–100) of each core in a difference of two
// samples.
func (c CPU) CoreBusy() []float64 {
	out := make([]float64, len(c.Cores))
	for i, ct := range c.Cores {
		if tot := ct.Busy + ct.Idle; tot > 0 {
			out[i] = 100 * float64(ct.Busy) / float64(tot)
		}
	}
	return out
}

// String formats a difference of two samples.
func (c CPU) String() string {
	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Millisecond) }
	util := 0.0
	if tot := c.MachineBusy + c.MachineIdle; tot > 0 {
		util = 100 * float64(c.MachineBusy) / float64(tot)
	}
	s := fmt.Sprintf("cpu: engine %s, postgres %s, this process %s, other %s; machine busy %s of %s (%.0f%%)",
		r(c.Engine), r(c.Postgres), r(c.Self), r(max(c.MachineBusy-c.Engine-c.Postgres-c.Self, 0)),
		r(c.MachineBusy), r(c.MachineBusy+c.MachineIdle), util)
	if busy := c.CoreBusy(); len(busy) > 0 {
		parts := make([]string, len(busy))
		for i, b := range busy {
			parts[i] = fmt.Sprintf("%d: %.0f%%", i, b)
		}
		s += "; per core busy " + strings.Join(parts, ", ")
	}
	return s
}

// clockTick is USER_HZ, 100 on every Linux architecture Go supports.
const clockTick = 10 * time.Millisecond

// ReadCPU samples the counters. Where /proc is missing (not Linux) every
// value is zero.
func ReadCPU() CPU {
	var c CPU
	c.Self = procTimes("/proc/self/stat", false)
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		comm, err := os.ReadFile(filepath.Join(d, "comm"))
		if err != nil {
			continue
		}
		switch strings.TrimSpace(string(comm)) {
		case "postgres":
			// The postmaster (parent not postgres) also carries its reaped
			// children; a live backend only its own time.
			c.Postgres += procTimes(filepath.Join(d, "stat"), isPostmaster(d))
		case "java":
			cmd, _ := os.ReadFile(filepath.Join(d, "cmdline"))
			lc := bytes.ToLower(cmd)
			if bytes.Contains(lc, []byte("opensearch")) || bytes.Contains(lc, []byte("elasticsearch")) {
				c.Engine += procTimes(filepath.Join(d, "stat"), false)
			}
		}
	}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		for line := range strings.Lines(string(b)) {
			f := strings.Fields(line) // cpu[N] user nice system idle iowait irq softirq steal ...
			if len(f) == 0 || !strings.HasPrefix(f[0], "cpu") {
				continue
			}
			var busy, idle time.Duration
			for i := 1; i < len(f) && i <= 8; i++ {
				v, _ := strconv.ParseInt(f[i], 10, 64)
				if i == 4 || i == 5 {
					idle += time.Duration(v) * clockTick
				} else {
					busy += time.Duration(v) * clockTick
				}
			}
			if f[0] == "cpu" {
				c.MachineBusy, c.MachineIdle = busy, idle
				continue
			}
			n, err := strconv.Atoi(f[0][3:])
			if err != nil || n < 0 || n > 4096 {
				continue
			}
			for len(c.Cores) <= n {
				c.Cores = append(c.Cores, CoreTime{})
			}
			c.Cores[n] = CoreTime{Busy: busy, Idle: idle}
		}
	}
	return c
}

// statFields returns the fields of a /proc/<pid>/stat after the command
// (which may contain spaces), so that index 0 is the state.
func statFields(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

// procTimes is utime+stime (and cutime+cstime with children) of a process.
func procTimes(path string, children bool) time.Duration {
	f := statFields(path)
	if len(f) < 15 {
		return 0
	}
	// utime, stime, cutime, cstime are fields 14–17 of proc(5): 11–14 here.
	end := 13
	if children {
		end = 15
	}
	var t int64
	for i := 11; i < end; i++ {
		v, _ := strconv.ParseInt(f[i], 10, 64)
		t += v
	}
	return time.Duration(t) * clockTick
}

// isPostmaster reports whether the process in dir has a parent that is not
// a postgres process.
func isPostmaster(dir string) bool {
	f := statFields(filepath.Join(dir, "stat"))
	if len(f) < 2 {
		return false
	}
	comm, err := os.ReadFile(filepath.Join("/proc", f[1], "comm"))
	return err != nil || strings.TrimSpace(string(comm)) != "postgres"
}
