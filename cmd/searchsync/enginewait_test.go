package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/searchsync/searchsync/internal/loadgen"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/outbox"
)

// TestRunWaitsForAnUnreachableEngine: `searchsync run` with a search consumer
// whose engine does not answer at start-up waits with backoff (it neither
// exits nor marks anything failed), answers /healthz and says on /readyz
// and /api/state what it waits for, and delivers once the engine answers.
func TestRunWaitsForAnUnreachableEngine(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	engineAddr := testenv.FreeAddr(t) // nothing listens here yet
	addr := testenv.FreeAddr(t)
	alias := testenv.Name("wait")
	defs, projections := customerIndex(t, alias)
	cfg := writeConfig(t, fmt.Sprintf(`
database: {url: %q, schema: %s}
http: {listen: %q}
relay: {poll_interval: 200ms}
engine: {urls: ["http://%s"]}
indexes: {definitions: %q, projections: [%q]}
consumers:
  - {name: search, type: search, search: {indexes: [%s]}}
routes:
  - {consumer: search, event_types: ["entity.customer.*"]}
`, db.URL, db.Schema, addr, engineAddr, defs, projections, alias))

	logFile := filepath.Join(t.TempDir(), "relay.log")
	lf, _ := os.Create(logFile)
	cmd := exec.Command(binary, "-c", cfg, "run")
	cmd.Env = append(os.Environ(), "DATABASE_URL=", "SEARCHSYNC_ENGINE_URL=", "SEARCHSYNC_LOG_FORMAT=json")
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		cmd.Process.Kill()
		lf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logFile)
			t.Logf("relay log:\n%s", b)
		}
	}()

	// An event is written while the engine is away.
	ctx := context.Background()
	w := outbox.NewWriter(outbox.WriterConfig{Schema: db.Schema})
	ev := loadgen.New(7).Create()
	if err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error { _, err := w.Write(ctx, tx, ev); return err }); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		b, _ := os.ReadFile(logFile)
		return strings.Count(string(b), "search engine unavailable at start-up; waiting") >= 2
	}, "relay never said it waits for the engine")
	select {
	case err := <-exited:
		t.Fatalf("relay exited while the engine was unreachable: %v", err)
	default:
	}
	// Meanwhile the HTTP side answers: alive, not ready, and why.
	get := func(path string) (int, string) {
		t.Helper()
		res, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatalf("GET %s while waiting for the engine: %v", path, err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, body := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz while waiting: %d %s", code, body)
	}
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "waiting for the search engine at http://"+engineAddr) {
		t.Errorf("/readyz while waiting: %d %s", code, body)
	}
	if code, body := get("/api/state"); code != http.StatusServiceUnavailable || !strings.Contains(body, `"error":"starting: waiting for the search engine`) {
		t.Errorf("/api/state while waiting: %d %s", code, body)
	}
	var failed int
	db.Pool.QueryRow(ctx, `SELECT count(*) FROM aa_outbox_event WHERE status <> 'pending'`).Scan(&failed)
	if failed != 0 {
		t.Fatalf("%d events changed state while the engine was unreachable", failed)
	}

	// The engine comes (a proxy to the real node starts listening there).
	target, _ := url.Parse(testenv.EngineURL(t))
	ln, err := net.Listen("tcp", engineAddr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: httputil.NewSingleHostReverseProxy(target)}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	testenv.Eventually(t, 60*time.Second, func() bool {
		var st string
		db.Pool.QueryRow(ctx, `SELECT status::text FROM aa_outbox_event WHERE aggregate_id = $1`, ev.AggregateID).Scan(&st)
		return st == "dispatched"
	}, "event not delivered after the engine came")
	testenv.Eventually(t, 20*time.Second, func() bool { return ready(addr) }, "/readyz after the engine came")

	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("relay did not stop after SIGTERM")
	}
}
