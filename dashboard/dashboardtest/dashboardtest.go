// Package dashboardtest holds what the console's browser tests share, in
// package dashboard and in the binary's: headless Chromium (ChromiumPath,
// OpenBrowser), the page's charts as uPlot holds them (Chart), and an
// outbox seeded by SQL with the incidents the console must tell apart
// (Stuck) under a lag sampler of the consumers it expects (Sampler).
package dashboardtest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"

	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/lag"
	"github.com/searchsync/searchsync/routing"
)

// ChromiumPath is the Chromium to run: $CHROMIUM or Debian's package; the
// test fails when there is none.
func ChromiumPath(t *testing.T) string {
	for _, p := range []string{os.Getenv("CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Fatal("no Chromium: install Debian's chromium package (scripts/setup.sh does, as root) or set CHROMIUM")
	return ""
}

// OpenBrowser starts headless Chromium on url and returns its context.
func OpenBrowser(t *testing.T, url string) context.Context {
	t.Helper()
	bctx, cancel := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(ChromiumPath(t)), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-quic", true), chromedp.WindowSize(1280, 1100))...)
	t.Cleanup(cancel)
	bctx, cancel = chromedp.NewContext(bctx)
	t.Cleanup(cancel)
	// The first call starts the browser; it must not carry a timeout.
	if err := chromedp.Do(bctx, chromedp.Navigate(url)); err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	return bctx
}

// Text is the text of the page's element sel, read within 10 s; the test
// fails when it cannot be read.
func Text(t *testing.T, bctx context.Context, sel string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(bctx, 10*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("read %s: %v", sel, err)
	}
	return s
}

// ChartState is what the page's uPlot instance of one chart holds.
type ChartState struct {
	Labels  []string  `json:"labels"`
	Axes    int       `json:"axes"`
	AxesDOM int       `json:"axes_dom"`
	XTime   bool      `json:"x_time"`
	Xs      []float64 `json:"xs"`
	Legend  []string  `json:"legend"`
}

// Chart reads the uPlot instance of the chart id (nil before it is drawn).
func Chart(t *testing.T, bctx context.Context, id string) *ChartState {
	t.Helper()
	ctx, cancel := context.WithTimeout(bctx, 10*time.Second)
	defer cancel()
	js := fmt.Sprintf(`(() => { const u = (window.consoleCharts || {})[%q]; if (!u) return "null";
		return JSON.stringify({labels: u.series.slice(1).map((s) => s.label), axes: u.axes.length,
		axes_dom: document.querySelectorAll("#%s .u-axis").length, x_time: !!u.scales.x.time, xs: Array.from(u.data[0]),
		legend: [...document.querySelectorAll("#%s .u-legend .u-series th")].map((e) => e.textContent.trim())}); })()`, id, id, id)
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
	if err != nil {
		t.Fatalf("read chart %s: %v", id, err)
	}
	var c *ChartState
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		t.Fatalf("chart %s: %v (%s)", id, err, raw)
	}
	return c
}

// Stuck sets up, by SQL, an outbox with one poison head two hours old (and an
// event behind it) among fresh pending events, and a paused consumer: the
// state the lag figures must tell apart (deliverable vs blocked vs paused).
type Stuck struct {
	PoisonError string // last_error of the poison head
	Fresh       int    // fresh pending events, each its own aggregate
	FreshAge    string // their age, an SQL interval
	Paused      string // the paused consumer
	PausedFor   string // since when, an SQL interval
	PauseReason string
	Probes      int
}

// Seed writes the outbox of s into db.
func (s Stuck) Seed(t *testing.T, db *testenv.DB) {
	t.Helper()
	ctx := context.Background()
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	insert := `INSERT INTO aa_outbox_event (event_type, aggregate_type, aggregate_id, payload, status, attempts, last_error, created_at, available_at)
		VALUES ('entity.customer.updated', 'DDM_ENTITY', $1, '{"version":1}', $2, $3, $4, now() - $5::interval, now() - $5::interval)`
	poisoned := uuid.New()
	exec(insert, poisoned, "failed", 1, s.PoisonError, "2 hours")
	exec(insert, poisoned, "pending", 0, nil, "2 hours")
	for range s.Fresh {
		exec(insert, uuid.New(), "pending", 0, nil, s.FreshAge)
	}
	exec(`INSERT INTO aa_outbox_consumer (consumer, state, paused_at, reason, probes)
		VALUES ($1, 'paused', now() - $2::interval, $3, $4)`, s.Paused, s.PausedFor, s.PauseReason, s.Probes)
}

// Consumers are the consumers Stuck expects: search (of the index
// customers) and the webhook crm-hook, both routed every customer event.
func Consumers() ([]lag.Consumer, *routing.Table) {
	return []lag.Consumer{{Name: "search", Type: "search", Indexes: []string{"customers"}}, {Name: "crm-hook", Type: "webhook"}},
		&routing.Table{Consumers: []string{"search", "crm-hook"}, Routes: []routing.Route{
			{Consumer: "search", EventTypes: []string{"entity.customer.*"}}, {Consumer: "crm-hook", EventTypes: []string{"entity.customer.*"}}}}
}

// Sampler is a lag sampler of db over the Consumers.
func Sampler(db *testenv.DB) *lag.Sampler {
	consumers, table := Consumers()
	return lag.NewSampler(lag.NewReader(db.Pool, db.Schema, consumers, table), lag.SamplerConfig{}, nil)
}
