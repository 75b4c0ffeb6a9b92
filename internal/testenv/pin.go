package testenv

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Pin gives the search engines' JVMs CPU engineCPU alone and runs
// PostgreSQL and this process on the other CPUs: the production-like
// layout where the engine has hosts of its own and searchsync and the
// database share the rest. Every thread of those processes is moved
// (backends PostgreSQL forks later inherit the postmaster's affinity, new
// threads of a process that of their creator). restore puts every moved
// thread back where it was. It needs at least 2 CPUs and the right to set
// other processes' affinity (root, or CAP_SYS_NICE).
func Pin(engineCPU int) (restore func(), err error) {
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		return nil, fmt.Errorf("pin: read this process's CPUs: %w", err)
	}
	if all.Count() < 2 || !all.IsSet(engineCPU) {
		return nil, fmt.Errorf("pin: CPU %d for the engine and at least one other needed, this process may use %d", engineCPU, all.Count())
	}
	var engine, rest unix.CPUSet
	engine.Set(engineCPU)
	rest = all
	rest.Clear(engineCPU)

	type moved struct {
		tid int
		was unix.CPUSet
	}
	var done []moved
	restore = func() {
		for _, m := range done {
			_ = unix.SchedSetaffinity(m.tid, &m.was) // a thread that ended needs nothing
		}
	}
	move := func(pid string, to *unix.CPUSet) error {
		tasks, _ := filepath.Glob(filepath.Join("/proc", pid, "task", "[0-9]*"))
		for _, t := range tasks {
			tid, err := strconv.Atoi(filepath.Base(t))
			if err != nil {
				continue
			}
			var was unix.CPUSet
			if unix.SchedGetaffinity(tid, &was) != nil {
				continue // ended meanwhile
			}
			if err := unix.SchedSetaffinity(tid, to); err != nil {
				return fmt.Errorf("pin: thread %d of process %s: %w", tid, pid, err)
			}
			done = append(done, moved{tid, was})
		}
		return nil
	}
	if err := move(strconv.Itoa(os.Getpid()), &rest); err != nil {
		restore()
		return nil, err
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	engines := 0
	for _, d := range dirs {
		comm, err := os.ReadFile(filepath.Join(d, "comm"))
		if err != nil {
			continue
		}
		var to *unix.CPUSet
		switch strings.TrimSpace(string(comm)) {
		case "postgres":
			to = &rest
		case "java":
			cmd, _ := os.ReadFile(filepath.Join(d, "cmdline"))
			lc := bytes.ToLower(cmd)
			if bytes.Contains(lc, []byte("opensearch")) || bytes.Contains(lc, []byte("elasticsearch")) {
				to = &engine
				engines++
			}
		}
		if to == nil {
			continue
		}
		if err := move(filepath.Base(d), to); err != nil {
			restore()
			return nil, err
		}
	}
	if engines == 0 {
		restore()
		return nil, fmt.Errorf("pin: no search engine JVM found to pin")
	}
	return restore, nil
}
