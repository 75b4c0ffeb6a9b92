package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"

	"github.com/searchsync/searchsync/dashboard"
	"github.com/searchsync/searchsync/dashboard/dashboardtest"
	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/config"
	"github.com/searchsync/searchsync/internal/secret"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/lag"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/outbox/outboxadmin"
)

// TestConsoleFilterIndexAndError: GET /api/events and POST /api/actions
// filter by index (the customer example's projections, as `searchsync run`
// wires them) and by error pattern, with last errors as the consumers write
// them; the error classes select them; the page's dropdowns send the
// parameters.
func TestConsoleFilterIndexAndError(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	cfg := &config.Config{
		Consumers: []config.Consumer{
			{Name: "search", Type: "search", Search: &config.Search{Indexes: []string{"customers"}}},
			{Name: "crm-hook", Type: "webhook"},
		},
		Routes: []config.Route{{Consumer: "search", EventTypes: []string{"entity.customer.*"}}, {Consumer: "crm-hook", EventTypes: []string{"entity.*"}}},
	}
	cfg.Indexes.Examples = []string{"customer"}
	ix, err := outboxIndexes(cfg)
	if err != nil {
		t.Fatal(err)
	}

	// The reasons as the code writes them: a bulk item the mapping refused,
	// a payload the projection cannot use, a webhook's 422.
	mapping := indexer.Classify(indexer.BulkOp{Type: indexer.OpIndex, Index: "customers_v1", ID: "c1", Version: 3},
		indexer.BulkResult{Status: 400, ErrType: "mapper_parsing_exception", ErrReason: "failed to parse field [age] of type [integer]"}).Reason
	set, err := loadProjections(cfg, builtinExamples)
	if err != nil {
		t.Fatal(err)
	}
	agg := uuid.New()
	_, perr := set.Project(&outbox.Event{ID: 2, EventType: "entity.customer.updated", AggregateType: "DDM_ENTITY", AggregateID: &agg, SchemaVersion: 2,
		Payload: json.RawMessage(`{"after": {"display_name": "Ada"}}`)}, []string{"customers"}, func(string) string { return "" })
	if perr == nil {
		t.Fatal("a payload without a version projected")
	}
	hook := "HTTP 422 Unprocessable Entity: {\"error\": \"unknown field\"}"
	ids := map[string]int64{}
	for _, e := range []struct{ name, etype, status, lastError string }{
		{"mapping", "entity.customer.updated", "failed", "search: " + mapping},
		{"payload", "entity.customer.updated", "failed", "search: " + perr.Error()},
		{"hook", "entity.customer.created", "failed", "crm-hook: " + hook},
		{"order", "entity.order.placed", "failed", "crm-hook: " + hook},
		{"pending", "entity.customer.updated", "pending", ""},
	} {
		var id int64
		if err := db.Pool.QueryRow(ctx, `INSERT INTO aa_outbox_event (event_type, aggregate_type, aggregate_id, payload, status, attempts, last_error)
			VALUES ($1, 'DDM_ENTITY', $2, '{"version": 1}', $3, 10, NULLIF($4, '')) RETURNING id`, e.etype, uuid.New(), e.status, e.lastError).Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids[e.name] = id
	}
	name := func(id int64) string {
		for n, v := range ids {
			if v == id {
				return n
			}
		}
		return strconv.FormatInt(id, 10)
	}

	const token = "filter-test-token"
	smp := lag.NewSampler(lag.NewReader(db.Pool, db.Schema, config.LagConsumers(cfg.Consumers), cfg.Routing()), lag.SamplerConfig{}, nil)
	if _, err := smp.Sample(ctx); err != nil {
		t.Fatal(err)
	}
	events := &dashboard.Events{Admin: outboxadmin.New(db.Schema).WithRouting(cfg.Routing()).WithIndexes(ix), DB: db.Pool, Token: secret.New(token)}
	srv := httptest.NewServer(dashboard.Handler(dashboard.Source{Sampler: smp, Instance: "test", Events: events}))
	t.Cleanup(srv.Close)

	get := func(path string, v any) (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		_ = json.Unmarshal(b, v)
		return resp.StatusCode, string(b)
	}
	list := func(query string) (int, []string, string) {
		t.Helper()
		var page dashboard.EventsPage
		code, body := get("/api/events?"+query, &page)
		var got []string
		for _, e := range page.Events {
			got = append(got, name(e.ID))
		}
		return code, got, body
	}
	class := map[string]string{}
	for _, c := range dashboard.ErrorClasses {
		class[c.Name] = c.Pattern
	}
	q := func(kv ...string) string {
		v := url.Values{}
		for i := 0; i < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return v.Encode()
	}
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{q("error", class["fix-mapping"]), []string{"mapping"}},
		{q("error", class["fix-payload"]), []string{"payload"}},
		{q("error", class["fix-webhook-request"]), []string{"hook", "order"}},
		{q("error", "MAPPER_PARSING"), []string{"mapping"}},
		{q("error", class["check-engine"]), nil},
		// customers is search's alone: what search owes of the customer
		// projection's kinds (hook's outbox row is search's too).
		{q("index", "customers"), []string{"mapping", "payload", "hook"}},
		{q("index", "customers", "status", "pending"), []string{"pending"}},
		{q("index", "customers", "error", "HTTP 4??"), []string{"hook"}},
		{q("index", "customers", "consumer", "search", "error", "engine answered"), []string{"mapping"}},
	} {
		code, got, body := list(tc.query)
		if code != http.StatusOK || !slices.Equal(got, tc.want) {
			t.Errorf("GET /api/events?%s: %d %v, want %v (%s)", tc.query, code, got, tc.want, body)
		}
	}
	for _, tc := range []struct{ query, want string }{
		{q("index", "orders"), `unknown index \"orders\"; the indexes of the search consumers are customers`},
		{q("index", "customers", "consumer", "crm-hook"), `consumer crm-hook does not write it (search does)`},
		{q("error", strings.Repeat("x", 201)), `error: 201 bytes, at most 200`},
	} {
		if code, _, body := list(tc.query); code != http.StatusBadRequest || !strings.Contains(body, tc.want) {
			t.Errorf("GET /api/events?%s: %d %s, want 400 with %q", tc.query, code, body, tc.want)
		}
	}

	// The blocked aggregates (the sampler's snapshot: every failed event
	// heads its own aggregate) take the same filters.
	blocked := func(query string) (int, []string, string) {
		t.Helper()
		var page dashboard.BlockedPage
		code, body := get("/api/blocked?"+query, &page)
		var got []string
		for _, x := range page.Blocked {
			got = append(got, name(x.HeadID))
		}
		slices.Sort(got)
		return code, got, body
	}
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{q("error", class["fix-mapping"]), []string{"mapping"}},
		{q("error", "http 4??"), []string{"hook", "order"}},
		{q("index", "customers"), []string{"hook", "mapping", "payload"}},
		{q("index", "customers", "error", "projection"), []string{"payload"}},
	} {
		if code, got, body := blocked(tc.query); code != http.StatusOK || !slices.Equal(got, tc.want) {
			t.Errorf("GET /api/blocked?%s: %d %v, want %v (%s)", tc.query, code, got, tc.want, body)
		}
	}
	if code, _, body := blocked(q("index", "orders")); code != http.StatusBadRequest || !strings.Contains(body, "the indexes of the search consumers are customers") {
		t.Errorf("GET /api/blocked?index=orders: %d %s", code, body)
	}

	post := func(body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/api/actions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(dashboard.TokenHeader, token)
		req.Header.Set(dashboard.OperatorHeader, "ada")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct{ body, want string }{
		{`{"action": "retry", "filter": {"status": "failed", "index": "orders"}}`, `unknown index \"orders\"`},
		{`{"action": "retry", "filter": {"status": "failed", "error": "` + strings.Repeat("x", 201) + `"}}`, `filter.error: 201 bytes`},
	} {
		if code, body := post(tc.body); code != http.StatusBadRequest || !strings.Contains(body, tc.want) {
			t.Errorf("POST %s: %d %s, want 400 with %q", tc.body, code, body, tc.want)
		}
	}
	status := func(n string) string { return eventStatus(t, db, ids[n]) }
	// A retry by error class moves exactly the matching failed events.
	code, body := post(fmt.Sprintf(`{"action": "retry", "filter": {"status": "failed", "error": %q}}`, class["fix-webhook-request"]))
	if code != http.StatusOK || !strings.Contains(body, `"count":2`) {
		t.Fatalf("retry by error class: %d %s", code, body)
	}
	for n, want := range map[string]string{"hook": "pending", "order": "pending", "mapping": "failed", "payload": "failed"} {
		if got := status(n); got != want {
			t.Errorf("after the retry by error class, %s is %s, want %s", n, got, want)
		}
	}
	// An ack by index for its consumer, dry run: the failed customer events.
	code, body = post(`{"action": "ack", "dry_run": true, "filter": {"index": "customers", "error": "engine answered 400"}}`)
	var ans dashboard.ActionsAnswer
	if err := json.Unmarshal([]byte(body), &ans); code != http.StatusOK || err != nil || ans.Consumer != "search" ||
		!slices.Equal(ans.IDs, []int64{ids["mapping"]}) {
		t.Errorf("ack by index (dry run): %d %s", code, body)
	}
	var params string
	if err := db.Pool.QueryRow(ctx, `SELECT params->>'error' FROM aa_job WHERE job_kind = 'outbox_retry'`).Scan(&params); err != nil ||
		params != class["fix-webhook-request"] {
		t.Errorf("retry job params.error %q (%v)", params, err)
	}

	// The page: the index filter lists the search consumer's indexes, the
	// error dropdown fills the error filter, and the list shows only the
	// matching events.
	bctx := dashboardtest.OpenBrowser(t, srv.URL+"/")
	eval := func(js string) string {
		t.Helper()
		cctx, cancel := context.WithTimeout(bctx, 10*time.Second)
		defer cancel()
		out, err := chromedp.Run(cctx, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		return out
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		return eval(`[...document.querySelectorAll("#f-index option")].map(o => o.value).join()`) == ",customers" &&
			strings.Contains(eval(`[...document.querySelectorAll("#f-errclass option")].map(o => o.textContent).join()`), "fix-mapping")
	}, "the index and error filters never filled: %s", eval(`document.getElementById("f-index").innerHTML`))
	rowsShown := func() string {
		return eval(`[...document.querySelectorAll("#events tbody a[data-open]")].map(a => a.textContent).join()`)
	}
	pick := func(sel, value string) {
		t.Helper()
		eval(fmt.Sprintf(`(() => { const s = document.querySelector(%q); s.value = %q; s.dispatchEvent(new Event("change")); return ""; })()`, sel, value))
	}
	pick("#f-errclass", class["fix-mapping"])
	if got := eval(`document.getElementById("f-error").value`); got != class["fix-mapping"] {
		t.Fatalf("the error class put %q into the error filter, want %q", got, class["fix-mapping"])
	}
	// Show is clicked again while the list is not there yet: on a loaded
	// machine the first answer can come after the page's own first load,
	// or fail (the page then says so and keeps the list it had).
	show := func(want string) bool {
		if rowsShown() == want {
			return true
		}
		eval(`document.getElementById("f-apply").click(); ""`)
		return false
	}
	want := strconv.FormatInt(ids["mapping"], 10)
	testenv.Eventually(t, 30*time.Second, func() bool { return show(want) }, "the list by error class shows %q, want %q", rowsShown(), want)
	pick("#f-errclass", "")
	eval(`document.getElementById("f-error").value = ""; ""`)
	pick("#f-index", "customers")
	want = strconv.FormatInt(ids["mapping"], 10) + "," + strconv.FormatInt(ids["payload"], 10)
	testenv.Eventually(t, 30*time.Second, func() bool { return show(want) }, "the list by index shows %q, want %q", rowsShown(), want)
}
