package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/searchsync/searchsync/dashboard"
	"github.com/searchsync/searchsync/internal/config"
	"github.com/searchsync/searchsync/internal/loadgen"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/lag"
	"github.com/searchsync/searchsync/outbox"
)

// openBrowser starts headless Chromium on url and returns its context.
func openBrowser(t *testing.T, url string) context.Context {
	t.Helper()
	bctx, cancel := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)), chromedp.NoSandbox, chromedp.DisableGPU,
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

// chartState is what the page's uPlot instance of one chart holds.
type chartState struct {
	Labels  []string  `json:"labels"`
	Axes    int       `json:"axes"`
	AxesDOM int       `json:"axes_dom"`
	XTime   bool      `json:"x_time"`
	Xs      []float64 `json:"xs"`
	Legend  []string  `json:"legend"`
}

// chart reads the uPlot instance of the chart id (nil before it is drawn).
func chart(t *testing.T, bctx context.Context, id string) *chartState {
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
	var c *chartState
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		t.Fatalf("chart %s: %v (%s)", id, err, raw)
	}
	return c
}

// stopRelay stops a relay started by startRelay and waits for it.
func stopRelay(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait() // the startRelay cleanup waits again, harmlessly
}

func historySamples(t *testing.T, addr string) []dashboard.Sample {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/api/history?range=1h")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h dashboard.HistoryResponse
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/api/history: %d %v", resp.StatusCode, err)
	}
	return h.Samples
}

// TestConsoleHistoryAcrossRelays runs relays on one outbox under a steady
// load: while two run, one writes the history (aa_console_sample) and both
// serve the same; after both stopped, a new relay's page in headless
// Chromium draws the older samples, with time axes and one line per index
// and per consumer.
func TestConsoleHistoryAcrossRelays(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(hook.Close)
	alias := testenv.Name("console")
	config := func(addr string) string {
		return hookAndSearchConfig(t, db, addr, hook.URL, alias, "sample_interval: 200ms, history_interval: 300ms")
	}
	lctx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	done := make(chan error, 1)
	go func() {
		_, err := loadgen.Steady(lctx, db.Pool, outbox.NewWriter(outbox.WriterConfig{Schema: db.Schema}), loadgen.New(1), 100, 10, 2*time.Second, 20)
		done <- err
	}()
	t.Cleanup(func() {
		stopLoad()
		if err := <-done; err != nil {
			t.Errorf("load: %v", err)
		}
	})
	count := func(sql string) int {
		t.Helper()
		var n int
		if err := db.Pool.QueryRow(ctx, sql).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	addrA, addrB := testenv.FreeAddr(t), testenv.FreeAddr(t)
	relayA := startRelay(t, config(addrA), addrA)
	testenv.Eventually(t, 60*time.Second, func() bool { return count("SELECT count(*) FROM aa_console_sample") >= 5 }, "relay A wrote no history")
	relayB := startRelay(t, config(addrB), addrB)
	before := count("SELECT count(*) FROM aa_console_sample")
	testenv.Eventually(t, 60*time.Second, func() bool { return count("SELECT count(*) FROM aa_console_sample") >= before+10 },
		"no history written while two relays run")
	if n := count("SELECT count(DISTINCT instance) FROM aa_console_sample"); n != 1 {
		t.Errorf("%d relays wrote the history while two ran; want one", n)
	}
	// Both serve the same history, from the table.
	ha, hb := historySamples(t, addrA), historySamples(t, addrB)
	if len(ha) == 0 || len(hb) == 0 || ha[0].At != hb[0].At {
		t.Fatalf("relays serve different histories: %d and %d samples", len(ha), len(hb))
	}
	oldest := ha[0]
	stopRelay(t, relayA)
	stopRelay(t, relayB)

	addrC := testenv.FreeAddr(t)
	startRelay(t, config(addrC), addrC)
	bctx := openBrowser(t, "http://"+addrC+"/")
	wantLines := []string{"consumer crm-hook", "index " + alias + " (search)"}
	var lagChart *chartState
	testenv.Eventually(t, 60*time.Second, func() bool {
		lagChart = chart(t, bctx, "lagchart")
		return lagChart != nil && len(lagChart.Xs) > 0 && slices.Equal(lagChart.Labels, wantLines) &&
			lagChart.Xs[len(lagChart.Xs)-1] > float64(time.Now().Add(-5*time.Second).Unix())
	}, "the lag chart never drew %v up to now: %+v", wantLines, lagChart)
	// The samples of the relays that stopped are there.
	if first := lagChart.Xs[0]; first > float64(oldest.At.Unix())+5 {
		t.Errorf("the chart starts at %v, after the first sample of the stopped relays (%v)", time.Unix(int64(first), 0), oldest.At)
	}
	if !lagChart.XTime || lagChart.Axes != 2 || lagChart.AxesDOM != 2 {
		t.Errorf("lag chart axes: %+v", lagChart)
	}
	for _, want := range wantLines {
		if !slices.Contains(lagChart.Legend, want) {
			t.Errorf("lag chart legend %q lacks %q", lagChart.Legend, want)
		}
	}
	if b := chart(t, bctx, "blockedchart"); b == nil || !slices.Equal(b.Labels, wantLines) {
		t.Errorf("blocked chart: %+v", b)
	}
	if r := chart(t, bctx, "ratechart"); r == nil || len(r.Labels) != 1 {
		t.Errorf("throughput chart: %+v", r)
	}
	if l := chart(t, bctx, "latencychart"); l == nil || !slices.Contains(l.Labels, "search p99") || !slices.Contains(l.Labels, "crm-hook p50") {
		t.Errorf("latency chart: %+v", l)
	}
	checkSearchable(t, bctx, addrC, alias)
	if out := os.Getenv("SEARCHSYNC_CONSOLE_SCREENSHOT"); out != "" {
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(out, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The 24 h range reads the same table.
	if _, err := chromedp.Run(bctx, chromedp.Click(chromedp.CSS(`#ranges button[data-range="24h"]`))); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		c := chart(t, bctx, "lagchart")
		return c != nil && len(c.Xs) > 0 && c.Xs[0] <= float64(oldest.At.Unix())+60
	}, "the 24 h range lost the older samples")
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

// TestConsoleQueriesPerRefresh opens the page in headless Chromium over the
// handler the relay serves and counts the database statements its refreshes
// cost (the lag sampler's reads run whether a page is open or not) and the
// bytes of the page's assets.
func TestConsoleQueriesPerRefresh(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	stuck{poisonError: "search: mapper_parsing_exception", fresh: 2, freshAge: "3 seconds",
		paused: "crm-hook", pausedFor: "5 minutes", pauseReason: "connection refused", probes: 1}.seed(t, db)
	smp := newTestSampler(db)
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
	h := dashboard.Handler(dashboard.Source{Sampler: smp, Instance: "test", History: hist, Reindex: reindexPanel(cdb, nil),
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
		if r.URL.Path == "/" || !slices.Contains([]string{"/api/state", "/api/history", "/api/reindex"}, r.URL.Path) {
			assetBytes.Add(cw.n)
		}
	}))
	t.Cleanup(srv.Close)
	bctx := openBrowser(t, srv.URL+"/")
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

// newTestSampler is a lag sampler over the consumers stuck.seed expects.
func newTestSampler(db *testenv.DB) *lag.Sampler {
	consumers := []config.Consumer{
		{Name: "search", Type: "search", Search: &config.Search{Indexes: []string{"customers"}}},
		{Name: "crm-hook", Type: "webhook"},
	}
	routes := []config.Route{{Consumer: "search", EventTypes: []string{"entity.customer.*"}}, {Consumer: "crm-hook", EventTypes: []string{"entity.customer.*"}}}
	return lag.NewSampler(lag.NewReader(db.Pool, db.Schema, consumers, routes), lag.SamplerConfig{}, nil)
}

// TestConsoleActions runs a relay with an operator token over an outbox
// with two failed events: a retry from the page in headless Chromium makes
// the first flow (the relay delivers it: checked in the database) and is
// recorded in aa_job with who did it; an action without the token, with a
// wrong one, with the token in the URL, or from another site (a form posted
// by another origin's page in the same browser, and requests carrying the
// token with a foreign Origin or Sec-Fetch-Site) changes nothing.
func TestConsoleActions(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	var delivered atomic.Int64
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		delivered.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(hook.Close)
	const token = "op-token-5e3c9a"
	tokenFile := filepath.Join(t.TempDir(), "operator-token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var ids [2]int64
	for i := range ids {
		if err := db.Pool.QueryRow(ctx, `INSERT INTO aa_outbox_event (event_type, aggregate_type, aggregate_id, payload, status, attempts, last_error)
			VALUES ('entity.customer.updated', 'DDM_ENTITY', $1, '{"version": 1, "name": "Ada"}', 'failed', 3, 'webhook: HTTP 500 from the endpoint')
			RETURNING id`, uuid.New()).Scan(&ids[i]); err != nil {
			t.Fatal(err)
		}
	}
	addr := testenv.FreeAddr(t)
	cfg := writeConfig(t, fmt.Sprintf(`
database: {url: %q, schema: %s}
http: {listen: %q, operator_token: "file:%s"}
relay: {poll_interval: 200ms}
consumers:
  - {name: crm-hook, type: webhook, webhook: {url: %q, secret: whsec_c2VjcmV0}}
routes:
  - {consumer: crm-hook, event_types: ["entity.customer.*"]}
`, db.URL, db.Schema, addr, tokenFile, hook.URL))
	startRelay(t, cfg, addr)
	status := func(id int64) string {
		t.Helper()
		var s string
		err := db.Pool.QueryRow(ctx, "SELECT status::text FROM aa_outbox_event WHERE id = $1", id).Scan(&s)
		if errors.Is(err, pgx.ErrNoRows) {
			return "gone"
		} else if err != nil {
			t.Fatal(err)
		}
		return s
	}
	jobs := func() int {
		t.Helper()
		var n int
		if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM aa_job WHERE job_kind IN ('outbox_retry', 'outbox_ack')").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	// Refused: the event stays failed, no aa_job row.
	base := "http://" + addr + "/api/events/" + strconv.FormatInt(ids[1], 10)
	for _, c := range []struct {
		name    string
		url     string
		headers map[string]string
		want    int
	}{
		{"no token", base + "/retry", nil, http.StatusUnauthorized},
		{"wrong token", base + "/ack", map[string]string{dashboard.TokenHeader: "guess"}, http.StatusUnauthorized},
		{"token in the URL", base + "/retry?token=" + token, nil, http.StatusUnauthorized},
		{"foreign Origin", base + "/retry", map[string]string{dashboard.TokenHeader: token, "Origin": "http://evil.example"}, http.StatusForbidden},
		{"cross-site fetch", base + "/ack", map[string]string{dashboard.TokenHeader: token, "Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		{"same-site other port", base + "/ack", map[string]string{dashboard.TokenHeader: token, "Sec-Fetch-Site": "same-site", "Origin": "http://127.0.0.1:1"}, http.StatusForbidden},
	} {
		req, _ := http.NewRequest(http.MethodPost, c.url, nil)
		for k, v := range c.headers {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body dashboard.Error
		_ = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != c.want || body.Error == "" || strings.Contains(body.Error, token) {
			t.Errorf("%s: %d %q, want %d with a reason (and never the token)", c.name, resp.StatusCode, body.Error, c.want)
		}
	}

	bctx := openBrowser(t, "http://"+addr+"/")
	// A classic cross-site request: another origin's page posts to the
	// console in the same browser (a simple request, which needs no
	// preflight; one carrying the token header would need one, which the
	// console does not answer).
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<title>evil</title><script>
fetch(%q, {method: "POST", mode: "no-cors", body: "x", headers: {"Content-Type": "text/plain"}}).then(() => { document.title = "posted"; }, (e) => { document.title = "error " + e; });
</script>`, base+"/retry")
	}))
	t.Cleanup(evil.Close)
	evilCtx, cancelEvil := chromedp.NewContext(bctx)
	if _, err := chromedp.Run(evilCtx, chromedp.Navigate(evil.URL)); err != nil {
		t.Fatal(err)
	}
	var title string
	testenv.Eventually(t, 20*time.Second, func() bool {
		title, _ = chromedp.Run(evilCtx, chromedp.Title())
		return title == "posted"
	}, "the other site's page never posted: %q", title)
	cancelEvil()
	if s, n := status(ids[1]), jobs(); s != "failed" || n != 0 {
		t.Fatalf("after the refused requests: event %d %s, %d aa_job rows; want failed, 0", ids[1], s, n)
	}

	// The page lists both failed events; retry the first with the token.
	rowsText := func() string {
		s, _ := chromedp.Run(bctx, chromedp.Text(chromedp.CSS("#events tbody")))
		return s
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		s := rowsText()
		return strings.Contains(s, strconv.FormatInt(ids[0], 10)) && strings.Contains(s, strconv.FormatInt(ids[1], 10)) && strings.Contains(s, "HTTP 500")
	}, "the events table never listed the failed events: %q", rowsText())
	// One event's page: the whole row, its payload pretty-printed.
	if _, err := chromedp.Run(bctx, chromedp.Click(chromedp.CSS(fmt.Sprintf(`a[data-open="%d"]`, ids[0])))); err != nil {
		t.Fatal(err)
	}
	var detail string
	testenv.Eventually(t, 20*time.Second, func() bool {
		detail, _ = chromedp.Run(bctx, chromedp.Text(chromedp.CSS("#detailjson")))
		return strings.Contains(detail, `"name": "Ada"`) && strings.Contains(detail, `"last_error": "webhook: HTTP 500 from the endpoint"`)
	}, "the event's page never showed its row: %q", detail)
	// Without the token the page refuses before asking the relay.
	if _, err := chromedp.Run(bctx, chromedp.Click(chromedp.CSS(fmt.Sprintf(`#events button[data-act="retry"][data-id="%d"]`, ids[0])))); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(bctx, chromedp.SendKeys(chromedp.CSS("#operator"), "ada")); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(bctx, chromedp.SendKeys(chromedp.CSS("#token"), token)); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(bctx, chromedp.Click(chromedp.CSS(fmt.Sprintf(`#events button[data-act="retry"][data-id="%d"]`, ids[0])))); err != nil {
		t.Fatal(err)
	}
	var msg string
	testenv.Eventually(t, 30*time.Second, func() bool {
		msg, _ = chromedp.Run(bctx, chromedp.Text(chromedp.CSS("#actionmsg")))
		return strings.Contains(msg, "recorded as job")
	}, "the retry never answered: %q", msg)
	// The relay delivers it: dispatched (or compacted away), the webhook called.
	testenv.Eventually(t, 60*time.Second, func() bool {
		s := status(ids[0])
		return (s == "dispatched" || s == "gone") && delivered.Load() > 0
	}, "the retried event never flowed: %s", status(ids[0]))
	var owner string
	if err := db.Pool.QueryRow(ctx, "SELECT owner FROM aa_job WHERE job_kind = 'outbox_retry'").Scan(&owner); err != nil || owner != "console:ada" {
		t.Errorf("aa_job owner %q (%v), want console:ada", owner, err)
	}
	if s, n := status(ids[1]), jobs(); s != "failed" || n != 1 {
		t.Errorf("the other event is %s with %d aa_job rows; want failed, 1", s, n)
	}
	if out := os.Getenv("SEARCHSYNC_CONSOLE_ACTIONS_SCREENSHOT"); out != "" {
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err == nil {
			_ = os.WriteFile(out, png, 0o644)
		}
	}
}
