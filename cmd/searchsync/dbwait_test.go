package main

import (
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/searchsync/searchsync/internal/testenv"
)

// TestRunWaitsForTheDatabaseAtStartUp starts a relay while PostgreSQL is
// unreachable (a proxy in front of the real server closes every connection): it
// says once that it waits, comes up as soon as the database answers within
// --connect-timeout, and serves /readyz. With a wrong password it fails at
// once instead of waiting.
func TestRunWaitsForTheDatabaseAtStartUp(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	px, viaProxy := db.ViaProxy(t)
	px.Cut()

	addr := testenv.FreeAddr(t)
	cfg := writeConfig(t, fmt.Sprintf(`
database: {url: %q, schema: %s}
http: {listen: %q}
consumers:
  - {name: hook, type: webhook, webhook: {url: "http://127.0.0.1:9/", secret: whsec_c2VjcmV0}}
routes:
  - {consumer: hook}
`, viaProxy, db.Schema, addr))
	logFile := filepath.Join(t.TempDir(), "relay.log")
	_, exited := startProcess(t, cfg, []string{"DATABASE_URL=", "SEARCHSYNC_LOG_FORMAT=json"}, logFile, "--connect-timeout", "2m")
	testenv.Eventually(t, 30*time.Second, func() bool {
		b, _ := os.ReadFile(logFile)
		return strings.Contains(string(b), "waiting for PostgreSQL")
	}, "the relay says it waits for PostgreSQL")
	select {
	case <-exited:
		b, _ := os.ReadFile(logFile)
		t.Fatalf("the relay exited while the database was away:\n%s", b)
	default:
	}
	px.Up()
	testenv.Eventually(t, 60*time.Second, func() bool { return ready(addr) }, "the relay ready once PostgreSQL answers")
	b, _ := os.ReadFile(logFile)
	if n := strings.Count(string(b), "waiting for PostgreSQL"); n != 1 {
		t.Errorf("%d lines saying it waits, want 1:\n%s", n, b)
	}

	// A refusal waiting cannot cure ends it at once.
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	bad := *u
	bad.User = url.UserPassword(u.User.Username(), "not-the-password")
	cfgBad := writeConfig(t, fmt.Sprintf(`
database: {url: %q, schema: %s}
consumers:
  - {name: hook, type: webhook, webhook: {url: "http://127.0.0.1:9/", secret: whsec_c2VjcmV0}}
routes:
  - {consumer: hook}
`, bad.String(), db.Schema))
	start := time.Now()
	_, stderr, code := runCLI(t, []string{"DATABASE_URL="}, "-c", cfgBad, "run", "--connect-timeout", "2m")
	if code == 0 || time.Since(start) > 20*time.Second || !strings.Contains(stderr, "cannot reach PostgreSQL") {
		t.Errorf("wrong password: exit %d after %s: %s", code, time.Since(start).Round(time.Millisecond), stderr)
	}
	if strings.Contains(stderr, "not-the-password") {
		t.Errorf("the error shows the password: %s", stderr)
	}
}

// startProcess starts `searchsync run` with env and args, logging to
// logFile, without waiting for it to be ready. stop (also run at cleanup,
// which logs the relay's output when the test failed) sends SIGTERM and
// waits; exited is closed when the process ends.
func startProcess(t *testing.T, cfgFile string, env []string, logFile string, args ...string) (stop func(), exited <-chan struct{}) {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"-c", cfgFile, "run"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	logf, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(done) }()
	var once sync.Once
	stop = func() { once.Do(func() { cmd.Process.Signal(syscall.SIGTERM); <-done }) }
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			b, _ := os.ReadFile(logFile)
			t.Logf("relay log:\n%s", b)
		}
	})
	return stop, done
}
