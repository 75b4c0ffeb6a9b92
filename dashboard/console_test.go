package dashboard_test

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/searchsync/searchsync/dashboard"
	"github.com/searchsync/searchsync/dashboard/dashboardtest"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/outbox/outboxadmin"
)

// TestDashboardSeparatesLagFromStuck serves the dashboard over a sampler of
// an outbox set up by SQL (a live relay's heartbeat, no relay): one poison
// head two hours old among fresh events, and a paused webhook. The headline
// lag is the fresh events' age; the poison and the pause show in the
// blocked/failed/paused panel; the first screen says "degraded" in amber
// with both reasons, and every event link opens the event's own page. Then
// the engine goes away too (the search consumer paused): "down" in red.
func TestDashboardSeparatesLagFromStuck(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	dashboardtest.Stuck{PoisonError: "search: mapper_parsing_exception", Fresh: 4, FreshAge: "3 seconds",
		Paused: "crm-hook", PausedFor: "5 minutes", PauseReason: "dial tcp 10.1.2.3:443: connection refused", Probes: 3}.Seed(t, db)
	// An event a relay found out of id order (a producer without the lock).
	if _, err := db.Pool.Exec(ctx, `INSERT INTO aa_outbox_overtaken (event_id, aggregate_type, aggregate_id, after_event_id, instance)
		VALUES (77, 'DDM_ENTITY', '0b5e0a2c-5c1e-4d7e-9a3b-1d2f3e4a5b6c', 78, 'relay-1')`); err != nil {
		t.Fatal(err)
	}
	_, table := dashboardtest.Consumers()
	smp := dashboardtest.Sampler(db)
	// A live relay: what holds the events back is the incident, not a
	// missing relay.
	if _, err := db.Pool.Exec(ctx, `INSERT INTO aa_relay_instance (id, hostname, pid, partitions, expires_at)
		VALUES ('relay-1', 'host', 1, 16, now() + interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	snap, err := smp.Sample(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Half an hour of history in which the poison blocks search throughout
	// and crm-hook was paused 5 minutes ago; the console reads it.
	if _, err := db.Pool.Exec(ctx, `INSERT INTO aa_console_sample (at, instance, sample)
		SELECT now() - make_interval(secs => g * 10), 'test', jsonb_build_object('lag', round((2.5 + sin(g / 6.0))::numeric, 3), 'rate', round((45 + 10 * sin(g / 9.0))::numeric, 3),
			'pending', 5, 'failed', 1, 'blocked', 1, 'consumers', jsonb_build_object(
			'search', jsonb_build_object('indexes', jsonb_build_array('customers'), 'lag', round((2.5 + sin(g / 6.0))::numeric, 3), 'blocked', 1, 'blocked_events', 1,
				'latency', jsonb_build_object('n', 300, 'p50', round((0.09 + 0.02 * sin(g / 5.0))::numeric, 3), 'p95', 0.3, 'p99', round((0.6 + 0.1 * sin(g / 7.0))::numeric, 3))),
			'crm-hook', CASE WHEN g <= 30 THEN jsonb_build_object('lag', 0, 'blocked', 1, 'blocked_events', 1, 'paused', true)
				ELSE jsonb_build_object('lag', round((1.5 + 0.5 * sin(g / 4.0))::numeric, 3), 'blocked', 1, 'blocked_events', 1,
				'latency', jsonb_build_object('n', 300, 'p50', 0.05, 'p95', 0.1, 'p99', round((0.25 + 0.05 * sin(g / 3.0))::numeric, 3))) END))
		FROM generate_series(1, 180) g`); err != nil {
		t.Fatal(err)
	}
	hist := dashboard.NewHistory(db.Pool, smp, dashboard.HistoryConfig{Schema: db.Schema, Instance: "test"}, nil)
	// No operator token: the console is read-only.
	events := &dashboard.Events{Admin: outboxadmin.New(db.Schema).WithRouting(table), DB: db.Pool}
	// The index as the drift watcher reads it while the engine is away.
	engineDown := atomic.Bool{}
	indexes := &dashboard.Reindex{Aliases: func() []dashboard.AliasDrift {
		a := dashboard.AliasDrift{Alias: "customers", Index: "customers_v1", Drift: dashboard.DriftNone, EngineHealth: "green"}
		if engineDown.Load() {
			a = dashboard.AliasDrift{Alias: "customers", Drift: dashboard.DriftUnknown,
				Message: "cannot check index customers: dial tcp 127.0.0.1:9200: connect: connection refused"}
		} else {
			n := int64(1204)
			a.Docs = &n
		}
		a.Judge()
		return []dashboard.AliasDrift{a}
	}}
	srv := httptest.NewServer(dashboard.Handler(dashboard.Source{Sampler: smp, Instance: "test", History: hist, Events: events, Reindex: indexes}))
	t.Cleanup(srv.Close)

	bctx := dashboardtest.OpenBrowser(t, srv.URL+"/")
	text := func(sel string) string { t.Helper(); return dashboardtest.Text(t, bctx, sel) }
	var lagText string
	testenv.Eventually(t, 20*time.Second, func() bool {
		lagText = text("#lag")
		return lagText != "–"
	}, "the page never showed a lag")
	pageLag, err := strconv.ParseFloat(strings.TrimSuffix(lagText, " s"), 64)
	if err != nil {
		t.Fatalf("lag on the page %q: %v", lagText, err)
	}
	if pageLag != math.Round(snap.DeliverableLag*10)/10 || pageLag < 2 || pageLag > 15 {
		t.Errorf("Lag now %.1f s; want the fresh events' deliverable lag %.1f s, not the poison's two hours", pageLag, snap.DeliverableLag)
	}
	if p := text("#paused"); p != "1" {
		t.Errorf("paused consumers tile %q", p)
	}
	if o := text("#outoforder"); !strings.Contains(o, "1 events delivered out of id order") || !strings.Contains(o, "event 77 of DDM_ENTITY/0b5e0a2c-5c1e-4d7e-9a3b-1d2f3e4a5b6c after event 78") {
		t.Errorf("out-of-order banner %q", o)
	}
	held := text("#held tbody")
	for _, want := range []string{"search\tfailed\t1\t1\t1\t2h0m", "crm-hook\tpaused\t4\t4", "mapper_parsing_exception", "connection refused (3 failed probes)"} {
		if !strings.Contains(held, want) {
			t.Errorf("blocked/failed/paused panel lacks %q:\n%s", want, held)
		}
	}
	if c := text("#consumers tbody"); !strings.Contains(c, "paused 5m") || !strings.Contains(c, "– (paused)") {
		t.Errorf("consumer table:\n%s", c)
	}
	// The events panel lists the poison, without actions (no token).
	var evRows string
	testenv.Eventually(t, 20*time.Second, func() bool {
		evRows = text("#events tbody")
		return strings.Contains(evRows, "mapper_parsing_exception")
	}, "the events panel never listed the poison: %q", evRows)
	if n, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll("#events button[data-act]").length + (getComputedStyle(document.getElementById("actionsbar")).display === "none" ? 0 : 1)`)); err != nil || n != 0 {
		t.Errorf("%d action controls on a read-only console (%v)", n, err)
	}
	if b := text("#blockedtbl tbody"); !strings.Contains(b, "mapper_parsing_exception") || !strings.Contains(b, "search") {
		t.Errorf("blocked aggregates:\n%s", b)
	}
	if ix := text("#indexes tbody"); !strings.Contains(ix, "customers_v1\t1204\tgreen\thealthy") {
		t.Errorf("indexes table:\n%s", ix)
	}

	// The first screen: degraded, in amber, with both reasons.
	health := func() (state, colour, reasons string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(bctx, 10*time.Second)
		defer cancel()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[document.getElementById("healthstate").textContent,
			getComputedStyle(document.getElementById("health")).backgroundColor, document.getElementById("healthreasons").innerText,
			String(document.getElementById("health").getBoundingClientRect().top < innerHeight)]`))
		if err != nil || len(v) != 4 {
			t.Fatalf("read the health line: %v %v", v, err)
		}
		if v[3] != "true" {
			t.Errorf("the health line is not on the first screen")
		}
		return v[0], v[1], v[2]
	}
	state, colour, reasons := health()
	if state != "degraded" || colour != "rgb(255, 251, 235)" {
		t.Errorf("health line %q in %s, want degraded in amber (rgb(255, 251, 235))", state, colour)
	}
	for _, want := range []string{"search: 1 failed event holds 1 aggregate for an operator", "mapper_parsing_exception",
		"crm-hook: paused for 5m", "connection refused", "1 events delivered out of id order"} {
		if !strings.Contains(reasons, want) {
			t.Errorf("the health reasons lack %q:\n%s", want, reasons)
		}
	}
	if v, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#consumers [data-health]")].map((e) => e.dataset.health + " " + getComputedStyle(e).backgroundColor)`)); err != nil ||
		!slices.Equal(v, []string{"failing rgb(185, 28, 28)", "paused rgb(194, 65, 12)"}) {
		t.Errorf("consumer pills %v (%v), want failing in red, paused in orange", v, err)
	}
	if v, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.getElementById("t-failed").dataset.state + " " + document.getElementById("t-paused").dataset.state`)); err != nil || v != "bad warn" {
		t.Errorf("tiles failed/paused: %q (%v), want bad warn", v, err)
	}
	if out := os.Getenv("SEARCHSYNC_STUCK_SCREENSHOT"); out != "" {
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(out, png, 0o644)
	}

	// Every event link of every table opens the event's own page.
	links, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("a.evlink")].map((a) => a.href)`))
	if err != nil || len(links) < 3 {
		t.Fatalf("event links %v (%v): want the held, events and blocked tables' heads", links, err)
	}
	for _, href := range links {
		if _, err := chromedp.Run(bctx, chromedp.Navigate(href)); err != nil {
			t.Fatalf("open %s: %v", href, err)
		}
		id := href[strings.LastIndex(href, "/")+1:]
		var title, deliveries, lastErr string
		testenv.Eventually(t, 20*time.Second, func() bool {
			title, deliveries, lastErr = text("#detailtitle"), text("#deliveries tbody"), text("#lasterror")
			return strings.HasPrefix(title, "Event "+id+" ·")
		}, "%s never showed event %s: %q", href, id, title)
		if !strings.Contains(deliveries, "search") || !strings.Contains(deliveries, "crm-hook") || !strings.Contains(lastErr, "mapper_parsing_exception") {
			t.Errorf("event %s: deliveries %q, last error %q", id, deliveries, lastErr)
		}
	}

	// The engine goes away: the search consumer pauses as well, nothing is
	// delivered: down, in red.
	engineDown.Store(true)
	if _, err := db.Pool.Exec(ctx, `INSERT INTO aa_outbox_consumer (consumer, state, paused_at, reason, probes)
		VALUES ('search', 'paused', now(), 'search engine unavailable: dial tcp 127.0.0.1:9200: connect: connection refused', 1)`); err != nil {
		t.Fatal(err)
	}
	if _, err := smp.Sample(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(bctx, chromedp.Navigate(srv.URL+"/")); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, func() bool { state, colour, reasons = health(); return state == "down" }, "the page never said down: %q", state)
	if colour != "rgb(254, 242, 242)" || !strings.Contains(reasons, "search: paused") || !strings.Contains(reasons, "search engine unavailable") {
		t.Errorf("down in %s with reasons:\n%s", colour, reasons)
	}
	if ix := text("#indexes tbody"); !strings.Contains(ix, "unknown") || !strings.Contains(ix, "connection refused") {
		t.Errorf("indexes table while the engine is away:\n%s", ix)
	}
}

// countingDB counts the statements sent through it.
type countingDB struct {
	dashboard.DB
	n atomic.Int64
}

func (c *countingDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c.n.Add(1)
	return c.DB.Exec(ctx, sql, args...)
}

func (c *countingDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	c.n.Add(1)
	return c.DB.Query(ctx, sql, args...)
}

// QueryRow counts too (reindex.List takes a pool with it).
func (c *countingDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	c.n.Add(1)
	return c.DB.(interface {
		QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	}).QueryRow(ctx, sql, args...)
}

// TestConsoleQueriesPerRefresh opens the page in headless Chromium over the
// handler the relay serves and counts the database statements its refreshes
// cost (the lag sampler's reads run whether a page is open or not) and the
// bytes of the page's assets.
func TestConsoleQueriesPerRefresh(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	dashboardtest.Stuck{PoisonError: "search: mapper_parsing_exception", Fresh: 2, FreshAge: "3 seconds",
		Paused: "crm-hook", PausedFor: "5 minutes", PauseReason: "connection refused", Probes: 1}.Seed(t, db)
	smp := dashboardtest.Sampler(db)
	if _, err := smp.Sample(ctx); err != nil {
		t.Fatal(err)
	}
	cdb := &countingDB{DB: db.Pool}
	hist := dashboard.NewHistory(cdb, smp, dashboard.HistoryConfig{Schema: db.Schema, Instance: "test", Interval: time.Second}, nil)
	if _, err := hist.Write(ctx); err != nil {
		t.Fatal(err)
	}
	cdb.n.Store(0)
	var refreshes, assetBytes atomic.Int64
	h := dashboard.Handler(dashboard.Source{Sampler: smp, Instance: "test", History: hist, Reindex: dashboard.NewReindexPanel(cdb, nil),
		Partitions: func(ctx context.Context) ([]dashboard.Partition, error) {
			// What the relay runs (partitionOwners), counted.
			rows, err := cdb.Query(ctx, "SELECT 1 FROM aa_relay_instance WHERE expires_at > now()")
			if err != nil {
				return nil, err
			}
			rows.Close()
			return nil, rows.Err()
		}})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/state" {
			refreshes.Add(1)
		}
		cw := &countingWriter{ResponseWriter: w}
		h.ServeHTTP(cw, r)
		if r.URL.Path == "/" || !slices.Contains([]string{"/api/state", "/api/history", "/api/reindex", "/api/backfill"}, r.URL.Path) {
			assetBytes.Add(cw.n)
		}
	}))
	t.Cleanup(srv.Close)
	bctx := dashboardtest.OpenBrowser(t, srv.URL+"/")
	testenv.Eventually(t, 60*time.Second, func() bool { return refreshes.Load() >= 6 }, "the page refreshed %d times", refreshes.Load())
	_, _ = chromedp.Run(bctx, chromedp.Navigate("about:blank")) // stop refreshing before the count
	n, r := cdb.n.Load(), refreshes.Load()
	perRefresh := float64(n) / float64(r)
	var rowBytes int
	if err := db.Pool.QueryRow(ctx, "SELECT max(pg_column_size(sample) + length(instance) + 8) FROM aa_console_sample").Scan(&rowBytes); err != nil {
		t.Fatal(err)
	}
	t.Logf("queries per page refresh: %.2f (%d statements over %d refreshes); page weight: %d bytes of assets; a sample of 2 consumers: %d bytes",
		perRefresh, n, r, assetBytes.Load(), rowBytes)
	// state: the partition owners; history: the samples since the last one;
	// the Reindex panel: the jobs, every 5 s (no job runs).
	if perRefresh > 2.9 {
		t.Errorf("%.2f statements per page refresh, want at most 2.4 (partitions, history; reindex jobs every 5 s)", perRefresh)
	}
	if b := assetBytes.Load(); b == 0 || b > 150_000 {
		t.Errorf("page weight %d bytes", b)
	}
}

type countingWriter struct {
	http.ResponseWriter
	n int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.ResponseWriter.Write(b)
	c.n += int64(n)
	return n, err
}
