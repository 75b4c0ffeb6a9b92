package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/searchsync/searchsync/internal/config"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/outbox"
)

// A stop of `searchsync run` while a batch is in flight (ctx done is what
// SIGTERM does through signal.NotifyContext): /readyz answers 503 at once
// and for as long as the relay drains, the batch is finished, the leases and
// the instance row are handed back, and every actor has returned before the
// pool is closed. Run it with -race too.
func TestRunDrainsInOrder(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	var received atomic.Int64
	inBatch := make(chan struct{}, 1)
	release := make(chan struct{})
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		select {
		case inBatch <- struct{}{}:
		default:
		}
		<-release
		received.Add(1)
	}))
	t.Cleanup(hook.Close)
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()

	listen := testenv.FreeAddr(t)
	cfgFile := writeConfig(t, fmt.Sprintf(`database:
  url: %q
  schema: %s
relay:
  partitions: 4
  lease_ttl: 2s
http:
  listen: %s
compaction:
  interval: 1h
consumers:
  - name: hook
    type: webhook
    webhook:
      url: %s
      secret: whsec_dGVzdC1zZWNyZXQtdGVzdC1zZWNyZXQ=
routes:
  - consumer: hook
`, db.URL, db.Schema, listen, hook.URL))
	cfg, err := config.Load(cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	agg := uuid.New()
	w := outbox.NewWriter(outbox.WriterConfig{Schema: db.Schema})
	if err := pgx.BeginFunc(context.Background(), db.Pool, func(tx pgx.Tx) error {
		_, err := w.Write(context.Background(), tx, outbox.Event{EventType: "entity.customer.updated",
			AggregateType: "DDM_ENTITY", AggregateID: &agg, Payload: []byte(`{"n":1}`)})
		return err
	}); err != nil {
		t.Fatal(err)
	}

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var stillRunning []string
	stopped := make(chan struct{})
	done := make(chan error, 1)
	e := &env{ctx: ctx, cfg: cfg, logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	go func() {
		done <- runRelay(ctx, e, 30*time.Second, runHooks{onStopped: func(running []string) {
			stillRunning = running
			close(stopped)
		}})
	}()
	readyz := func() int {
		resp, err := http.Get("http://" + listen + "/readyz")
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	testenv.Eventually(t, 30*time.Second, func() bool { return readyz() == http.StatusOK }, "/readyz never answered 200")
	select {
	case <-inBatch:
	case <-time.After(30 * time.Second):
		t.Fatal("the webhook never received the batch")
	}

	stop() // SIGTERM mid-batch
	testenv.Eventually(t, 5*time.Second, func() bool { return readyz() == http.StatusServiceUnavailable }, "/readyz did not turn 503 while the relay drains")
	select {
	case <-stopped:
		t.Fatal("runRelay stopped while the batch was still in flight (it should finish it first)")
	case <-time.After(300 * time.Millisecond): // still draining: the webhook holds the batch
	}
	if code := readyz(); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz during the drain: %d, want 503", code)
	}
	close(release)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("runRelay after a stop: %v, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("runRelay did not return within 30s of the stop")
	}
	if len(stillRunning) != 0 {
		t.Errorf("actors still running when the pool was about to close: %v", stillRunning)
	}
	if received.Load() == 0 {
		t.Error("the batch in flight was not finished")
	}
	var held, instances int
	var status string
	if err := db.Pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM aa_relay_lease WHERE owner IS NOT NULL),
		(SELECT count(*) FROM aa_relay_instance), (SELECT status::text FROM aa_outbox_event LIMIT 1)`).Scan(&held, &instances, &status); err != nil {
		t.Fatal(err)
	}
	if held != 0 || instances != 0 {
		t.Errorf("after the stop: %d leases held, %d instance rows; want none", held, instances)
	}
	if status != "dispatched" {
		t.Errorf("the event delivered during the drain is %s, want dispatched", status)
	}
	if _, err := http.Get("http://" + listen + "/healthz"); err == nil {
		t.Error("the HTTP server still answers after runRelay returned")
	}
}

// An actor that fails stops the others in order and the run with its name.
func TestSupervisorStopsOnAFailure(t *testing.T) {
	t.Parallel()
	sup := newSupervisor(slog.New(slog.NewTextHandler(testWriter{t}, nil)))
	var order []string
	var stoppedFirst atomic.Bool
	sup.start(context.Background(), "relay", actor{name: "relay", run: func(ctx context.Context) error {
		<-ctx.Done()
		stoppedFirst.Store(true)
		order = append(order, "relay")
		return nil
	}})
	sup.start(context.Background(), "background jobs",
		actor{name: "janitor", run: func(ctx context.Context) error { panic("boom") }},
		actor{name: "sampler", run: func(ctx context.Context) error {
			<-ctx.Done()
			if !stoppedFirst.Load() {
				t.Error("a background job stopped before the relay")
			}
			return nil
		}})
	err := sup.wait(context.Background(), nil)
	if err == nil || !contains(err.Error(), "janitor: panic: boom") {
		t.Fatalf("wait: %v, want the janitor's panic", err)
	}
	if r := sup.running(); len(r) != 0 || len(order) != 1 {
		t.Errorf("after wait: running %v, relay stopped %v", r, order)
	}
	sup.stop() // idempotent
}

// testWriter sends log lines to t.Log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p))
	return len(p), nil
}
