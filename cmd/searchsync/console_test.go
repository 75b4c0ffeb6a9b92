package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
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

	"github.com/searchsync/searchsync/dashboard"
	"github.com/searchsync/searchsync/dashboard/dashboardtest"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/outbox/outboxadmin"
)

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

// checkThroughput compares the rates of every sample of the history
// (aa_console_sample, not thinned) with the events dispatched in its
// window: rate × seconds is the count, for the events handled and for each
// consumer.
func checkThroughput(t *testing.T, db *testenv.DB) {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `SELECT sample FROM aa_console_sample ORDER BY at`)
	if err != nil {
		t.Fatal(err)
	}
	samples, err := pgx.CollectRows(rows, pgx.RowTo[dashboard.Sample])
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, s := range samples {
		secs := s.RateUntil.Sub(s.RateFrom).Seconds()
		if secs <= 0 {
			continue
		}
		var n int
		if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM aa_outbox_event WHERE dispatched_at >= $1 AND dispatched_at < $2`,
			s.RateFrom, s.RateUntil).Scan(&n); err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{"handled": s.Rate}
		for name, c := range s.Consumers {
			got[name] = c.Rate
		}
		for name, rate := range got {
			if c := int(math.Round(rate * secs)); c != n {
				t.Errorf("sample at %s: %s %.3f/s over [%s, %s) is %d events; %d were dispatched then",
					s.At.Format("15:04:05.000"), name, rate, s.RateFrom.Format("15:04:05"), s.RateUntil.Format("15:04:05"), c, n)
			}
		}
		checked++
	}
	if checked < 5 {
		t.Errorf("only %d samples had a rate window", checked)
	}
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
	defer steadyLoad(t, db, 100)()
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
	// Each sample's throughput is the outbox's own count: the events
	// dispatched in its window, handled and per consumer (both consumers
	// take every event).
	checkThroughput(t, db)
	stopRelay(t, relayA)
	stopRelay(t, relayB)

	addrC := testenv.FreeAddr(t)
	startRelay(t, config(addrC), addrC)
	bctx := dashboardtest.OpenBrowser(t, "http://"+addrC+"/")
	wantLines := []string{"crm-hook", "search → " + alias}
	var lagChart *dashboardtest.ChartState
	testenv.Eventually(t, 60*time.Second, func() bool {
		lagChart = dashboardtest.Chart(t, bctx, "lagchart")
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
	if b := dashboardtest.Chart(t, bctx, "blockedchart"); b == nil || !slices.Equal(b.Labels, wantLines) {
		t.Errorf("blocked chart: %+v", b)
	}
	if r := dashboardtest.Chart(t, bctx, "ratechart"); r == nil || !slices.Equal(r.Labels, []string{"crm-hook", "search", "handled (outbox)"}) {
		t.Errorf("throughput chart: %+v", r)
	}
	if b := dashboardtest.Chart(t, bctx, "backlogchart"); b == nil || !slices.Equal(b.Labels, []string{"crm-hook", "crm-hook paused", "search", "search paused"}) {
		t.Errorf("backlog chart: %+v", b)
	}
	if l := dashboardtest.Chart(t, bctx, "latencychart"); l == nil || !slices.Contains(l.Labels, "search p99") || !slices.Contains(l.Labels, "crm-hook p50") {
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
		c := dashboardtest.Chart(t, bctx, "lagchart")
		return c != nil && len(c.Xs) > 0 && c.Xs[0] <= float64(oldest.At.Unix())+60
	}, "the 24 h range lost the older samples")
}

// The operator token of the relays startOperatorRelay starts.
const token = "op-token-5e3c9a"

// startOperatorRelay runs a relay with the operator token whose consumer
// crm-hook (a webhook that answers 204) gets entity.customer.*, and returns
// its address and the count of the webhook's requests.
func startOperatorRelay(t *testing.T, db *testenv.DB) (string, *atomic.Int64) {
	t.Helper()
	delivered := new(atomic.Int64)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		delivered.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(hook.Close)
	tokenFile := filepath.Join(t.TempDir(), "operator-token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
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
	return addr, delivered
}

// eventStatus is an event's status, "gone" when it left the outbox.
func eventStatus(t *testing.T, db *testenv.DB, id int64) string {
	t.Helper()
	var s string
	err := db.Pool.QueryRow(context.Background(), "SELECT status::text FROM aa_outbox_event WHERE id = $1", id).Scan(&s)
	if errors.Is(err, pgx.ErrNoRows) {
		return "gone"
	} else if err != nil {
		t.Fatal(err)
	}
	return s
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
	var ids [2]int64
	for i := range ids {
		if err := db.Pool.QueryRow(ctx, `INSERT INTO aa_outbox_event (event_type, aggregate_type, aggregate_id, payload, status, attempts, last_error)
			VALUES ('entity.customer.updated', 'DDM_ENTITY', $1, '{"version": 1, "name": "Ada"}', 'failed', 3, 'webhook: HTTP 500 from the endpoint')
			RETURNING id`, uuid.New()).Scan(&ids[i]); err != nil {
			t.Fatal(err)
		}
	}
	addr, delivered := startOperatorRelay(t, db)
	status := func(id int64) string { return eventStatus(t, db, id) }
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

	bctx := dashboardtest.OpenBrowser(t, "http://"+addr+"/")
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
	if loc, err := chromedp.Run(bctx, chromedp.Location()); err != nil || !strings.HasSuffix(loc, fmt.Sprintf("/events/%d", ids[0])) {
		t.Errorf("the event's page is at %q (%v), want …/events/%d", loc, err, ids[0])
	}
	if _, err := chromedp.Run(bctx, chromedp.Navigate("http://"+addr+"/")); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		return strings.Contains(rowsText(), strconv.FormatInt(ids[0], 10))
	}, "back on the console, the events table never listed the failed events: %q", rowsText())
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

// TestConsoleBulkActions runs a relay with an operator token over an outbox
// with three failed entity.customer.updated events, one failed event of
// another type, and an aggregate whose failed head holds back a pending
// event. The API refuses what it cannot run (no token, a bad action, two
// selectors, an unknown consumer, a filter that narrows nothing without
// "all", a skip for a consumer or of a pending event) and its dry run
// changes nothing; from the page in headless Chromium a retry of every event
// matching the filter makes exactly those flow, after a confirmation that
// shows the dry run's count, and a skip of the aggregate from an event's
// page lets the event behind the head be delivered (checked in the
// database; recorded in aa_job with who did it). Without a configured
// token the page is read-only.
func TestConsoleBulkActions(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	insert := func(etype string, agg uuid.UUID, status string) int64 {
		t.Helper()
		var id int64
		if err := db.Pool.QueryRow(ctx, `INSERT INTO aa_outbox_event (event_type, aggregate_type, aggregate_id, payload, status, attempts, last_error)
			VALUES ($1, 'DDM_ENTITY', $2, '{"version": 1}', $3::text::outbox_status, CASE WHEN $3 = 'failed' THEN 3 ELSE 0 END,
			        CASE WHEN $3 = 'failed' THEN 'webhook: HTTP 500 from the endpoint' END)
			RETURNING id`, etype, agg, status).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	var updated []int64
	for range 3 {
		updated = append(updated, insert("entity.customer.updated", uuid.New(), "failed"))
	}
	other := insert("entity.customer.deleted", uuid.New(), "failed")
	agg := uuid.New()
	head := insert("entity.customer.merged", agg, "failed")
	behind := insert("entity.customer.renamed", agg, "pending")
	addr, delivered := startOperatorRelay(t, db)
	// jobs counts the operator actions' aa_job rows of these kinds (all:
	// none given) and names the last owner.
	jobs := func(kinds ...string) (n int, owner string) {
		t.Helper()
		if len(kinds) == 0 {
			kinds = []string{outboxadmin.JobKindRetry, outboxadmin.JobKindAck, outboxadmin.JobKindSkip}
		}
		if err := db.Pool.QueryRow(ctx, "SELECT count(*), coalesce(max(owner), '') FROM aa_job WHERE job_kind = ANY($1)", kinds).Scan(&n, &owner); err != nil {
			t.Fatal(err)
		}
		return n, owner
	}
	statuses := func(ids ...int64) []string {
		var out []string
		for _, id := range ids {
			out = append(out, eventStatus(t, db, id))
		}
		return out
	}
	post := func(url, body string, withToken bool) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if withToken {
			req.Header.Set(dashboard.TokenHeader, token)
			req.Header.Set(dashboard.OperatorHeader, "script")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		_, _ = io.Copy(&b, resp.Body)
		return resp.StatusCode, b.String()
	}
	actions := "http://" + addr + "/api/actions"

	// Refused: nothing changes, no aa_job row.
	for _, c := range []struct {
		name, body string
		withToken  bool
		want       int
		says       string
	}{
		{"no token", fmt.Sprintf(`{"action": "retry", "ids": [%d]}`, head), false, http.StatusUnauthorized, "operator token"},
		{"bad action", `{"action": "delete", "ids": [1]}`, true, http.StatusBadRequest, `action \"delete\": want retry, ack, skip`},
		{"no selector", `{"action": "retry"}`, true, http.StatusBadRequest, "exactly one of ids, aggregate or filter"},
		{"two selectors", fmt.Sprintf(`{"action": "retry", "ids": [%d], "filter": {"event_type": "entity.*"}}`, head), true, http.StatusBadRequest,
			"ids and filter: give exactly one"},
		{"unknown consumer", `{"action": "retry", "filter": {"consumer": "nope", "event_type": "entity.*"}}`, true, http.StatusBadRequest,
			`unknown consumer \"nope\"; the configured consumers are crm-hook`},
		{"filter without narrowing", `{"action": "ack", "filter": {"status": "failed"}}`, true, http.StatusBadRequest, `or say \"all\": true`},
		{"consumer alone", `{"action": "retry", "filter": {"consumer": "crm-hook"}}`, true, http.StatusBadRequest, "filter narrows nothing"},
		{"aggregate pattern", fmt.Sprintf(`{"action": "skip", "aggregate": {"type": "DDM_*", "id": %q}}`, agg), true, http.StatusBadRequest, "no * or ?"},
		{"unknown field", `{"action": "retry", "ids": [1], "every": true}`, true, http.StatusBadRequest, "unknown field"},
		{"skip for a consumer", `{"action": "skip", "consumer": "crm-hook", "filter": {"event_type": "entity.*"}}`, true, http.StatusConflict,
			"ack --consumer crm-hook"},
		{"skip of a pending event", fmt.Sprintf(`{"action": "skip", "ids": [%d]}`, behind), true, http.StatusConflict, "is pending"},
	} {
		code, body := post(actions, c.body, c.withToken)
		if code != c.want || !strings.Contains(body, c.says) || strings.Contains(body, token) {
			t.Errorf("%s: %d %s, want %d saying %q", c.name, code, body, c.want, c.says)
		}
	}
	if code, body := post("http://"+addr+"/api/events/"+strconv.FormatInt(behind, 10)+"/skip", "", true); code != http.StatusConflict ||
		!strings.Contains(body, "skip applies to failed events only") {
		t.Errorf("skip of one pending event: %d %s", code, body)
	}
	// A dry run answers the count and the ids, and changes nothing.
	code, body := post(actions, `{"action": "retry", "filter": {"status": "failed", "event_type": "entity.customer.updated"}, "dry_run": true}`, true)
	var dry dashboard.ActionsAnswer
	if err := json.Unmarshal([]byte(body), &dry); code != http.StatusOK || err != nil || !dry.DryRun || dry.Count != 3 || !slices.Equal(dry.IDs, updated) || dry.JobID != 0 {
		t.Fatalf("dry run: %d %s (%v)", code, body, err)
	}
	if n, _ := jobs(); n != 0 || !slices.Equal(statuses(append(slices.Clone(updated), other, head, behind)...),
		[]string{"failed", "failed", "failed", "failed", "failed", "pending"}) {
		t.Fatalf("the refusals or the dry run changed something: %d aa_job rows, %v", n, statuses(append(slices.Clone(updated), other, head, behind)...))
	}

	bctx := dashboardtest.OpenBrowser(t, "http://"+addr+"/")
	run := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		for _, a := range actions {
			if _, err := chromedp.Run(bctx, a); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		}
	}
	text := func(css string) string {
		s, _ := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(css)))
		return s
	}
	waitText := func(css, want, what string) {
		t.Helper()
		testenv.Eventually(t, 30*time.Second, func() bool { return strings.Contains(text(css), want) }, "%s: %s never said %q: %q", what, css, want, text(css))
	}
	run("sign in", chromedp.SendKeys(chromedp.CSS("#operator"), "ada"), chromedp.SendKeys(chromedp.CSS("#token"), token))
	// Retry every failed entity.customer.updated event: the confirmation
	// shows the dry run's count, which changed nothing.
	run("filter", chromedp.SendKeys(chromedp.CSS("#f-type"), "entity.customer.updated"), chromedp.Click(chromedp.CSS("#f-apply")))
	testenv.Eventually(t, 30*time.Second, func() bool {
		s := text("#events tbody")
		return strings.Contains(s, strconv.FormatInt(updated[2], 10)) && !strings.Contains(s, "entity.customer.deleted")
	}, "the filtered list: %q", text("#events tbody"))
	run("retry all", chromedp.Click(chromedp.CSS(`#bulkacts button[data-bulk="retry"]`)))
	waitText("#confirmtext", "Retry 3 events of the filter: failed of type entity.customer.updated?", "the confirmation")
	if n, _ := jobs(); n != 0 || eventStatus(t, db, updated[0]) != "failed" {
		t.Fatal("the page's dry run changed something")
	}
	run("confirm", chromedp.Click(chromedp.CSS("#confirm-yes")))
	waitText("#actionmsg", "recorded as job", "the retry")
	testenv.Eventually(t, 60*time.Second, func() bool {
		for _, s := range statuses(updated...) {
			if s != "dispatched" && s != "gone" {
				return false
			}
		}
		return delivered.Load() >= 3
	}, "the retried events never flowed: %v", statuses(updated...))
	var param string
	if err := db.Pool.QueryRow(ctx, "SELECT params->>'event_type' FROM aa_job WHERE job_kind = 'outbox_retry'").Scan(&param); err != nil || param != "entity.customer.updated" {
		t.Errorf("retry job params.event_type %q (%v)", param, err)
	}
	if n, owner := jobs("outbox_retry"); n != 1 || owner != "console:ada" {
		t.Errorf("%d retry jobs by %q, want 1 by console:ada", n, owner)
	}
	if s := statuses(other, head, behind); !slices.Equal(s, []string{"failed", "failed", "pending"}) {
		t.Errorf("the events outside the filter: %v, want failed, failed, pending", s)
	}

	// Skip the blocked aggregate from its head's page: the event behind it
	// is delivered, the head stays skipped.
	if _, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`document.getElementById("f-type").value = ""; true`)); err != nil {
		t.Fatal(err)
	}
	run("show all", chromedp.Click(chromedp.CSS("#f-apply")))
	waitText("#events tbody", strconv.FormatInt(head, 10), "the list")
	run("open the head", chromedp.Click(chromedp.CSS(fmt.Sprintf(`a[data-open="%d"]`, head))))
	waitText("#detailtitle", "entity.customer.merged", "the head's page")
	run("skip the aggregate", chromedp.Click(chromedp.CSS(`#detailacts button[data-agg-act="skip"]`)))
	waitText("#confirmtext", "Skip 1 event of aggregate DDM_ENTITY/"+agg.String(), "the confirmation")
	if out := os.Getenv("SEARCHSYNC_CONSOLE_BULK_SCREENSHOT"); out != "" {
		if png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100)); err == nil {
			_ = os.WriteFile(out, png, 0o644)
		}
	}
	run("confirm", chromedp.Click(chromedp.CSS("#confirm-yes")))
	waitText("#actionmsg", "skip of aggregate", "the skip")
	run("back to the console", chromedp.Navigate("http://"+addr+"/"))
	waitText("#events tbody", strconv.FormatInt(head, 10), "the list")
	testenv.Eventually(t, 60*time.Second, func() bool {
		s := eventStatus(t, db, behind)
		return s == "dispatched" || s == "gone"
	}, "the event behind the skipped head never flowed: %s", eventStatus(t, db, behind))
	if s := eventStatus(t, db, head); s != "skipped" {
		t.Errorf("the head is %s after the skip, want skipped", s)
	}
	if n, owner := jobs("outbox_skip"); n != 1 || owner != "console:ada" {
		t.Errorf("%d skip jobs by %q, want 1 by console:ada", n, owner)
	}
	// A cancelled confirmation changes nothing.
	run("ack all", chromedp.Click(chromedp.CSS(`#bulkacts button[data-bulk="ack"]`)))
	waitText("#confirmtext", "Ack 1 event of the filter: failed (every event type)?", "the ack's confirmation")
	run("cancel", chromedp.Click(chromedp.CSS("#confirm-no")))
	waitText("#actionmsg", "cancelled; nothing changed", "the cancel")
	if s, n := eventStatus(t, db, other), 0; s != "failed" {
		t.Errorf("after the cancelled ack: %s (%d)", s, n)
	}
	if n, _ := jobs("outbox_ack"); n != 0 {
		t.Errorf("%d ack jobs after a cancelled ack", n)
	}

	// Without a configured token the page is read-only: a hint, no action
	// buttons, and /api/actions refused.
	smp := dashboardtest.Sampler(db)
	if _, err := smp.Sample(ctx); err != nil {
		t.Fatal(err)
	}
	ro := httptest.NewServer(dashboard.Handler(dashboard.Source{Sampler: smp, Events: &dashboard.Events{Admin: outboxadmin.New(db.Schema), DB: db.Pool}}))
	t.Cleanup(ro.Close)
	roCtx, cancelRO := chromedp.NewContext(bctx)
	defer cancelRO()
	if _, err := chromedp.Run(roCtx, chromedp.Navigate(ro.URL)); err != nil {
		t.Fatal(err)
	}
	var page string
	testenv.Eventually(t, 30*time.Second, func() bool {
		page, _ = chromedp.Run(roCtx, chromedp.Evaluate[string](`JSON.stringify({readonly: !document.getElementById("readonly").hidden,
			bulk: !document.getElementById("bulkacts").hidden, rows: document.querySelectorAll("#events tbody tr").length,
			buttons: document.querySelectorAll("#events button, #bulkacts:not([hidden]) button").length})`))
		return page == `{"readonly":true,"bulk":false,"rows":1,"buttons":0}`
	}, "the read-only page: %s", page)
	if code, body := post(ro.URL+"/api/actions", fmt.Sprintf(`{"action": "ack", "ids": [%d]}`, other), true); code != http.StatusForbidden ||
		!strings.Contains(body, "http.operator_token") {
		t.Errorf("an action without a configured token: %d %s", code, body)
	}
}
