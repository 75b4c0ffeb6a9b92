package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/goccy/go-yaml"

	"github.com/searchsync/searchsync/dashboard/dashboardtest"
	"github.com/searchsync/searchsync/internal/loadgen"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/outbox"
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

	bctx := dashboardtest.OpenBrowser(t, "http://"+addr+"/")
	text := func(sel string) string { t.Helper(); return dashboardtest.Text(t, bctx, sel) }
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
			c := dashboardtest.Chart(t, bctx, "lagchart")
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
