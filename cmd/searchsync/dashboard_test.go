package main

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/goccy/go-yaml"
	"github.com/google/uuid"

	"github.com/searchsync/searchsync/dashboard"
	"github.com/searchsync/searchsync/internal/config"
	"github.com/searchsync/searchsync/internal/loadgen"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/lag"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/outbox/outboxadmin"
)

// startRelay runs `searchsync run` with the config and stops it (SIGTERM) at
// cleanup. It returns once /readyz answers 200.
func startRelay(t *testing.T, cfgFile, addr string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(binary, "-c", cfgFile, "run")
	cmd.Env = append(os.Environ(), "DATABASE_URL=", "SEARCHSYNC_LOG_LEVEL=warn")
	logf, _ := os.Create(filepath.Join(t.TempDir(), "relay.log"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("relay log:\n%s", b)
		}
	})
	testenv.Eventually(t, 30*time.Second, func() bool { return ready(addr) }, "relay never became ready")
	return cmd
}

// ready reports whether the relay at addr answers /readyz with 200.
func ready(addr string) bool {
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// metricValue reads one sample from /metrics and fails the test when it is
// not there.
func metricValue(t *testing.T, addr, name string) float64 {
	t.Helper()
	v, ok := metricSample(t, addr, name)
	if !ok {
		t.Fatalf("metric %s not in /metrics", name)
	}
	return v
}

// metricSample reads one sample from /metrics; ok is false when the relay
// has not exported it (yet).
func metricSample(t *testing.T, addr, name string) (v float64, ok bool) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if s, found := strings.CutPrefix(sc.Text(), name+" "); found {
			f, err := strconv.ParseFloat(s, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f, true
		}
	}
	return 0, false
}

// TestDashboardInBrowser opens the dashboard in headless Chromium while the
// relay delivers a steady load, and checks that it shows a non-zero throughput
// and a lag that agrees with /metrics.
func TestDashboardInBrowser(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(hook.Close)
	addr := testenv.FreeAddr(t)
	alias := testenv.Name("dash")
	cfg := hookAndSearchConfig(t, db, addr, hook.URL, alias, "sample_interval: 500ms, history_interval: 1s")
	startRelay(t, cfg, addr)

	// A steady load through the producer API for the whole test.
	defer steadyLoad(t, db, 200)()

	bctx, cancel := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-quic", true), chromedp.WindowSize(1280, 1100))...)
	defer cancel()
	bctx, cancel = chromedp.NewContext(bctx)
	defer cancel()
	// The first call starts the browser; it must not carry a timeout.
	if err := chromedp.Do(bctx, chromedp.Navigate("http://"+addr+"/")); err != nil {
		t.Fatalf("open dashboard: %v", err)
	}
	text := func(sel string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(bctx, 10*time.Second)
		defer cancel()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("read %s: %v", sel, err)
		}
		return s
	}
	// Wait until the page shows deliveries.
	var throughput, lagText string
	testenv.Eventually(t, 60*time.Second, func() bool {
		throughput = text("#throughput")
		f, err := strconv.ParseFloat(strings.TrimSuffix(throughput, " /s"), 64)
		return err == nil && f > 0
	}, "dashboard throughput stayed %q", throughput)

	// A healthy system says so, in green (a transient push-back of the
	// engine may make a sample degraded: wait for a healthy one).
	var state string
	testenv.Eventually(t, 60*time.Second, func() bool {
		v, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](`[document.getElementById("healthstate").textContent,
			getComputedStyle(document.getElementById("health")).backgroundColor]`))
		if err != nil || len(v) != 2 {
			return false
		}
		state = v[0] + " " + v[1]
		return state == "healthy rgb(236, 253, 245)"
	}, "the health line never said healthy in green: %q", state)
	if ix := text("#indexes tbody"); !strings.Contains(ix, alias) || !strings.Contains(ix, "green\thealthy") {
		t.Errorf("indexes table: %q", ix)
	}

	// The lag on the page (the deliverable lag) agrees with /metrics (both
	// read the same sampler; allow for one sampling interval between the two
	// reads).
	// Read again while they differ: on a loaded machine the lag moves by
	// more than that between the two reads.
	var pageLag, metricLag float64
	for deadline := time.Now().Add(30 * time.Second); ; {
		lagText = text("#lag")
		var err error
		if pageLag, err = strconv.ParseFloat(strings.TrimSuffix(lagText, " s"), 64); err != nil {
			t.Fatalf("lag on the page %q: %v", lagText, err)
		}
		metricLag = metricValue(t, addr, "searchsync_outbox_deliverable_lag_seconds")
		if d := pageLag - metricLag; d >= -2.5 && d <= 2.5 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("dashboard lag %.1f s, /metrics %.2f s for 30 s", pageLag, metricLag)
			break
		}
		time.Sleep(250 * time.Millisecond) // the page refreshes every 2 s
	}
	if pageLag > 30 {
		t.Errorf("lag %.1f s under a light load", pageLag)
	}
	if f := text("#failed"); f != "0" {
		t.Errorf("dashboard shows %s failed events; the webhook and the search consumer should deliver all", f)
	}
	consumerRow := text("#consumers tbody")
	if !strings.Contains(consumerRow, "crm-hook") || !strings.Contains(consumerRow, alias) {
		t.Errorf("consumer table: %q", consumerRow)
	}

	// Every metric the provisioned Grafana dashboard queries is exported.
	checkGrafanaMetrics(t, addr)

	// The README's screenshot, with some history drawn.
	out := filepath.Join(t.TempDir(), "dashboard.png")
	if os.Getenv("SEARCHSYNC_UPDATE_SCREENSHOT") != "" {
		out = "../../docs/dashboard.png"
		testenv.Eventually(t, 3*time.Minute, func() bool {
			c := chart(t, bctx, "lagchart")
			return c != nil && len(c.Xs) >= 12
		}, "the lag chart never drew 12 samples")
	}
	png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, png, 0o644); err != nil {
		t.Fatal(err)
	}
}

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
	stuck{poisonError: "search: mapper_parsing_exception", fresh: 4, freshAge: "3 seconds",
		paused: "crm-hook", pausedFor: "5 minutes", pauseReason: "dial tcp 10.1.2.3:443: connection refused", probes: 3}.seed(t, db)
	// An event a relay found out of id order (a producer without the lock).
	if _, err := db.Pool.Exec(ctx, `INSERT INTO aa_outbox_overtaken (event_id, aggregate_type, aggregate_id, after_event_id, instance)
		VALUES (77, 'DDM_ENTITY', '0b5e0a2c-5c1e-4d7e-9a3b-1d2f3e4a5b6c', 78, 'relay-1')`); err != nil {
		t.Fatal(err)
	}
	consumers := []config.Consumer{
		{Name: "search", Type: "search", Search: &config.Search{Indexes: []string{"customers"}}},
		{Name: "crm-hook", Type: "webhook"},
	}
	routes := []config.Route{{Consumer: "search", EventTypes: []string{"entity.customer.*"}}, {Consumer: "crm-hook", EventTypes: []string{"entity.customer.*"}}}
	smp := lag.NewSampler(lag.NewReader(db.Pool, db.Schema, config.LagConsumers(consumers), config.Routing(consumers, routes)), lag.SamplerConfig{}, nil)
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
	events := &dashboard.Events{Admin: outboxadmin.New(db.Schema).WithRouting(config.Routing(consumers, routes)), DB: db.Pool}
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

	bctx, cancel := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-quic", true), chromedp.WindowSize(1280, 1100))...)
	defer cancel()
	bctx, cancel = chromedp.NewContext(bctx)
	defer cancel()
	if err := chromedp.Do(bctx, chromedp.Navigate(srv.URL+"/")); err != nil {
		t.Fatalf("open dashboard: %v", err)
	}
	text := func(sel string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(bctx, 10*time.Second)
		defer cancel()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("read %s: %v", sel, err)
		}
		return s
	}
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

func chromiumPath(t *testing.T) string {
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

// checkGrafanaMetrics fails when deploy/grafana/dashboards/searchsync.json or
// the example alerting rules deploy/prometheus-alerts.yml query a
// searchsync_ metric that the relay at addr does not export.
func checkGrafanaMetrics(t *testing.T, addr string) {
	t.Helper()
	dash, err := os.ReadFile("../../deploy/grafana/dashboards/searchsync.json")
	if err != nil {
		t.Fatal(err)
	}
	rules, err := os.ReadFile("../../deploy/prometheus-alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var rf struct {
		Groups []struct {
			Rules []struct{ Alert, Expr string }
		}
	}
	if err := yaml.Unmarshal(rules, &rf); err != nil || len(rf.Groups) == 0 || len(rf.Groups[0].Rules) == 0 {
		t.Fatalf("deploy/prometheus-alerts.yml: %v (%d groups)", err, len(rf.Groups))
	}
	var exprs []string
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" {
				t.Errorf("deploy/prometheus-alerts.yml: rule %+v without alert or expr", r)
			}
			exprs = append(exprs, r.Expr)
		}
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	exported := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			exported[line[:i]] = true
		}
	}
	metricName := regexp.MustCompile(`searchsync_[a-z_]+`)
	for file, text := range map[string]string{"Grafana dashboard": string(dash), "alerting rules": strings.Join(exprs, "\n")} {
		queried := metricName.FindAllString(text, -1)
		if len(queried) == 0 {
			t.Fatalf("the %s query no searchsync metric", file)
		}
		for _, m := range queried {
			if !exported[m] {
				t.Errorf("the %s query %s, which /metrics does not export", file, m)
			}
		}
	}
}

// customerIndex writes the customer example's index definition and a
// projection (schema_version 1 payloads, as the load generator writes them)
// under a test-only alias, and returns the definitions directory and the
// projection file.
func customerIndex(t *testing.T, alias string) (string, string) {
	t.Helper()
	def, err := os.ReadFile("../../mapping/defs/customers.json")
	if err != nil {
		t.Fatal(err)
	}
	proj, err := os.ReadFile("../../examples/customer/projections.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	defs := filepath.Join(dir, "defs")
	os.Mkdir(defs, 0o755)
	if err := os.WriteFile(filepath.Join(defs, alias+".json"), []byte(strings.Replace(string(def), `"alias": "customers"`, `"alias": "`+alias+`"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	p := strings.Replace(string(proj), "index: customers", "index: "+alias, 1)
	p = strings.Replace(p, "schema_version: 2", "schema_version: 1", 1)
	pf := filepath.Join(dir, "projections.yaml")
	if err := os.WriteFile(pf, []byte(p), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The physical indexes of the alias.
		req, _ := http.NewRequest(http.MethodDelete, testenv.EngineURL(t)+"/"+alias+"_v*", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	})
	return defs, pf
}

// stuck sets up, by SQL, an outbox with one poison head two hours old (and an
// event behind it) among fresh pending events, and a paused consumer: the
// state the lag figures must tell apart (deliverable vs blocked vs paused).
type stuck struct {
	poisonError string // last_error of the poison head
	fresh       int    // fresh pending events, each its own aggregate
	freshAge    string // their age, an SQL interval
	paused      string // the paused consumer
	pausedFor   string // since when, an SQL interval
	pauseReason string
	probes      int
}

func (s stuck) seed(t *testing.T, db *testenv.DB) {
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
	exec(insert, poisoned, "failed", 1, s.poisonError, "2 hours")
	exec(insert, poisoned, "pending", 0, nil, "2 hours")
	for range s.fresh {
		exec(insert, uuid.New(), "pending", 0, nil, s.freshAge)
	}
	exec(`INSERT INTO aa_outbox_consumer (consumer, state, paused_at, reason, probes)
		VALUES ($1, 'paused', now() - $2::interval, $3, $4)`, s.paused, s.pausedFor, s.pauseReason, s.probes)
}

// steadyLoad writes realistic customer mutations (loadgen.Steady: creates,
// partial updates, deletes, a burst every 2 s) at about rate events/s into
// db until the returned stop is called; the test fails if the load fails.
func steadyLoad(t *testing.T, db *testenv.DB, rate int) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := loadgen.Steady(ctx, db.Pool, outbox.NewWriter(outbox.WriterConfig{Schema: db.Schema}), loadgen.New(1), rate, 10, 2*time.Second, 20)
		done <- err
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("load: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// hookAndSearchConfig writes the configuration of a relay on db's schema
// with a webhook consumer (crm-hook, to hookURL) and a search consumer of
// the customer index alias, both on every customer event, serving HTTP on
// addr with the given further http settings (flow style, e.g. intervals).
func hookAndSearchConfig(t *testing.T, db *testenv.DB, addr, hookURL, alias, httpExtra string) string {
	t.Helper()
	defs, projections := customerIndex(t, alias)
	return writeConfig(t, fmt.Sprintf(`
database: {url: %q, schema: %s}
http: {listen: %q, %s}
relay: {poll_interval: 200ms}
engine: {urls: [%q]}
indexes: {definitions: %q, projections: [%q]}
consumers:
  - {name: crm-hook, type: webhook, webhook: {url: %q, secret: whsec_c2VjcmV0}}
  - {name: search, type: search, search: {indexes: [%s]}}
routes:
  - {consumer: crm-hook, event_types: ["entity.customer.*"]}
  - {consumer: search, event_types: ["entity.customer.*"]}
`, db.URL, db.Schema, addr, httpExtra, testenv.EngineURL(t), defs, projections, hookURL, alias))
}
