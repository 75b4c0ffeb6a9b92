package dashboard

import (
	"context"
	"testing"
	"time"

	"github.com/searchsync/searchsync/internal/config"
	"github.com/searchsync/searchsync/internal/metrics"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/lag"
)

func newSampler(db *testenv.DB) *lag.Sampler {
	consumers := []config.Consumer{
		{Name: "search", Type: "search", Search: &config.Search{Indexes: []string{"customers", "orders"}}},
		{Name: "crm-hook", Type: "webhook"},
	}
	routes := []config.Route{{Consumer: "search", EventTypes: []string{"*"}}, {Consumer: "crm-hook", EventTypes: []string{"*"}}}
	return lag.NewSampler(lag.NewReader(db.Pool, db.Schema, config.LagConsumers(consumers), config.Routing(consumers, routes)), lag.SamplerConfig{}, nil)
}

func countRows(t *testing.T, db *testenv.DB, where string, args ...any) int {
	t.Helper()
	var n int
	if err := db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM aa_console_sample WHERE "+where, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestHistoryOneWriter runs two relays' histories over one schema: only the
// lease holder writes while it renews; when it stops, the other takes over,
// and both read the same samples.
func TestHistoryOneWriter(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	smp := newSampler(db)
	start := time.Now().Add(-time.Minute)
	cfg := HistoryConfig{Schema: db.Schema, Interval: 200 * time.Millisecond, Latency: func() map[string]metrics.Quantiles {
		return map[string]metrics.Quantiles{"search": {Delivered: 3, P50: 0.1, P95: 0.2, P99: 0.3}}
	}}
	a := NewHistory(db.Pool, smp, HistoryConfig{Schema: cfg.Schema, Interval: cfg.Interval, Instance: "relay-a", Latency: cfg.Latency}, nil)
	b := NewHistory(db.Pool, smp, HistoryConfig{Schema: cfg.Schema, Interval: cfg.Interval, Instance: "relay-b"}, nil)
	for i := range 5 {
		if _, err := smp.Sample(ctx); err != nil {
			t.Fatal(err)
		}
		wa, err := a.Write(ctx)
		if err != nil {
			t.Fatal(err)
		}
		wb, err := b.Write(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !wa || wb {
			t.Fatalf("round %d: relay-a wrote %v, relay-b wrote %v; want only the lease holder (a)", i, wa, wb)
		}
	}
	if n := countRows(t, db, "instance = 'relay-a'"); n != 5 {
		t.Fatalf("%d samples of relay-a, want 5", n)
	}
	// relay-a stops (and gives the lease up): relay-b takes over.
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		if _, err := smp.Sample(ctx); err != nil {
			t.Fatal(err)
		}
		w, err := b.Write(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}, "relay-b never took over the history")
	if n := countRows(t, db, "instance = 'relay-b'"); n != 1 {
		t.Fatalf("%d samples of relay-b after the takeover, want 1", n)
	}
	// relay-b dies: its lease expires (here at once) and relay-a takes it back.
	if _, err := smp.Sample(ctx); err != nil {
		t.Fatal(err)
	}
	if w, err := a.Write(ctx); err != nil || w {
		t.Fatalf("relay-a wrote %v (%v) while relay-b holds the lease", w, err)
	}
	if _, err := db.Pool.Exec(ctx, "UPDATE aa_console_lease SET expires_at = now() - interval '1 second'"); err != nil {
		t.Fatal(err)
	}
	if _, err := smp.Sample(ctx); err != nil {
		t.Fatal(err)
	}
	if w, err := a.Write(ctx); err != nil || !w {
		t.Fatalf("relay-a wrote %v (%v) after relay-b's lease expired", w, err)
	}

	// Both read the same history, oldest first, with the figures written
	// (since: the samples are milliseconds apart here, which a range read
	// would thin to one per 5 s).
	sa, _, err := a.Read(ctx, time.Hour, start)
	if err != nil {
		t.Fatal(err)
	}
	sb, _, err := b.Read(ctx, time.Hour, start)
	if err != nil {
		t.Fatal(err)
	}
	if len(sa) != 7 || len(sb) != 7 || sa[0].At != sb[0].At || sa[5].Instance != "relay-b" || sa[6].Instance != "relay-a" || !sa[0].At.Before(sa[6].At) {
		t.Fatalf("histories differ or are out of order: %d and %d samples", len(sa), len(sb))
	}
	c := sa[0].Consumers["search"]
	if len(c.Indexes) != 2 || c.Latency == nil || c.Latency.P99 != 0.3 {
		t.Fatalf("sample of search: %+v", c)
	}
	if _, ok := sa[0].Consumers["crm-hook"]; !ok {
		t.Fatalf("sample lacks crm-hook: %+v", sa[0].Consumers)
	}
	// since returns the newer samples only.
	newer, _, err := a.Read(ctx, time.Hour, sa[3].At)
	if err != nil || len(newer) != 3 {
		t.Fatalf("since: %d samples, %v; want 3", len(newer), err)
	}
}

// TestHistoryTrimAndThinning: expired samples go in bounded deletes and a
// long range is thinned to at most maxPoints samples.
func TestHistoryTrimAndThinning(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	// 2500 samples 30 s apart: the last ~20.8 hours.
	if _, err := db.Pool.Exec(ctx, `INSERT INTO aa_console_sample (at, instance, sample)
		SELECT now() - make_interval(secs => g * 30), 'x', '{"lag": 1, "consumers": {}}' FROM generate_series(1, 2500) g`); err != nil {
		t.Fatal(err)
	}
	h := NewHistory(db.Pool, newSampler(db), HistoryConfig{Schema: db.Schema, Interval: 10 * time.Second, Retention: 10 * time.Hour}, nil)
	s, step, err := h.Read(ctx, 24*time.Hour, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if step != 2*time.Minute || len(s) > maxPoints || len(s) < 600 {
		t.Fatalf("24 h: %d samples, step %v; want at most %d, one per 2m", len(s), step, maxPoints)
	}
	s, _, err = h.Read(ctx, time.Hour, time.Time{})
	if err != nil || len(s) < 119 || len(s) > 120 {
		t.Fatalf("1 h: %d samples, %v; want every one (119 or 120)", len(s), err)
	}
	n, err := h.Trim(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Older than 10 h: samples 1201 … 2500 (give or take the boundary).
	if n < 1299 || n > 1301 {
		t.Fatalf("trimmed %d samples, want 1300", n)
	}
	if left := countRows(t, db, "at < now() - interval '10 hours'"); left != 0 {
		t.Fatalf("%d expired samples left", left)
	}
}
