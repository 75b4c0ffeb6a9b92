package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/searchsync/searchsync/internal/testenv"
)

// TestRunStopsCleanlyDuringStartUp: SIGTERM or SIGINT while `searchsync run`
// is still starting (waiting for the database, for the search engine) ends
// it with exit code 0, as after the relay ran, and says so in the log.
func TestRunStopsCleanlyDuringStartUp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		signal syscall.Signal
		setup  func(t *testing.T) (config string, starting func(log string) bool)
	}{
		{"database does not answer", syscall.SIGTERM, silentDatabase},
		{"database does not answer, SIGINT", syscall.SIGINT, silentDatabase},
		{"engine unreachable", syscall.SIGTERM, unreachableEngine},
		{"engine unreachable, SIGINT", syscall.SIGINT, unreachableEngine},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, starting := tc.setup(t)
			logFile := filepath.Join(t.TempDir(), "run.log")
			lf, err := os.Create(logFile)
			if err != nil {
				t.Fatal(err)
			}
			defer lf.Close()
			cmd := exec.Command(binary, "-c", writeConfig(t, cfg), "run", "--connect-timeout", "2m")
			cmd.Env = append(os.Environ(), "DATABASE_URL=", "SEARCHSYNC_ENGINE_URL=", "SEARCHSYNC_LOG_FORMAT=json")
			cmd.Stdout, cmd.Stderr = lf, lf
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			defer cmd.Process.Kill()
			readLog := func() string { b, _ := os.ReadFile(logFile); return string(b) }

			testenv.Eventually(t, 30*time.Second, func() bool { return starting(readLog()) }, "run never reached the start-up wait")
			select {
			case err := <-exited:
				t.Fatalf("run exited before the signal: %v\n%s", err, readLog())
			default:
			}
			cmd.Process.Signal(tc.signal)
			select {
			case err := <-exited:
				if code := cmd.ProcessState.ExitCode(); code != 0 {
					t.Fatalf("exit code %d (%v) after %v during start-up, want 0; log:\n%s", code, err, tc.signal, readLog())
				}
			case <-time.After(15 * time.Second):
				t.Fatalf("run did not stop within 15 s of %v during start-up; log:\n%s", tc.signal, readLog())
			}
			if log := readLog(); !strings.Contains(log, "stopped during start-up") {
				t.Fatalf("the log does not say it stopped during start-up:\n%s", log)
			}
		})
	}
}

// silentDatabase is a "PostgreSQL server" that accepts connections and never
// answers: run waits in its start-up ping (--connect-timeout 2m) once the
// listener accepted a connection.
func silentDatabase(t *testing.T) (string, func(string) bool) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var accepted atomic.Bool
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
			accepted.Store(true)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	url := fmt.Sprintf("postgres://u:p@%s/db?sslmode=disable", ln.Addr())
	return fmt.Sprintf("database: {url: %q}\nhttp: {listen: %q}\n", url, testenv.FreeAddr(t)),
		func(string) bool { return accepted.Load() }
}

// unreachableEngine is a migrated database and a search consumer whose engine
// nothing listens for: run waits for the engine with backoff.
func unreachableEngine(t *testing.T) (string, func(string) bool) {
	db := testenv.NewDB(t)
	alias := testenv.Name("sig")
	defs, projections := customerIndex(t, alias)
	return fmt.Sprintf(`
database: {url: %q, schema: %s}
http: {listen: %q}
engine: {urls: ["http://%s"]}
indexes: {definitions: %q, projections: [%q]}
consumers:
  - {name: search, type: search, search: {indexes: [%s]}}
routes:
  - {consumer: search, event_types: ["entity.customer.*"]}
`, db.URL, db.Schema, testenv.FreeAddr(t), testenv.FreeAddr(t), defs, projections, alias),
		func(log string) bool { return strings.Contains(log, "search engine unavailable at start-up; waiting") }
}
