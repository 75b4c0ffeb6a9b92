package relay_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/relay"
)

// TestLostDatabaseIsLoggedOnce takes the database away from a running relay
// (a proxy in front of the real server cuts every connection and closes
// new ones) for several of its poll and heartbeat intervals: the relay says
// once that it waits, says "reachable again" only after the database is
// back (not while it is still away), and delivers what was written
// meanwhile.
func TestLostDatabaseIsLoggedOnce(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	px, via := db.ViaProxy(t)
	pool := testenv.Pool(t, via, db.Schema)

	rc := newReceiver(t)
	log := &testenv.LogBuffer{}
	cfg := fast()
	cfg.Schema = db.Schema
	cfg.Logger = slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg.Routes = []relay.Route{{Consumer: newHook("hook", rc.URL)}}
	r, err := relay.New(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	testenv.Eventually(t, 30*time.Second, func() bool { ok, _ := r.Ready(); return ok }, "relay ready")

	agg := uuid.New()
	first := write(t, db, event(&agg, "entity.customer.updated", "DDM_ENTITY", 1))[0]
	testenv.Eventually(t, 30*time.Second, func() bool { return rc.delivered(first) }, "first event delivered")

	px.Cut()
	mark := len(log.String()) // what the relay logs from here on
	testenv.Eventually(t, 30*time.Second, func() bool { return strings.Contains(log.String(), "database unavailable") },
		"the relay says the database is away")
	// Written directly while the relay cannot reach the database.
	second := write(t, db, event(&agg, "entity.customer.updated", "DDM_ENTITY", 2))[0]
	// The leases expire (1.5 s TTL): a batch then claims nothing, without
	// an error, while the database is still away.
	testenv.Eventually(t, 30*time.Second, func() bool { return strings.Contains(log.String()[mark:], "no partition lease to claim from") },
		"the relay ran a batch without leases")
	// The line after that batch, if the relay took it for the database's
	// return, is written at once.
	testenv.Eventually(t, 30*time.Second, func() bool { return r.Stats().Partitions == 0 }, "the relay holds no partition")
	if strings.Contains(log.String(), "reachable again") {
		t.Fatalf("the relay said the database is reachable again while it was away:\n%s", log.String())
	}
	px.Up()
	testenv.Eventually(t, 60*time.Second, func() bool { return rc.delivered(second) }, "the event written meanwhile delivered")
	testenv.Eventually(t, 30*time.Second, func() bool { return strings.Contains(log.String(), "reachable again") }, "the relay says the database is back")
	text := log.String()
	for _, line := range []string{"database unavailable", "database reachable again", "release events held for a paused consumer",
		"LISTEN connection lost", "LISTEN connection back"} {
		if n := strings.Count(text, "level=WARN msg=\"relay: "+line) + strings.Count(text, "level=INFO msg=\"relay: "+line); n > 1 {
			t.Errorf("%q logged %d times, want at most once:\n%s", line, n, text)
		}
	}
}
