package testenv

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
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
// thread back where it was, and gives the threads and PostgreSQL backends
// that started while pinned what their process (or the postmaster) had
// before: without that, the Go runtime's, the JVMs' and PostgreSQL's later
// threads stayed on one CPU after a pinned benchmark and slowed the
// unpinned one after it. This process's GOMAXPROCS becomes the number of
// CPUs it keeps, as if it had started on them (Go takes GOMAXPROCS from the
// affinity at start, so `taskset -c 0 searchsync run` runs with 1): two Ps
// on one CPU spin for work beside PostgreSQL's backends and cost searchsync
// about a tenth more CPU per event. restore puts GOMAXPROCS back. It needs
// at least 2 CPUs and the right to set other processes' affinity (root, or
// CAP_SYS_NICE).
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

	self := strconv.Itoa(os.Getpid())
	was := map[int]unix.CPUSet{}       // every moved thread's CPUs before
	before := map[string]unix.CPUSet{} // per kind of process ("self", "postgres", "engine"): its first thread's CPUs before
	move := func(kind, pid string, to *unix.CPUSet) error {
		for _, tid := range threads(pid) {
			var w unix.CPUSet
			if unix.SchedGetaffinity(tid, &w) != nil {
				continue // ended meanwhile
			}
			if err := unix.SchedSetaffinity(tid, to); err != nil {
				return fmt.Errorf("pin: thread %d of process %s: %w", tid, pid, err)
			}
			was[tid] = w
			if _, ok := before[kind]; !ok {
				before[kind] = w
			}
		}
		return nil
	}
	procs := runtime.GOMAXPROCS(0)
	restore = func() {
		runtime.GOMAXPROCS(procs)
		back := func(kind, pid string, _ *unix.CPUSet) error {
			def, ok := before[kind]
			if !ok {
				return nil
			}
			for _, tid := range threads(pid) {
				to, moved := was[tid]
				if !moved {
					to = def // started while pinned
				}
				_ = unix.SchedSetaffinity(tid, &to) // a thread that ended needs nothing
			}
			return nil
		}
		_ = back("self", self, nil)
		_, _ = eachService(&engine, &rest, back)
	}
	if err := move("self", self, &rest); err != nil {
		restore()
		return nil, err
	}
	runtime.GOMAXPROCS(rest.Count())
	engines, err := eachService(&engine, &rest, move)
	if err != nil {
		restore()
		return nil, err
	}
	if engines == 0 {
		restore()
		return nil, fmt.Errorf("pin: no search engine JVM found to pin")
	}
	return restore, nil
}

// threads lists the thread ids of process pid (none when it ended).
func threads(pid string) []int {
	tasks, _ := filepath.Glob(filepath.Join("/proc", pid, "task", "[0-9]*"))
	tids := make([]int, 0, len(tasks))
	for _, t := range tasks {
		if tid, err := strconv.Atoi(filepath.Base(t)); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids
}

// eachService calls fn for every PostgreSQL process (kind "postgres", to
// rest) and every search engine JVM (kind "engine", to engine) and returns
// how many engines it found.
func eachService(engine, rest *unix.CPUSet, fn func(kind, pid string, to *unix.CPUSet) error) (engines int, err error) {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		comm, err := os.ReadFile(filepath.Join(d, "comm"))
		if err != nil {
			continue
		}
		switch strings.TrimSpace(string(comm)) {
		case "postgres":
			err = fn("postgres", filepath.Base(d), rest)
		case "java":
			cmd, _ := os.ReadFile(filepath.Join(d, "cmdline"))
			lc := bytes.ToLower(cmd)
			if !bytes.Contains(lc, []byte("opensearch")) && !bytes.Contains(lc, []byte("elasticsearch")) {
				continue
			}
			engines++
			err = fn("engine", filepath.Base(d), engine)
		}
		if err != nil {
			return engines, err
		}
	}
	return engines, nil
}
