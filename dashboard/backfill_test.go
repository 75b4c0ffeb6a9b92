package dashboard

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/searchsync/searchsync/backfill"
	"github.com/searchsync/searchsync/dashboard/dashboardtest"
	"github.com/searchsync/searchsync/internal/secret"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/outbox/outboxadmin"
	"github.com/searchsync/searchsync/routing"
)

// backfillSources are the sources of the tests, over a customer table of
// the test's schema: customers (fast), slow (5 rows a chunk, 10 rows/s) and
// broken (its rows are not snapshot events).
func backfillSources(schema string) []backfill.Source {
	q := func(eventType string) string {
		return `SELECT c.id AS aggregate_id, '` + eventType + `' AS event_type,
       jsonb_build_object('entity_type', 'customer', 'entity_id', c.id, 'version', 1, 'after', jsonb_build_object('name', c.name)) AS payload
FROM ` + schema + `.customer c`
	}
	return []backfill.Source{
		{Name: "customers", Query: q("entity.customer.snapshot"), ChunkSize: 10},
		{Name: "slow", Query: q("entity.customer.snapshot"), ChunkSize: 5, Rate: 10},
		{Name: "broken", Query: q("entity.customer.updated")},
	}
}

// backfillServer serves the console with actions on (testToken) and a
// Backfills service over db; stop stops the service as a shutdown does and
// waits for it.
func backfillServer(t *testing.T, db *testenv.DB, log *testenv.LogBuffer) (srv *httptest.Server, stop func()) {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(log, nil))
	b := &Backfills{Sources: backfillSources(db.Schema), Pool: db.Pool, Schema: db.Schema, Logger: logger,
		Route: func(string, string) []string { return []string{"search"} }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = b.Run(ctx) // nil: it returns when ctx ends
	}()
	stop = func() {
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatal("the backfills service did not stop within 20 s")
		}
	}
	srv = httptest.NewServer(Handler(Source{Sampler: newSampler(db), Instance: "test", Logger: logger,
		Events: &Events{Admin: outboxadmin.New(db.Schema).WithRouting(&routing.Table{Consumers: []string{"search"},
			Routes: []routing.Route{{Consumer: "search"}}}), DB: db.Pool, Token: secret.New(testToken)}, Backfill: b}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		cancel()
		<-done
	})
	// Start refuses until the service runs.
	testenv.Eventually(t, 5*time.Second, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.base != nil
	}, "the backfills service did not start")
	return srv, stop
}

// backfillRow reads /api/backfill and returns the row of source.
func backfillRow(t *testing.T, srv *httptest.Server, source string) BackfillRow {
	t.Helper()
	code, body := do(t, "GET", srv.URL+"/api/backfill", nil, "")
	var r BackfillResponse
	if err := json.Unmarshal([]byte(body), &r); err != nil || code != http.StatusOK {
		t.Fatalf("/api/backfill: %d %s (%v)", code, body, err)
	}
	for _, row := range r.Sources {
		if row.Source.Name == source {
			return row
		}
	}
	t.Fatalf("/api/backfill has no row of %s: %s", source, body)
	return BackfillRow{}
}

// jobState is the state of source's newest job ("" when none).
func jobState(t *testing.T, srv *httptest.Server, source string) (string, *BackfillJob) {
	row := backfillRow(t, srv, source)
	if row.Job == nil {
		return "", nil
	}
	return row.Job.State, row.Job
}

func operatorHeaders() map[string]string {
	return map[string]string{TokenHeader: testToken, OperatorHeader: "ada"}
}

// TestConsoleBackfillAPI starts backfills through the console's API over
// real PostgreSQL: one runs to success and its snapshot events are in the
// outbox; one is interrupted by a shutdown (its job released) and resumed
// by the next start; one is aborted; one is interrupted by a bad row, which
// the panel names. Requests without the operator token, or from another
// site, start nothing.
func TestConsoleBackfillAPI(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE customer (id uuid PRIMARY KEY, name text NOT NULL);
INSERT INTO customer SELECT gen_random_uuid(), 'customer ' || g FROM generate_series(1, 40) g`); err != nil {
		t.Fatal(err)
	}
	log := &testenv.LogBuffer{}
	srv, stop := backfillServer(t, db, log)
	start := srv.URL + "/api/backfill/customers/start"

	// Refused: no token, a wrong one, another site's page; nothing starts.
	for name, h := range map[string]map[string]string{
		"no token":    nil,
		"wrong token": {TokenHeader: "guess"},
		"cross-site":  {TokenHeader: testToken, "Origin": "https://evil.example.net"},
	} {
		code, body := do(t, "POST", start, h, "")
		var e Error
		if (code != http.StatusUnauthorized && code != http.StatusForbidden) || json.Unmarshal([]byte(body), &e) != nil || e.Error == "" {
			t.Errorf("%s: %d %s, want 401/403 with a JSON error", name, code, body)
		}
	}
	if st, _ := jobState(t, srv, "customers"); st != "" {
		t.Fatalf("a refused start started a job: %s", st)
	}
	if !strings.Contains(log.String(), "console: action refused") || strings.Contains(log.String(), "guess") || strings.Contains(log.String(), testToken) {
		t.Errorf("refusals not logged, or a token logged:\n%s", log.String())
	}
	if code, body := do(t, "POST", srv.URL+"/api/backfill/nope/start", operatorHeaders(), ""); code != http.StatusNotFound ||
		!strings.Contains(body, `declared: customers, slow, broken`) {
		t.Errorf("unknown source: %d %s", code, body)
	}

	// A dry run counts and shows a sample, routed; it writes nothing.
	code, body := do(t, "POST", srv.URL+"/api/backfill/customers/dry-run", operatorHeaders(), `{"sample": 2}`)
	var plan BackfillPlan
	if err := json.Unmarshal([]byte(body), &plan); err != nil || code != http.StatusOK || plan.Rows != 40 || len(plan.Sample) != 2 ||
		plan.Sample[0].EventType != "entity.customer.snapshot" || len(plan.Sample[0].Consumers) != 1 {
		t.Fatalf("dry run: %d %s", code, body)
	}

	// Start: it runs here in the background until it succeeded.
	code, body = do(t, "POST", start, operatorHeaders(), `{"note": "first load"}`)
	if code != http.StatusAccepted {
		t.Fatalf("start: %d %s", code, body)
	}
	testenv.Eventually(t, 30*time.Second, func() bool { st, _ := jobState(t, srv, "customers"); return st == backfill.StateSucceeded },
		"the customers backfill did not succeed")
	_, j := jobState(t, srv, "customers")
	if j.Rows != 40 || j.Total != 40 || j.Percent == nil || *j.Percent != 100 || j.Here || !strings.HasPrefix(j.Owner, "console:ada@") {
		t.Errorf("succeeded job: %+v", j)
	}
	if n := snapshotEvents(t, db, j.CorrelationID); n != 40 {
		t.Errorf("%d snapshot events of the customers backfill in the outbox, want 40", n)
	}

	// A shutdown interrupts a running backfill: its job is released, and
	// the next start (another process's console) resumes it.
	if code, body := do(t, "POST", srv.URL+"/api/backfill/slow/start", operatorHeaders(), ""); code != http.StatusAccepted {
		t.Fatalf("start slow: %d %s", code, body)
	}
	testenv.Eventually(t, 20*time.Second, func() bool { _, j := jobState(t, srv, "slow"); return j != nil && j.Rows >= 5 },
		"the slow backfill wrote no chunk")
	if _, j := jobState(t, srv, "slow"); j.State != backfill.StateRunning || !j.Here || j.Rate <= 0 {
		t.Errorf("slow, running: %+v", j)
	}
	if code, body := do(t, "POST", srv.URL+"/api/backfill/slow/start", operatorHeaders(), ""); code != http.StatusConflict {
		t.Errorf("a second start of a running backfill: %d %s, want 409", code, body)
	}
	stop()
	st, j := jobState(t, srv, "slow")
	if st != backfill.StateInterrupted || j.Owner != "" || j.Rows >= 40 || j.InterruptedBy != "" {
		t.Fatalf("after the shutdown: %+v, want interrupted, released, not done", j)
	}
	if code, _ := do(t, "POST", srv.URL+"/api/backfill/slow/start", operatorHeaders(), ""); code != http.StatusServiceUnavailable {
		t.Errorf("a start after the shutdown: %d, want 503", code)
	}
	srv2, _ := backfillServer(t, db, log)
	code, body = do(t, "POST", srv2.URL+"/api/backfill/slow/start", operatorHeaders(), "")
	if code != http.StatusAccepted || !strings.Contains(body, "resumed after") {
		t.Fatalf("resume: %d %s", code, body)
	}
	testenv.Eventually(t, 30*time.Second, func() bool { st, _ := jobState(t, srv2, "slow"); return st == backfill.StateSucceeded },
		"the resumed backfill did not succeed")
	if _, j2 := jobState(t, srv2, "slow"); j2.ID != j.ID || !j2.Resumed || snapshotEvents(t, db, j2.CorrelationID) != 40 {
		t.Errorf("resumed job %+v; want job %d, resumed, 40 events (none twice)", j2, j.ID)
	}

	// Abort: the runner stops before its next chunk.
	if code, body := do(t, "POST", srv2.URL+"/api/backfill/slow/start", operatorHeaders(), ""); code != http.StatusAccepted {
		t.Fatalf("start slow again: %d %s", code, body)
	}
	code, body = do(t, "POST", srv2.URL+"/api/backfill/slow/abort", operatorHeaders(), `{"note": "wrong day"}`)
	if code != http.StatusOK {
		t.Fatalf("abort: %d %s", code, body)
	}
	testenv.Eventually(t, 10*time.Second, func() bool { _, j := jobState(t, srv2, "slow"); return j.State == backfill.StateAborted && !j.Here },
		"the aborted backfill still runs")
	if _, j := jobState(t, srv2, "slow"); !strings.Contains(j.Error, "aborted in the console by console:ada: wrong day") {
		t.Errorf("aborted job: %+v", j)
	}
	if code, body := do(t, "POST", srv2.URL+"/api/backfill/slow/abort", operatorHeaders(), ""); code != http.StatusConflict {
		t.Errorf("abort of nothing: %d %s, want 409", code, body)
	}

	// A bad row interrupts a backfill; the panel says which and why.
	if code, body := do(t, "POST", srv2.URL+"/api/backfill/broken/start", operatorHeaders(), ""); code != http.StatusAccepted {
		t.Fatalf("start broken: %d %s", code, body)
	}
	testenv.Eventually(t, 10*time.Second, func() bool { st, _ := jobState(t, srv2, "broken"); return st == backfill.StateInterrupted },
		"the broken backfill was not interrupted")
	if _, j := jobState(t, srv2, "broken"); !strings.Contains(j.InterruptedBy, `does not end in ".snapshot"`) {
		t.Errorf("broken: interrupted by %q", j.InterruptedBy)
	}
	if code, body := do(t, "POST", srv2.URL+"/api/backfill/broken/dry-run", operatorHeaders(), ""); code != http.StatusConflict || !strings.Contains(body, "row with key") {
		t.Errorf("dry run of broken: %d %s", code, body)
	}
	if !strings.Contains(log.String(), `action="backfill start" source=customers by=console:ada`) {
		t.Errorf("the start is not logged:\n%s", log.String())
	}

	// The page's panel: a row per source with its job's state and why.
	bctx := dashboardtest.OpenBrowser(t, srv2.URL+"/")
	var rows map[string]string
	testenv.Eventually(t, 15*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(bctx, 5*time.Second)
		defer cancel()
		raw, err := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify(Object.fromEntries([...document.querySelectorAll("#backfill tr[data-source]")].map((tr) => [tr.dataset.source, (tr.dataset.state || "") + " | " + tr.textContent])))`))
		return err == nil && json.Unmarshal([]byte(raw), &rows) == nil && len(rows) == 3
	}, "the Backfills panel shows no rows: %v", rows)
	for src, want := range map[string][]string{
		"customers": {"succeeded | ", "40 rows in 4 chunks"},
		"slow":      {"aborted | ", "aborted in the console by console:ada: wrong day"},
		"broken":    {"interrupted | ", `interrupted by: backfill source broken: row with key`},
	} {
		for _, w := range want {
			if !strings.Contains(rows[src], w) {
				t.Errorf("panel row %s: %q lacks %q", src, rows[src], w)
			}
		}
	}
}

// snapshotEvents counts the outbox's snapshot events of a backfill, by its
// correlation id.
func snapshotEvents(t *testing.T, db *testenv.DB, correlation string) int {
	t.Helper()
	var n int
	if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM aa_outbox_event
WHERE correlation_id = $1::uuid AND event_type = 'entity.customer.snapshot'`, correlation).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
